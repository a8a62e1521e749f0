"""The compiled batch-body decoder against the pure one, result for result, error for error.

Runs when ``./dev build-ext`` built ``protocol._speedups`` (``./dev test`` builds it first);
the pure decoder is tested everywhere else too (tests/protocol/test_message.py and the fuzz
targets).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.message import MessageFormatError, _batch
from protocol.message._batch import encode_batch_tuples
from tests.compiled import needs_compiled
from tests.compiled import speedups as _speedups

pytestmark = needs_compiled

# Any characters but lone surrogates (they cannot be UTF-8 encoded), separators included.
_props = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_elements = st.lists(
    st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=80), _props), max_size=6
)


def _outcome(fn: Any, data: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(data)
    except MessageFormatError as exc:
        return "error", str(exc)


@settings(max_examples=300, deadline=None)
@given(_elements, st.randoms(use_true_random=False))
def test_compiled_decode_batch_equals_pure(
    elements: list[tuple[int, bytes, str]], rnd: random.Random
) -> None:
    data = encode_batch_tuples(elements)
    decoded = _speedups.decode_batch_tuples(data)
    assert decoded == _batch.decode_batch_tuples_py(data) == elements
    assert all(type(body) is bytes for _, body, _ in decoded)
    assert _speedups.decode_batch_tuples(memoryview(data)) == elements
    assert _speedups.decode_batch_tuples(bytearray(data)) == elements
    if not data:
        return
    # Damaged bodies (sizes, bytes that are not UTF-8, cut short): the same elements or the
    # same error.
    for _ in range(8):
        damaged = bytearray(data)
        for _ in range(rnd.randint(1, 3)):
            damaged[rnd.randrange(len(damaged))] = rnd.randrange(256)
        cut = bytes(damaged[: rnd.randint(1, len(damaged))])
        for sample in (bytes(damaged), cut):
            assert _outcome(_speedups.decode_batch_tuples, sample) == _outcome(
                _batch.decode_batch_tuples_py, sample
            )


def test_compiled_decode_batch_is_the_one_in_use() -> None:
    assert _batch.decode_batch_tuples is _speedups.decode_batch_tuples
    with pytest.raises(MessageFormatError, match="cut short"):
        _batch.decode_batch_tuples(b"\x00" * 10)
