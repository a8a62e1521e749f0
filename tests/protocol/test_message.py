"""The message record codec: golden layouts from the reference sheet, round trips, bad input.

Byte positions and sizes below are the sheet's (section 5), written out as numbers on purpose,
so a change to the codec's own position table cannot make these tests agree with it.
"""

from __future__ import annotations

import datetime
import ipaddress
import itertools
import os
import struct
import subprocess
import sys
import time
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.message import (
    BLANK_MAGIC_CODE,
    MAGIC_CODE,
    BatchElement,
    MessageConst,
    MessageFormatError,
    MessageSysFlag,
    body_crc,
    compress_body,
    crc32,
    create_uniq_id,
    decode_batch,
    decode_offset_msg_id,
    decode_record,
    decode_records,
    encode_batch,
    encode_record,
    iter_records,
    offset_msg_id,
    patch_record,
    peek_record_header,
    properties_to_string,
    record_field_positions,
    record_size,
    string_to_properties,
    tag_hash_code,
)

INT, LONG, SHORT = struct.Struct(">i"), struct.Struct(">q"), struct.Struct(">h")
PROPS = "TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01AC11000100002A9F0000000000000001"


def _int(buf: bytes | bytearray, pos: int) -> int:
    return int(INT.unpack_from(buf, pos)[0])


def _long(buf: bytes | bytearray, pos: int) -> int:
    return int(LONG.unpack_from(buf, pos)[0])


def _record(**overrides: object) -> bytearray:
    fields: dict[str, object] = dict(
        topic="T1", body=b"hello", queue_id=3, flag=9, properties=PROPS, born_timestamp=1111,
        born_host=("10.0.0.1", 5000), store_host=("10.0.0.2", 10911), store_timestamp=2222,
        queue_offset=44, physical_offset=5555, reconsume_times=2, prepared_transaction_offset=66,
    )  # fmt: skip
    fields.update(overrides)
    return encode_record(**fields)  # type: ignore[arg-type]


# --- golden layout (sheet 5.1, 5.2) ---------------------------------------------------------


def test_magic_codes_are_the_sheets_words() -> None:
    assert INT.pack(MAGIC_CODE) == bytes.fromhex("DAA320A7") and MAGIC_CODE == -626843481
    assert INT.pack(BLANK_MAGIC_CODE) == bytes.fromhex("CBD43194")
    assert BLANK_MAGIC_CODE == -875286124


def test_golden_ipv4_record_layout() -> None:
    record = _record()
    props = PROPS.encode()
    assert len(record) == 91 + 5 + 2 + len(props) == record_size(5, 2, len(props))
    assert _int(record, 0) == len(record) and _int(record, 4) == MAGIC_CODE
    assert _int(record, 8) == zlib.crc32(b"hello") & 0x7FFFFFFF
    assert _int(record, 12) == 3 and _int(record, 16) == 9
    assert _long(record, 20) == 44 and _long(record, 28) == 5555
    assert _int(record, 36) == 0 and _long(record, 40) == 1111
    assert record[48:52] == bytes([10, 0, 0, 1]) and _int(record, 52) == 5000
    assert _long(record, 56) == 2222
    assert record[64:68] == bytes([10, 0, 0, 2]) and _int(record, 68) == 10911
    assert _int(record, 72) == 2 and _long(record, 76) == 66
    assert _int(record, 84) == 5 and record[88:93] == b"hello"
    assert record[93] == 2 and record[94:96] == b"T1"
    assert SHORT.unpack_from(record, 96)[0] == len(props) and record[98:] == props
    positions = record_field_positions(0)
    assert (positions.queue_offset, positions.physical_offset, positions.sys_flag) == (20, 28, 36)
    assert (positions.born_host, positions.store_timestamp, positions.store_host) == (48, 56, 64)
    assert (positions.reconsume_times, positions.prepared_transaction_offset) == (72, 76)
    assert positions.body_length == 84


