"""The compiled loop of the in-place batch write against its pure twin, byte for byte.

`storage.inline_batch` runs ``protocol._speedups``' `batch_records_size` and
`write_batch_records` when ``./dev build-ext`` built them; here both write the same generated
batches into two buffers and must leave the same records, consume-queue entries, offsets and
index keys. Runs only when the extension is built (``./dev test`` builds it first); the pure
path is what tests/storage/test_inline_batch.py checks against the buffer path without it.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import _hash, index_file, inline_batch
from tests.compiled import needs_compiled
from tests.compiled import speedups as _speedups

pytestmark = needs_compiled

# Property strings with the names the dispatch reads, tolerant-parse corner cases (empty
# names or values, a separator inside a value, a name repeated) and non-ASCII text.
_name = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "", "TAG", "UNIQ_KEYS", "K\u00e9"])
_value = st.text(st.sampled_from(["a", "b", " ", "\x01", "\u00e9", "\u4e2d", "\U0001f600"]),
                 max_size=8)  # fmt: skip
_props = st.lists(st.tuples(_name, st.sampled_from(["\x01", ""]), _value), max_size=5).map(
    lambda pieces: "\x02".join(f"{n}{s}{v}" for n, s, v in pieces)
) | st.sampled_from(["", "TAGS\x01TagA", "KEYS\x01k1 k2\x02", "UNIQ_KEY\x01AC11\x02TAGS\x01x"])
_elements = st.lists(
    st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=64), _props),
    min_size=1, max_size=6,
)  # fmt: skip
_header = st.sampled_from([b"", b"WAIT\x01true\x02CLUSTER\x01DefaultCluster", b"\xc3\xa9\x01x"])


def _write(fn: Any, elements: list[tuple[int, bytes, str]], header: bytes, index: bool,
           args: tuple[int, ...]) -> tuple[Any, ...]:  # fmt: skip
    queue_id, sys_flag, born_ts, born_port, now, store_port, reconsume, queue_offset = args
    buf = bytearray(b"\xee" * 4096)
    entries = bytearray(b"old")
    offsets: list[int] = []
    keys: list[tuple[str, int]] | None = [("before", 1)] if index else None
    end = fn(
        memoryview(buf), 7, 1 << 33, elements, header, b"\x05Topic", queue_id, sys_flag,
        born_ts, b"\x7f\x00\x00\x01", born_port, now, b"\x0a\x00\x00\x02", store_port,
        reconsume, queue_offset, entries, offsets, keys, "Topic",
    )  # fmt: skip
    return end, bytes(buf), bytes(entries), offsets, keys


@settings(max_examples=300, deadline=None)
@given(
    _elements,
    _header,
    st.booleans(),
    st.tuples(
        st.integers(0, 2**31 - 1),
        st.integers(0, 0xF) | st.just(0x40),
        st.integers(0, 2**62),
        st.integers(0, 65535),
        st.integers(0, 2**62),
        st.integers(0, 65535),
        st.integers(0, 16),
        st.integers(0, 2**62),
    ),
)
def test_compiled_batch_write_equals_pure(
    elements: list[tuple[int, bytes, str]], header: bytes, index: bool, args: tuple[int, ...]
) -> None:
    fixed = 90 + 6
    for limits in ((4096, 32767), (200, 60), (1 << 20, 5)):
        assert _speedups.batch_records_size(elements, header, fixed, *limits) == (
            inline_batch.batch_records_size_py(elements, header, fixed, *limits)
        )
    if inline_batch.batch_records_size_py(elements, header, fixed, 4000, 32767) < 0:
        return
    compiled = _write(_speedups.write_batch_records, elements, header, index, args)
    pure = _write(inline_batch.write_batch_records_py, elements, header, index, args)
    assert compiled == pure


def test_compiled_batch_write_is_the_one_in_use_and_refuses_an_overrun() -> None:
    assert inline_batch.write_batch_records is _speedups.write_batch_records
    assert inline_batch.batch_records_size is _speedups.batch_records_size
    for fn in (_speedups.write_batch_records, inline_batch.write_batch_records_py):
        with pytest.raises(ValueError, match="overruns the file"):
            fn(memoryview(bytearray(100)), 0, 0, [(0, b"x" * 20, "")], b"", b"\x01T", 0, 0, 0,
               b"\x7f\x00\x00\x01", 0, 0, b"\x7f\x00\x00\x01", 0, 0, 0, bytearray(), [], None,
               "T")  # fmt: skip


# Short keys of any characters, and keys as the store makes them ("<topic>#<UNIQ_KEY>"): a
# few shared heads with varying last characters, which the pure loop hashes from its cache of
# heads (a non-ASCII last character among them, which it must not).
_long_key = st.builds(
    lambda head, tail: head + tail,
    st.sampled_from(["Topic#0A0B0C0D1234ABCDEF01000003", "T#k\u00e9000000000", "T#kkkkkkkkk"]),
    st.text(st.sampled_from(["0", "9", "A", "F", "\u00e9"]), min_size=0, max_size=7),
)
_index_keys = st.lists(
    st.tuples(
        st.text(st.sampled_from(["T", "#", "k", "1", "\u00e9", "\U0001f600"]), max_size=12)
        | _long_key,
        st.integers(0, 2**62),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(_index_keys, st.integers(1, 7), st.integers(0, 45), st.integers(0, 3))
def test_compiled_index_entries_equal_pure(
    keys: list[tuple[str, int]], slots: int, limit: int, start: int
) -> None:
    """Few slots, so buckets chain; a limit below the key count, so the file fills."""
    start = min(start, len(keys))
    for key, _ in keys:
        _hash.java_hash_py(key)  # as the pure store does: the heads are cached from here on
    entries_start = 40 + slots * 4
    size = entries_start + 46 * 20
    outcomes = []
    for fn in (_speedups.put_index_entries, index_file.put_index_entries_py):
        buf = bytearray(size)
        buf[40 : 40 + 4] = (3).to_bytes(4, "big")  # a slot pointing past the entry count
        first = fn(buf, keys, start, slots, entries_start, 1, limit, 17, 0, -1)
        second = fn(buf, keys, 0, slots, entries_start, first[1], limit, 18, first[2], first[3])
        outcomes.append((first, second, bytes(buf)))
    assert outcomes[0] == outcomes[1]
    assert index_file.put_index_entries is _speedups.put_index_entries


def test_an_index_without_slots_is_refused_by_both() -> None:
    for fn in (_speedups.put_index_entries, index_file.put_index_entries_py):
        with pytest.raises(ZeroDivisionError):
            fn(bytearray(100), [("T#k", 1)], 0, 0, 40, 1, 2, 0, 0, 0)


def test_an_index_too_small_for_its_entries_is_refused_alike_by_both() -> None:
    keys = [(f"Topic#0A0B0C0D1234ABCDEF0100{n:04d}", 100 + n) for n in range(6)]
    outcomes = []
    for fn in (_speedups.put_index_entries, index_file.put_index_entries_py):
        buf = bytearray(40 + 4 * 3 + 4 * 20)  # room for entries 0 to 3 only
        with pytest.raises(ValueError, match="index entry 4 lies past the end of the file"):
            fn(buf, keys, 0, 3, 40 + 4 * 3, 1, 100, 5, 0, 0)
        outcomes.append(bytes(buf))
    assert outcomes[0] == outcomes[1]
