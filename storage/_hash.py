"""Java's String.hashCode, fast enough for every key of every message."""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable

_MASK = 0xFFFFFFFF
_POWERS: list[int] = [1]
# Per string length n: the weights 31**(n-1) .. 31**0 mod 2**32, built once per length.
_WEIGHTS: dict[int, list[int]] = {}
_UTF16 = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"


def _weights(n: int) -> list[int]:
    weights = _WEIGHTS.get(n)
    if weights is None:
        while len(_POWERS) < n:
            _POWERS.append((_POWERS[-1] * 31) & _MASK)
        weights = _WEIGHTS[n] = _POWERS[n - 1 :: -1] if n else []
    return weights


def java_hash_uncached(text: str) -> int:
    """``String.hashCode`` over UTF-16 code units as a signed 32-bit int ("" -> 0)."""
    if text.isascii():
        units: bytes | memoryview = text.encode("ascii")
    else:
        # surrogatepass: a lone surrogate is one UTF-16 unit in Java too, not an error.
        units = memoryview(text.encode(_UTF16, "surrogatepass")).cast("H")
    h: int = sum(map(operator.mul, units, _weights(len(units)))) & _MASK
    return h - 0x100000000 if h & 0x80000000 else h


# The hash is linear: h(a + b) = h(a) * 31**len(b) + h(b) (mod 2**32). Index keys are
# "<topic>#<key>" and a producer's UNIQ_KEYs share all but their last few characters (host,
# pid and start time, then a clock and a counter), so the hash of everything but the last
# _TAIL characters is cached and only the tail is hashed per key.
_TAIL = 6
_HEAD_CACHE_LIMIT = 4096
_HEADS: dict[str, int] = {}


def java_hash_py(text: str) -> int:
    """``String.hashCode`` over UTF-16 code units as a signed 32-bit int ("" -> 0).

    Bit for bit `java_hash_uncached`; long ASCII strings reuse the cached hash of their head.
    """
    split = len(text) - _TAIL
    if split < 10 or not text.isascii():
        return java_hash_uncached(text)
    head = text[:split]
    h = _HEADS.get(head)
    if h is None:
        if len(_HEADS) >= _HEAD_CACHE_LIMIT:
            _HEADS.clear()
        h = _HEADS[head] = java_hash_uncached(head) & _MASK
    # The tail's six units unrolled (31**6 .. 31**1 as constants): a loop costs twice as much.
    a, b, c, d, e, f = text[split:].encode("ascii")
    h = (h * 887503681 + a * 28629151 + b * 923521 + c * 29791 + d * 961 + e * 31 + f) & _MASK
    return h - 0x100000000 if h & 0x80000000 else h


#: What the store hashes with: the compiled twin when ``./dev build-ext`` built it (one pass in
#: C, no head cache needed), else `java_hash_py`; tests compare them.
java_hash: Callable[[str], int] = java_hash_py
try:
    from protocol._speedups import java_hash
except ImportError:
    pass

_TAGS_CODES: dict[str, int] = {}


def tags_code(tags: str) -> int:
    """`java_hash` of a TAGS value, cached: a topic has few distinct tags."""
    code = _TAGS_CODES.get(tags)
    if code is None:
        if len(_TAGS_CODES) > 65536:
            _TAGS_CODES.clear()
        code = _TAGS_CODES[tags] = java_hash(tags)
    return code