def test_golden_ipv6_born_host_shifts_everything_after_it_by_twelve() -> None:
    record = _record(born_host=("2001:db8::1", 5000))
    assert len(record) == 91 + 12 + 5 + 2 + len(PROPS)
    assert _int(record, 36) == MessageSysFlag.BORNHOST_V6 == 0x10
    assert record[48:64] == ipaddress.IPv6Address("2001:db8::1").packed
    assert _int(record, 64) == 5000 and _long(record, 68) == 2222
    assert record[76:80] == bytes([10, 0, 0, 2]) and _int(record, 80) == 10911
    assert _int(record, 84) == 2 and _long(record, 88) == 66 and _int(record, 96) == 5
    assert record_field_positions(0x10).store_timestamp == 68


def test_golden_both_hosts_ipv6() -> None:
    record = _record(born_host=("::1", 1), store_host=("fe80::2", 10911))
    assert len(record) == record_size(5, 2, len(PROPS), born_v6=True, store_v6=True)
    assert len(record) == 91 + 24 + 5 + 2 + len(PROPS)
    assert _int(record, 36) == 0x30
    assert record[76:92] == ipaddress.IPv6Address("fe80::2").packed and _int(record, 92) == 10911
    assert _int(record, 96) == 2 and _long(record, 100) == 66 and _int(record, 108) == 5
    decoded = decode_record(record)
    assert decoded.born_host == ("::1", 1) and decoded.store_host == ("fe80::2", 10911)
    only_store = _record(store_host=("fe80::2", 1))
    assert _int(only_store, 36) == MessageSysFlag.STOREHOST_V6 == 0x20


def test_host_flags_follow_the_hosts_not_the_callers_sys_flag() -> None:
    v4 = _record(sys_flag=0x30 | MessageSysFlag.COMPRESSED)
    assert _int(v4, 36) == MessageSysFlag.COMPRESSED and len(v4) == 91 + 7 + len(PROPS)


def test_ipv4_mapped_ipv6_is_written_as_ipv4() -> None:
    mapped = _record(born_host=("::ffff:1.2.3.4", 7), store_host=("::ffff:10.0.0.2", 10911))
    assert len(mapped) == len(_record()) and _int(mapped, 36) == 0
    assert mapped[48:52] == bytes([1, 2, 3, 4]) and mapped[64:68] == bytes([10, 0, 0, 2])
    assert decode_record(mapped).born_host == ("1.2.3.4", 7)


def test_blank_record_is_peeked_not_decoded() -> None:
    blank = INT.pack(4096) + INT.pack(BLANK_MAGIC_CODE) + bytes(200)
    assert peek_record_header(blank, 0) == (4096, BLANK_MAGIC_CODE)
    with pytest.raises(MessageFormatError, match=r"offset 0.*magic"):
        decode_record(blank)
    with pytest.raises(MessageFormatError, match="offset 3"):
        peek_record_header(bytes(10), 3)


def test_encode_limits() -> None:
    assert decode_record(_record(topic="t" * 127)).topic == "t" * 127
    with pytest.raises(MessageFormatError, match="topic"):
        _record(topic="t" * 128)
    with pytest.raises(MessageFormatError, match="topic"):
        _record(topic="\u00e9" * 64)  # 64 characters but 128 bytes
    assert len(_record(properties=b"p" * 32767)) == 91 + 7 + 32767
    with pytest.raises(MessageFormatError, match="properties"):
        _record(properties=b"p" * 32768)
    with pytest.raises(MessageFormatError, match="not an IP"):
        _record(store_host=("broker-a", 10911))


# --- round trips ----------------------------------------------------------------------------

port = st.integers(0, 65535)
hosts = st.one_of(
    st.tuples(st.ip_addresses(v=4).map(str), port),
    st.tuples(st.ip_addresses(v=6).map(ipaddress.IPv6Address).filter(
        lambda a: a.ipv4_mapped is None).map(str), port),
)  # fmt: skip
name_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]))
props_dicts = st.dictionaries(
    name_text.filter(bool).map(lambda s: s[:10]), name_text.filter(bool).map(lambda s: s[:20]),
    max_size=5,
)  # fmt: skip
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


