"""The pure batch-body decoder's quick reads against its element-by-element checking read.

`protocol.message._batch.decode_batch_tuples_py` reads a batch whose elements share their
sizes a column at a time and any other one with one test per element, leaving a fault to
`_decode_batch_checked` to name: for any body, intact or damaged, all three must agree on
the elements or the error. Runs on any path (no compiled code involved).
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.message import MessageFormatError
from protocol.message._batch import (
    _FLAT_MAX,
    SameSizedElements,
    _decode_batch_checked,
    _decode_same_sized,
    decode_batch_tuples_py,
    encode_batch_tuples,
)

# Same-sized elements: one body length and one properties length (in UTF-8 bytes) for all.
_same_sized = st.tuples(
    st.integers(2, 6),
    st.integers(0, 40),
    st.sampled_from(["", "WAIT\x01true\x02UNIQ_KEY\x01", "K\u00e9\x01", "\U0001f600"]),
    st.lists(st.integers(-(2**31), 2**31 - 1), min_size=6, max_size=6),
).map(
    lambda t: [(t[3][k], bytes([k]) * t[1], t[2] + f"{k:02d}" if t[2] else "") for k in range(t[0])]
)
_any = st.lists(
    st.tuples(
        st.integers(-(2**31), 2**31 - 1),
        st.binary(max_size=40),
        st.text(st.characters(codec="utf-8"), max_size=20),
    ),
    max_size=5,
)


def _outcome(fn: Any, data: bytes) -> tuple[str, Any]:
    try:
        return "ok", fn(data)
    except MessageFormatError as exc:
        return "error", str(exc)


@settings(max_examples=300, deadline=None)
@given(_same_sized | _any, st.randoms(use_true_random=False))
def test_the_quick_reads_agree_with_the_checking_read(
    elements: list[tuple[int, bytes, str]], rnd: random.Random
) -> None:
    data = encode_batch_tuples(elements)
    assert decode_batch_tuples_py(data) == _decode_batch_checked(data) == elements
    assert decode_batch_tuples_py(memoryview(data)) == elements
    sizes = {(len(body), len(props.encode())) for _, body, props in elements}
    if len(elements) >= 2 and len(sizes) == 1:
        same = _decode_same_sized(data, len(data))  # read a column at a time
        assert same == elements
        # ... with the columns the broker's batch write takes instead of the tuples.
        assert type(same) is SameSizedElements
        assert list(zip(same.flags, same.bodies, same.properties, strict=True)) == elements
        assert same.raw_properties == tuple(props.encode() for _, _, props in elements)
    # Damaged bodies (sizes, bytes that are not UTF-8, cut short): the same elements or the
    # same error.
    for _ in range(8 if data else 0):
        damaged = bytearray(data)
        for _ in range(rnd.randint(1, 3)):
            damaged[rnd.randrange(len(damaged))] = rnd.randrange(256)
        cut = bytes(damaged[: rnd.randint(1, len(damaged))])
        for sample in (bytes(damaged), cut):
            assert _outcome(decode_batch_tuples_py, sample) == _outcome(
                _decode_batch_checked, sample
            )


def test_a_same_sized_batch_reads_alike_with_one_struct_or_one_per_element() -> None:
    """Up to `_FLAT_MAX` elements one cached struct reads the whole batch; a longer batch is
    read element by element (a struct that long would hold much memory in the cache)."""
    for count in (2, _FLAT_MAX, _FLAT_MAX + 1, 3 * _FLAT_MAX):
        elements = [(k % 5, bytes([k % 256]) * 7, f"UNIQ_KEY\x01{k:06X}") for k in range(count)]
        data = encode_batch_tuples(elements)
        same = _decode_same_sized(data, len(data))
        assert type(same) is SameSizedElements and same == elements
        assert same.raw_properties == tuple(props.encode() for _, _, props in elements)
        # The last element's properties length off by one (its TOTALSIZE kept): not read as
        # same-sized.
        damaged = bytearray(data)
        damaged[len(data) - len(elements[-1][2]) - 1] ^= 1
        assert _decode_same_sized(bytes(damaged), len(data)) is None
