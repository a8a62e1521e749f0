"""The optional compiled codec module against the pure-Python code, byte for byte.

The pure functions are always tested here (and everywhere else when the extension is absent);
the comparisons run when ``./dev build-ext`` built the extension (``./dev test`` builds it
first).
"""

from __future__ import annotations

import importlib.util
import random
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import frame
from protocol.codes import LanguageCode, SerializeType
from protocol.command import RemotingCommand
from protocol.message import MessageFormatError, _properties, _record, encode_record, iter_records
from storage import _hash
from tests.compiled import needs_compiled as compiled
from tests.compiled import speedups as _speedups

_hosts = st.sampled_from(
    [("127.0.0.1", 0), ("10.0.0.1", 51234), ("192.168.7.9", 10911), ("::1", 9876)]
)
# Names and values of any characters, separators and lone surrogates excluded (they cannot
# be UTF-8 encoded); empty ones too, so some pieces are dropped on decode.
_prop_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_properties_st = st.lists(st.tuples(_prop_text, _prop_text), max_size=6).map(
    lambda pairs: "\x02".join(f"{k}\x01{v}" for k, v in pairs)
)
_record_st = st.builds(
    encode_record,
    topic=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20).filter(
        lambda t: len(t.encode()) <= 127
    ),
    body=st.binary(max_size=64),
    queue_id=st.integers(0, 2**31 - 1),
    flag=st.integers(-(2**31), 2**31 - 1),
    properties=_properties_st,
    sys_flag=st.integers(0, 0xF),
    born_timestamp=st.integers(0, 2**62),
    born_host=_hosts,
    store_host=_hosts,
    store_timestamp=st.integers(0, 2**62),
    queue_offset=st.integers(0, 2**62),
    physical_offset=st.integers(0, 2**62),
    reconsume_times=st.integers(0, 16),
)


def _outcome(fn: Any, data: bytes) -> tuple[str, Any]:
    try:
        return "ok", [attrs.astuple(m) for m in fn(data)]
    except MessageFormatError as exc:
        return "error", str(exc)


@settings(max_examples=200, deadline=None)
@given(st.lists(_record_st, min_size=1, max_size=5))
def test_pure_decode_records_equals_decoding_one_by_one(records: list[bytearray]) -> None:
    data = b"".join(bytes(r) for r in records)
    fast = [attrs.astuple(m) for m in _record.decode_records_py(data)]
    assert fast == [attrs.astuple(m) for m in iter_records(data)]


@compiled
@settings(max_examples=300, deadline=None)
@given(st.lists(_record_st, min_size=1, max_size=5), st.randoms(use_true_random=False))
def test_compiled_decode_records_equals_pure(records: list[bytearray], rnd: random.Random) -> None:
    data = b"".join(bytes(r) for r in records)
    assert _outcome(_speedups.decode_records, data) == _outcome(_record.decode_records_py, data)
    assert _outcome(_speedups.decode_records, memoryview(data)) == _outcome(
        _record.decode_records_py, bytearray(data)
    )
    # Damaged answers: the same records or the same error, at the same offset.
    for _ in range(8):
        damaged = bytearray(data)
        for _ in range(rnd.randint(1, 3)):
            damaged[rnd.randrange(len(damaged))] = rnd.randrange(256)
        cut = bytes(damaged[: rnd.randint(1, len(damaged))])
        for sample in (bytes(damaged), cut):
            assert _outcome(_speedups.decode_records, sample) == _outcome(
                _record.decode_records_py, sample
            )


@compiled
def test_compiled_module_is_the_one_in_use_and_fresh() -> None:
    assert _record.decode_records is _speedups.decode_records
    assert _hash.java_hash is _speedups.java_hash
    assert frame._decode_payload is _speedups.decode_payload
    spec = importlib.util.spec_from_file_location(
        "build_ext", _record.__file__.rsplit("/protocol/", 1)[0] + "/tools/build_ext.py"
    )
    assert spec is not None and spec.loader is not None
    build_ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build_ext)
    assert build_ext.status() == "compiled", "the extension is older than its .pyx: rebuild it"


_any_text = st.text(st.characters(), max_size=40)  # lone surrogates included


@settings(deadline=None)
@given(_any_text)
def test_pure_java_hashes_agree(text: str) -> None:
    expected = _hash.java_hash_uncached(text)
    assert _hash.java_hash_py(text) == expected
    assert _properties.tag_hash_code_py(text) == expected