@given(
    topic=st.text(min_size=1, max_size=30).filter(lambda t: len(t.encode()) <= 127),
    body=st.binary(max_size=2000), queue_id=int32, flag=int32, props=props_dicts,
    sys_flag=st.sampled_from([0, 1, 2, 4, 8, 0xC, 0x301, 0x40, 0x80]), born=hosts, store=hosts,
    times=st.tuples(int64, int64), offsets=st.tuples(int64, int64, int64), reconsume=int32,
    topic_as_bytes=st.booleans(),
)  # fmt: skip
@settings(max_examples=200)
def test_record_round_trip(
    topic: str, body: bytes, queue_id: int, flag: int, props: dict[str, str], sys_flag: int,
    born: tuple[str, int], store: tuple[str, int], times: tuple[int, int],
    offsets: tuple[int, int, int], reconsume: int, topic_as_bytes: bool,
) -> None:  # fmt: skip
    encoded = encode_record(
        topic=topic.encode() if topic_as_bytes else topic, body=body, queue_id=queue_id,
        flag=flag, properties=properties_to_string(props), sys_flag=sys_flag,
        born_timestamp=times[0], born_host=born, store_host=store, store_timestamp=times[1],
        queue_offset=offsets[0], physical_offset=offsets[1], reconsume_times=reconsume,
        prepared_transaction_offset=offsets[2],
    )  # fmt: skip
    v6 = (":" in born[0], ":" in store[0])
    props_len = len(properties_to_string(props).encode())
    assert len(encoded) == record_size(
        len(body), len(topic.encode()), props_len, born_v6=v6[0], store_v6=v6[1]
    )
    m = decode_record(encoded, check_crc=True)
    assert (m.topic, m.body, m.queue_id, m.flag, m.properties) == (
        topic, body, queue_id, flag, props,
    )  # fmt: skip
    assert m.sys_flag == sys_flag | (0x10 if v6[0] else 0) | (0x20 if v6[1] else 0)
    assert (m.born_timestamp, m.store_timestamp) == times
    assert (m.queue_offset, m.commit_log_offset, m.prepared_transaction_offset) == offsets
    assert (m.born_host, m.store_host, m.reconsume_times) == (born, store, reconsume)
    assert m.store_size == len(encoded) and m.body_crc == body_crc(body)
    assert decode_record(memoryview(encoded)) == m
    assert decode_record(bytes(encoded), read_body=False).body == b""


@given(st.lists(st.tuples(hosts, hosts, st.binary(max_size=200), props_dicts), max_size=8))
@settings(max_examples=100)
def test_iter_records_over_concatenated_records(
    items: list[tuple[tuple[str, int], tuple[str, int], bytes, dict[str, str]]],
) -> None:
    records = [
        encode_record(
            topic=f"T{i}",
            body=body,
            queue_id=i,
            born_host=born,
            store_host=store,
            properties=properties_to_string(props),
            queue_offset=i,
        )
        for i, (born, store, body, props) in enumerate(items)
    ]
    pull_body = b"".join(records)
    decoded = list(iter_records(pull_body))
    assert [(m.topic, m.body, m.born_host, m.store_host, m.properties) for m in decoded] == [
        (f"T{i}", body, born, store, props) for i, (born, store, body, props) in enumerate(items)
    ]
    assert [m.store_size for m in decoded] == [len(r) for r in records]
    headless = list(iter_records(memoryview(pull_body), read_body=False))
    assert [m.queue_offset for m in headless] == list(range(len(items)))
    assert all(m.body == b"" for m in headless)


@given(
    st.lists(st.tuples(hosts, hosts, st.binary(max_size=200), props_dicts), max_size=6),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3),
    st.integers(0, 10**6),
    st.booleans(),
)  # fmt: skip
@settings(max_examples=300)
def test_decode_records_equals_iter_records_even_on_bad_input(
    items: list[tuple[tuple[str, int], tuple[str, int], bytes, dict[str, str]]],
    mangles: list[tuple[int, int]],
    cut: int,
    as_view: bool,
) -> None:
    pull_body = bytearray(b"".join(
        encode_record(topic=f"T{i}", body=body, queue_id=i, born_host=born, store_host=store,
                      properties=properties_to_string(props), born_timestamp=i)
        for i, (born, store, body, props) in enumerate(items)
    ))  # fmt: skip
    for pos, value in mangles:
        if pull_body:
            pull_body[pos % len(pull_body)] = value
    data = bytes(pull_body[: cut % (len(pull_body) + 1)])

    try:
        expected: object = list(iter_records(data))
    except MessageFormatError as exc:
        expected = str(exc)
    try:
        found: object = decode_records(memoryview(data) if as_view else data)
    except MessageFormatError as exc:
        found = str(exc)
    assert found == expected


