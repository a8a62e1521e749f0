"""Frame codec: golden bytes from the reference layouts and property-based round trips."""

from __future__ import annotations

import struct

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.codes import LanguageCode, SerializeType
from protocol.command import RemotingCommand
from protocol.frame import (
    FrameDecoder,
    FrameError,
    FrameTooLargeError,
    decode,
    encode,
    encode_answer,
    encode_parts,
)

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_ext = st.one_of(st.none(), st.dictionaries(_text, _text, max_size=8))


@st.composite
def commands(draw: st.DrawFn) -> RemotingCommand:
    return RemotingCommand(
        draw(st.integers(-(2**15), 2**15 - 1)),
        opaque=draw(st.integers(-(2**31), 2**31 - 1)),
        flag=draw(st.integers(0, 3)),
        language=draw(st.sampled_from(list(LanguageCode))),
        version=draw(st.integers(0, 2**15 - 1)),
        remark=draw(st.one_of(st.none(), _text.filter(bool))),
        ext_fields=draw(_ext),
        body=draw(st.one_of(st.none(), st.binary(min_size=1, max_size=300))),
        serialize_type=draw(st.sampled_from(list(SerializeType))),
    )


@settings(max_examples=300, deadline=None)
@given(commands())
def test_round_trip_both_serialize_types(command: RemotingCommand) -> None:
    decoded = decode(encode(command))
    if command.serialize_type == SerializeType.ROCKETMQ and command.ext_fields == {}:
        command.ext_fields = None  # an empty map block decodes as no map, as in Java
    assert decoded == command


@settings(max_examples=100, deadline=None)
@given(st.lists(commands(), min_size=1, max_size=6), st.data())
def test_stream_decoder_handles_any_split(cmds: list[RemotingCommand], data: st.DataObject) -> None:
    stream = b"".join(encode(c) for c in cmds)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=5)))
    decoder = FrameDecoder()
    out: list[RemotingCommand] = []
    last = 0
    for cut in [*cuts, len(stream)]:
        out.extend(decoder.feed(stream[last:cut]))
        last = cut
    assert [(c.code, c.opaque, c.body or None) for c in out] == [
        (c.code, c.opaque, c.body or None) for c in cmds
    ]
    assert decoder.buffered == 0


def test_json_golden_layout() -> None:
    command = RemotingCommand(
        105, opaque=7, flag=0, language=LanguageCode.JAVA, version=409, ext_fields={"topic": "T"}
    )
    data = encode(command)
    length, word = struct.unpack_from(">iI", data)
    assert length == len(data) - 4
    assert word >> 24 == 0
    header = data[8 : 8 + (word & 0xFFFFFF)]
    assert orjson.loads(header) == {
        "code": 105,
        "language": "JAVA",
        "version": 409,
        "opaque": 7,
        "flag": 0,
        "extFields": {"topic": "T"},
    }
    assert len(data) == 8 + len(header)  # no body bytes


def test_rocketmq_binary_golden_layout() -> None:
    command = RemotingCommand(
        10,
        opaque=3,
        flag=1,
        language=LanguageCode.CPP,
        version=333,
        remark="ok",
        ext_fields={"a": "bc"},
        body=b"XY",
        serialize_type=SerializeType.ROCKETMQ,
    )
    header = (
        struct.pack(">hbhii", 10, 1, 333, 3, 1)
        + struct.pack(">i", 2)
        + b"ok"
        + struct.pack(">i", 2 + 1 + 4 + 2)
        + struct.pack(">h", 1)
        + b"a"
        + struct.pack(">i", 2)
        + b"bc"
    )
    expected = struct.pack(">iI", 4 + len(header) + 2, (1 << 24) | len(header)) + header + b"XY"
    assert encode(command) == expected
    assert len(header) == 21 + 2 + 9  # fixed part + remark + one entry


def test_cpp_numbers_and_booleans_in_ext_fields_become_strings() -> None:
    header = orjson.dumps(
        {
            "code": 11,
            "language": "CPP",
            "version": 63,
            "opaque": 1,
            "flag": 0,
            "remark": "",
            "extFields": {"queueId": 0, "maxMsgNums": 32, "batch": False, "x": "s", "n": None},
        }
    )
    data = struct.pack(">iI", 4 + len(header), len(header)) + header
    command = decode(data)
    assert command.ext_fields == {"queueId": "0", "maxMsgNums": "32", "batch": "false", "x": "s"}
    assert command.language == LanguageCode.CPP


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (struct.pack(">iI", 4 + 5, 5) + b"[1,2]", "not an object"),
        (struct.pack(">iI", 4 + 9, 9) + b'{"code":1', "does not parse"),
        (struct.pack(">iI", 4 + 2, (5 << 24) | 2) + b"{}", "serialize type"),
        (struct.pack(">iI", 4 + 12, 12) + b'{"code":"x"}', "integer code"),
        (struct.pack(">iI", 4 + 3, (1 << 24) | 3) + b"abc", "21-byte"),
    ],
)
def test_bad_frames_raise_frame_error(data: bytes, message: str) -> None:
    with pytest.raises(FrameError, match=message):
        decode(data)
    with pytest.raises(FrameError, match=message):
        FrameDecoder().feed(data)


def test_frame_limit_is_enforced_before_the_bytes_arrive() -> None:
    decoder = FrameDecoder(limit=1024)
    with pytest.raises(FrameTooLargeError, match="exceeds the limit of 1024"):
        decoder.feed(struct.pack(">i", 2048))
    with pytest.raises(FrameError, match="smaller than"):
        FrameDecoder().feed(struct.pack(">i", 2) + b"\0\0")


def test_whole_message_length_mismatch() -> None:
    data = encode(RemotingCommand(1, opaque=1))
    with pytest.raises(FrameError, match="length field"):
        decode(data + b"extra")


_TEXT = st.text(max_size=40)


@settings(max_examples=300, deadline=None)
@given(
    code=st.integers(-(2**15), 2**15 - 1),  # a short in the ROCKETMQ layout
    opaque=st.integers(-(2**31), 2**31 - 1),
    serialize=st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ]),
    ext=st.dictionaries(_TEXT, _TEXT, max_size=6),
)
def test_encode_answer_is_the_generic_response_byte_for_byte(
    code: int, opaque: int, serialize: SerializeType, ext: dict[str, str]
) -> None:
    request = RemotingCommand(
        310, opaque=opaque, language=LanguageCode.CPP, version=1, serialize_type=serialize
    )
    expected = encode_parts(request.response(code, None, dict(ext)))
    assert expected[1] is None
    assert encode_answer(request, code, dict(ext)) == expected[0]
    if serialize == SerializeType.JSON:
        assert decode(expected[0]) == request.response(code, None, ext)