@compiled
@settings(deadline=None)
@given(_any_text | st.text(st.characters(min_codepoint=0x10000), max_size=10))
def test_compiled_java_hash_equals_pure(text: str) -> None:
    assert _speedups.java_hash(text) == _hash.java_hash_uncached(text)
    assert _properties.tag_hash_code(text) == _properties.tag_hash_code_py(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0), ("TagA", 2598919), ("hello world how are you", -556992217), ("\U0001f600", 1772899)],
)
def test_java_hash_known_values(text: str, expected: int) -> None:
    # Values Java's String.hashCode gives.
    assert _hash.java_hash(text) == expected
    assert _properties.tag_hash_code(text) == expected


_commands = st.builds(
    RemotingCommand,
    st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(0, 3),
    language=st.sampled_from(list(LanguageCode)),
    version=st.integers(-(2**15), 2**15 - 1),
    remark=st.none() | st.text(st.characters(blacklist_categories=("Cs",)), max_size=20),
    ext_fields=st.none()
    | st.dictionaries(
        st.text(st.characters(blacklist_categories=("Cs",)), max_size=8),
        st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
        max_size=5,
    ),
    body=st.none() | st.binary(max_size=40),
    serialize_type=st.sampled_from(list(SerializeType)),
)


def _frame_outcome(fn: Any, data: bytes) -> tuple[str, Any]:
    view = memoryview(data)
    try:
        command = fn(view, 4, len(data) - 4)
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return "ok", tuple(getattr(command, name) for name in RemotingCommand.__slots__)


@compiled
@settings(max_examples=300, deadline=None)
@given(_commands, st.randoms(use_true_random=False))
def test_compiled_frame_decode_equals_pure(command: RemotingCommand, rnd: random.Random) -> None:
    data = frame.encode(command)
    pure = _frame_outcome(frame._decode_payload_py, data)
    assert pure[0] == "ok"
    assert _frame_outcome(_speedups.decode_payload, data) == pure
    # Damaged headers and bodies (the length field kept): same command or same error.
    for _ in range(8):
        damaged = bytearray(data)
        for _ in range(rnd.randint(1, 3)):
            damaged[rnd.randrange(4, len(damaged))] = rnd.randrange(256)
        sample = bytes(damaged)
        assert _frame_outcome(_speedups.decode_payload, sample) == _frame_outcome(
            frame._decode_payload_py, sample
        )


@settings(max_examples=100, deadline=None)
@given(st.lists(_commands, min_size=1, max_size=4), st.integers(1, 64))
def test_frame_decoder_over_any_chunking(commands: list[RemotingCommand], chunk: int) -> None:
    # Whichever payload decoder is in use (compiled when built, else the pure one).
    data = b"".join(frame.encode(c) for c in commands)
    decoder = frame.FrameDecoder()
    out: list[RemotingCommand] = []
    for at in range(0, len(data), chunk):
        out.extend(decoder.feed(data[at : at + chunk]))
    assert [repr(c) for c in out] == [repr(frame.decode(frame.encode(c))) for c in commands]
    assert decoder.buffered == 0


# -- the send path's header fields ------------------------------------------------------------

_V2_WORDS = ["0", "3", "-1", "1795346749782", "1_0", "x", "", " 7", "true", "false", "TRUE"]
_V2_VALUES = st.one_of(
    st.none(),
    st.sampled_from(_V2_WORDS),
    st.text(max_size=8),
    st.integers(-5, 5),
    st.booleans(),
)
_V2_EXT = st.dictionaries(st.sampled_from([*"abcdefghijklmn", "x"]), _V2_VALUES)


def _send_fields_outcome(fn: Any, ext: dict[str, Any]) -> tuple[Any, ...]:
    from protocol.command import RemotingError

    try:
        fields = fn(dict(ext))
    except RemotingError as exc:
        return ("error", exc.code, exc.remark)
    return ("ok", type(fields).__name__, tuple(fields))


@compiled
@settings(max_examples=500, deadline=None)
@given(_V2_EXT, st.booleans())
def test_compiled_send_fields_equal_pure(ext: dict[str, Any], full: bool) -> None:
    from protocol.headers import _send_pull

    if full:  # mostly a whole, valid header with some values replaced
        ext = {**_send_pull.send_v2_fields("pg", "T", "TBW102", 4, 1, 0, 17, 0, "A\x01b"), **ext}
    pure = _send_fields_outcome(_send_pull._decode_send_fields_py, ext)
    assert _send_fields_outcome(_speedups.decode_send_fields, ext) == pure
    assert _send_pull.decode_send_fields is _speedups.decode_send_fields