@pytest.mark.parametrize("topic_len", [100, 127, 128, 255])
def test_decode_records_refuses_a_topic_length_past_the_end(topic_len: int) -> None:
    pull_body = bytearray(_record()) * 2
    pull_body[-len(PROPS.encode()) - 2 - len(b"T1") - 1] = topic_len  # the last TOPICLEN byte
    with pytest.raises(MessageFormatError, match=f"offset {len(pull_body) // 2}: topic length"):
        decode_records(bytes(pull_body))


def test_iter_records_stops_at_a_cut_record() -> None:
    pull_body = bytes(_record()) * 2
    cut = pull_body[:-3]
    records = iter_records(cut)
    assert next(records).body == b"hello"
    with pytest.raises(MessageFormatError, match=f"offset {len(pull_body) // 2}"):
        next(records)


@pytest.mark.parametrize("born_host", [("10.0.0.1", 1), ("2001:db8::1", 1)])
def test_patch_record_writes_only_the_append_time_fields(born_host: tuple[str, int]) -> None:
    record = _record(born_host=born_host)
    buf = bytearray(b"\xee" * 100) + record + b"\xee" * 10
    before = bytes(buf)
    patch_record(memoryview(buf), 100, queue_offset=-7, physical_offset=2**40, store_timestamp=9)
    store_ts = 56 if born_host[0].count(".") == 3 else 68
    changed = {i for i in range(len(buf)) if buf[i] != before[i]}
    allowed = set(range(120, 136)) | set(range(100 + store_ts, 108 + store_ts))
    assert changed and changed <= allowed
    patched = decode_record(buf, 100, check_crc=True)
    assert (patched.queue_offset, patched.commit_log_offset, patched.store_timestamp) == (
        -7, 2**40, 9,
    )  # fmt: skip
    assert patched.born_host == born_host and patched.born_timestamp == 1111


# --- corrupt records ------------------------------------------------------------------------


def _with(record: bytes, pos: int, packed: bytes) -> bytes:
    return record[:pos] + packed + record[pos + len(packed) :]


GOOD = bytes(_record())


@pytest.mark.parametrize(
    ("buf", "words"),
    [
        (_with(GOOD, 4, INT.pack(0x12345678)), "bad magic code 0x12345678"),
        (GOOD[:60], "too short"),
        (GOOD[:-1], "overruns"),
        (_with(GOOD, 0, INT.pack(50)), "size 50"),
        (_with(GOOD, 0, INT.pack(-1)), "size -1"),
        (_with(GOOD, 84, INT.pack(10_000)), "body length 10000"),
        (_with(GOOD, 84, INT.pack(-5)), "body length -5"),
        (_with(GOOD, 93, b"\x7f"), "topic length 127"),
        (_with(GOOD, 93, b"\xc8"), "topic length 200"),
        (_with(GOOD, 96, SHORT.pack(len(PROPS) - 1)), "properties length"),
        (_with(GOOD, 96, SHORT.pack(-1)), "properties length -1"),
        (_with(GOOD, 94, b"\xff\xfe"), "utf-8"),
    ],
)
@pytest.mark.parametrize("pos", [0, 13])
def test_corrupt_records_name_their_offset(buf: bytes, words: str, pos: int) -> None:
    with pytest.raises(MessageFormatError, match=f"(?i)offset {pos}\\b.*{words}"):
        decode_record(b"\x00" * pos + buf, pos)


def test_crc_mismatch_only_when_checked() -> None:
    flipped = bytearray(GOOD)
    flipped[88] ^= 0xFF
    with pytest.raises(MessageFormatError, match=r"offset 0.*CRC mismatch"):
        decode_record(flipped, check_crc=True)
    assert decode_record(flipped).body == bytes([ord("h") ^ 0xFF]) + b"ello"
    assert decode_record(GOOD, check_crc=True).body == b"hello"


@given(st.data())
@settings(max_examples=200)
def test_mangled_records_raise_only_message_format_error(data: st.DataObject) -> None:
    record = bytearray(_record(born_host=data.draw(hosts), store_host=data.draw(hosts)))
    for _ in range(data.draw(st.integers(1, 4))):
        record[data.draw(st.integers(0, len(record) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(record)))
    try:
        decode_record(record[:cut], check_crc=data.draw(st.booleans()))
    except MessageFormatError:
        pass


# --- properties, tags, crc, compression -------------------------------------------------------


def test_properties_string_rules() -> None:
    assert properties_to_string({"A": "1", "B": "2"}) == "A\x011\x02B\x012"
    assert properties_to_string({"A": "", "": "x", "C": "3"}) == "C\x013"
    assert properties_to_string({}) == ""
    # Java drops pieces without a name or a value; the C++ client ends with a separator.
    assert string_to_properties("A\x011\x02B\x01\x02\x01x\x02C\x013\x02") == {"A": "1", "C": "3"}
    assert string_to_properties("A\x011\x02\x02\x02noseparator\x02B\x012") == {"A": "1", "B": "2"}
    assert string_to_properties("K\x01a\x01b") == {"K": "a\x01b"}  # value is all after the 1st
    assert string_to_properties("") == {} and string_to_properties("\x02") == {}
    assert string_to_properties("K\x011\x02K\x012") == {"K": "2"}  # last one wins, as a HashMap


@given(props_dicts, st.booleans())
@settings(max_examples=200)
def test_properties_round_trip(props: dict[str, str], cpp_trailing: bool) -> None:
    text = properties_to_string(props)
    assert not text.endswith("\x02")
    assert string_to_properties(text + ("\x02" if cpp_trailing else "")) == props


@given(st.binary(max_size=5000), st.integers(0, 2**32 - 1), st.integers(0, 64))
@settings(max_examples=300)
def test_crc32_is_zlibs(body: bytes, seed: int, cut: int) -> None:
    # BODYCRC is zlib's CRC-32 whichever library computes it (zlib-ng's where installed),
    # over any length, from any start value, and over a view into a larger buffer.
    assert crc32(body) == zlib.crc32(body)
    assert crc32(body, seed) == zlib.crc32(body, seed)
    view = memoryview(body)[cut:]
    assert crc32(view) == zlib.crc32(view)
    assert body_crc(body) == zlib.crc32(body) & 0x7FFFFFFF


def test_crc32_falls_back_to_zlib_without_zlib_ng() -> None:
    # A platform zlib-ng has no wheel for installs without it: the format still imports, with
    # zlib's own crc32 (a None entry in sys.modules makes the import fail as if absent).
    code = (
        "import sys, zlib; sys.modules['zlib_ng'] = None; "
        "from protocol.message import _format; "
        "assert _format.crc32 is zlib.crc32, _format.crc32; "
        "print(_format.body_crc(b'hello'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert int(out) == zlib.crc32(b"hello") & 0x7FFFFFFF


def _java_hash(text: str) -> int:
    """String.hashCode as the closed sum s[0]*31^(n-1) + ... + s[n-1], taken mod 2^32."""
    raw = text.encode("utf-16-be", "surrogatepass")
    units = struct.unpack(f">{len(raw) // 2}H", raw)
    n = len(units)
    h: int = sum(u * pow(31, n - 1 - i, 2**32) for i, u in enumerate(units)) % 2**32
    return h - 2**32 if h >= 2**31 else h


def test_tag_hash_code_is_java_string_hash() -> None:
    assert tag_hash_code("*") == 42
    assert tag_hash_code("TagA") == 2598919
    assert tag_hash_code("") == 0 and tag_hash_code(None) == 0
    assert tag_hash_code("Aa") == tag_hash_code("BB") == 2112
    assert tag_hash_code("Hello World") == -862545276  # wraps past 2^31 to negative
    assert tag_hash_code("polygenelubricants") == -(2**31)
    assert tag_hash_code("\u00e9") == 0xE9  # one UTF-16 unit, not the two UTF-8 bytes
    assert tag_hash_code("\u4e2d\u6587") == 31 * 0x4E2D + 0x6587 == 646394
    # A surrogate pair hashes as two UTF-16 units; a lone surrogate as one.
    assert tag_hash_code("\U0001f600") == 31 * 0xD83D + 0xDE00 == 1772899
    assert tag_hash_code("a\ud83d") == 31 * ord("a") + 0xD83D


@given(st.text(st.characters(blacklist_categories=[]), max_size=40))
@settings(max_examples=200)
def test_tag_hash_code_matches_the_closed_form(tag: str) -> None:
    assert tag_hash_code(tag) == _java_hash(tag)
    assert -(2**31) <= tag_hash_code(tag) < 2**31


def test_body_crc() -> None:
    assert zlib.crc32(b"123456789") == 0xCBF43926  # the CRC-32 check value
    assert body_crc(b"123456789") == 0x4BF43926  # top bit masked off
    assert body_crc(b"") == 0 and body_crc(memoryview(b"abc")) == body_crc(b"abc")
    assert _int(_record(body=b"123456789"), 8) == 0x4BF43926


@pytest.mark.parametrize(
    "sys_flag",
    [MessageSysFlag.COMPRESSED, MessageSysFlag.COMPRESSED | MessageSysFlag.COMPRESSION_ZLIB],
)
def test_compressed_body(sys_flag: int) -> None:
    raw = b"abc" * 2000
    compressed = compress_body(raw)
    assert compressed == zlib.compress(raw, 5) and len(compressed) < len(raw)
    decoded = decode_record(_record(body=compressed, sys_flag=sys_flag), check_crc=True)
    assert decoded.body == compressed and decoded.decompressed_body() == raw
    assert decoded.body_crc == body_crc(compressed)  # the CRC covers the stored bytes
    assert decode_record(_record(body=raw)).decompressed_body() == raw
    with pytest.raises(MessageFormatError, match="inflate"):
        decode_record(_record(body=b"not zlib", sys_flag=sys_flag)).decompressed_body()


def test_message_ext_views() -> None:
    m = decode_record(_record())
    assert m.tags == "TagA" and m.keys == ["k1", "k2"]
    assert m.msg_id == "AC11000100002A9F0000000000000001"
    assert m.offset_msg_id == "0A000002" + "00002A9F" + "00000000000015B3"
    bare = decode_record(_record(properties=""))
    assert bare.properties == {} and bare.tags is None and bare.keys == []
    assert bare.msg_id == bare.offset_msg_id
    assert MessageConst.UNIQ_KEY == "UNIQ_KEY" and MessageConst.DELAY == "DELAY"
    assert MessageConst.REAL_QID == "REAL_QID" and MessageConst.TRAN_MSG == "TRAN_MSG"


# --- batches (sheet 5.9) -----------------------------------------------------------------------


def test_golden_batch_layout() -> None:
    body = encode_batch([BatchElement(7, b"ab", "K\x01v"), BatchElement(-1, b"", "")])
    first = struct.pack(">iiiii", 27, 0, 0, 7, 2) + b"ab" + SHORT.pack(3) + b"K\x01v"
    second = struct.pack(">iiiii", 22, 0, 0, -1, 0) + SHORT.pack(0)
    assert body == first + second
    assert decode_batch(body) == [BatchElement(7, b"ab", "K\x01v"), BatchElement(-1, b"", "")]
    assert encode_batch([]) == b"" and decode_batch(b"") == []


@given(st.lists(st.tuples(int32, st.binary(max_size=300), props_dicts), max_size=20))
@settings(max_examples=200)
def test_batch_round_trip(items: list[tuple[int, bytes, dict[str, str]]]) -> None:
    elements = [BatchElement(flag, body, properties_to_string(p)) for flag, body, p in items]
    encoded = encode_batch(elements)
    assert decode_batch(encoded) == elements
    assert decode_batch(memoryview(encoded)) == elements


BATCH = encode_batch([BatchElement(1, b"abc", "K\x01v"), BatchElement(2, b"de", "")])


@pytest.mark.parametrize("cut", [n for n in range(1, len(BATCH)) if n != 28])
def test_truncated_batches_are_refused(cut: int) -> None:
    with pytest.raises(MessageFormatError, match="batch element at offset"):
        decode_batch(BATCH[:cut])


@pytest.mark.parametrize(
    "bad",
    [
        _with(BATCH, 0, INT.pack(29)),  # TOTALSIZE larger than the lengths inside say
        _with(BATCH, 0, INT.pack(27)),  # ... and smaller
        _with(BATCH, 16, INT.pack(-1)),  # negative body length
        _with(BATCH, 16, INT.pack(2**31 - 1)),  # body length past the end
        _with(BATCH, 23, SHORT.pack(-3)),  # negative properties length
        _with(BATCH, 23, SHORT.pack(4)),  # properties length past its element
        _with(BATCH, 25, b"\xff"),  # properties not UTF-8
        BATCH + b"\x00" * 21,  # trailing bytes too few for an element
        # an element whose properties length runs past the end
        BATCH + struct.pack(">iiiii", 22, 0, 0, 0, 0) + SHORT.pack(5),
    ],
)
def test_inconsistent_batches_are_refused(bad: bytes) -> None:
    with pytest.raises(MessageFormatError):
        decode_batch(bad)


# --- message ids (sheet 5.7) -------------------------------------------------------------------


def test_offset_msg_ids() -> None:
    msg_id = offset_msg_id(("10.0.0.2", 10911), 0x1234)
    assert msg_id == "0A000002" + "00002A9F" + "0000000000001234"
    assert decode_offset_msg_id(msg_id) == (("10.0.0.2", 10911), 0x1234)
    assert decode_offset_msg_id(msg_id.lower()) == (("10.0.0.2", 10911), 0x1234)
    assert offset_msg_id(("::ffff:10.0.0.2", 10911), 0x1234) == msg_id
    v6 = offset_msg_id(("fe80::1", 10911), 7)
    assert v6 == "FE80" + "0" * 27 + "1" + "00002A9F" + "0000000000000007" and len(v6) == 56
    assert decode_offset_msg_id(v6) == (("fe80::1", 10911), 7)


@given(hosts, st.integers(0, 2**63 - 1))
@settings(max_examples=200)
def test_offset_msg_id_round_trip(host: tuple[str, int], offset: int) -> None:
    msg_id = offset_msg_id(host, offset)
    assert len(msg_id) == (56 if ":" in host[0] else 32) and msg_id == msg_id.upper()
    assert decode_offset_msg_id(msg_id) == (host, offset)


@pytest.mark.parametrize(
    "garbage",
    ["", "XYZ", "00" * 10, "0" * 30, "0" * 34, "0" * 55, "G" * 32, "\u00e9" * 32,
     "0A000002 00002A9F 00000000000012", "0A000002-00002A9F-00000000000012",
     "0A000002 00002A9F 0000000000001234"],  # whitespace that bytes.fromhex would skip
)  # fmt: skip
def test_garbage_msg_ids_are_refused(garbage: str) -> None:
    with pytest.raises(MessageFormatError, match="msg id"):
        decode_offset_msg_id(garbage)


def test_uniq_ids_are_unique_and_well_formed() -> None:
    before = time.time()
    ids = [create_uniq_id() for _ in range(10_000)]
    after = time.time()
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 32 and int(i, 16) >= 0 and i == i.upper() for i in ids)
    # ip (4) + pid low 16 bits (2) + random (4) stay fixed within a process.
    assert len({i[:20] for i in ids}) == 1
    assert int(ids[0][8:12], 16) == os.getpid() & 0xFFFF
    # The last 2 bytes count up by one per id.
    counters = [int(i[28:], 16) for i in ids]
    assert all((b - a) % 65536 == 1 for a, b in itertools.pairwise(counters))
    # Bytes 10..13: milliseconds since the start of the local month.
    local = datetime.datetime.fromtimestamp(before)
    month_start = local.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp()
    low, high = (before - month_start) * 1000 - 2000, (after - month_start) * 1000 + 2000
    assert low <= int(ids[0][20:28], 16) <= int(ids[-1][20:28], 16) <= high
