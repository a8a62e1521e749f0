"""The message record codec: golden layouts from the reference sheet, round trips, bad input."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.message import (
    BLANK_MAGIC_CODE,
    MAGIC_CODE,
    BatchElement,
    MessageFormatError,
    MessageSysFlag,
    body_crc,
    create_uniq_id,
    decode_batch,
    decode_offset_msg_id,
    decode_record,
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


def test_golden_ipv4_record_layout() -> None:
    props = "TAGS\x01TagA\x02KEYS\x01k1"
    record = encode_record(
        topic="T1", body=b"hello", queue_id=3, flag=9, properties=props, sys_flag=0,
        born_timestamp=1111, born_host=("10.0.0.1", 5000), store_host=("10.0.0.2", 10911),
        store_timestamp=2222, queue_offset=44, physical_offset=5555, reconsume_times=2,
        prepared_transaction_offset=66,
    )  # fmt: skip
    assert len(record) == 91 + 5 + 2 + len(props) == record_size(5, 2, len(props))
    i, q = struct.Struct(">i"), struct.Struct(">q")
    assert i.unpack_from(record, 0)[0] == len(record)
    assert i.unpack_from(record, 4)[0] == MAGIC_CODE
    assert i.unpack_from(record, 8)[0] == zlib.crc32(b"hello") & 0x7FFFFFFF
    assert i.unpack_from(record, 12)[0] == 3 and i.unpack_from(record, 16)[0] == 9
    assert q.unpack_from(record, 20)[0] == 44 and q.unpack_from(record, 28)[0] == 5555
    assert i.unpack_from(record, 36)[0] == 0 and q.unpack_from(record, 40)[0] == 1111
    assert record[48:52] == bytes([10, 0, 0, 1]) and i.unpack_from(record, 52)[0] == 5000
    assert q.unpack_from(record, 56)[0] == 2222
    assert record[64:68] == bytes([10, 0, 0, 2]) and i.unpack_from(record, 68)[0] == 10911
    assert i.unpack_from(record, 72)[0] == 2 and q.unpack_from(record, 76)[0] == 66
    assert i.unpack_from(record, 84)[0] == 5 and record[88:93] == b"hello"
    assert record[93] == 2 and record[94:96] == b"T1"
    assert struct.unpack_from(">h", record, 96)[0] == len(props)
    assert record[98:] == props.encode()
    assert record_field_positions(0).store_timestamp == 56


def test_ipv6_hosts_add_twelve_bytes_each_and_set_the_flags() -> None:
    v4 = encode_record(topic="T", body=b"", queue_id=0)
    both = encode_record(
        topic="T", body=b"", queue_id=0, born_host=("::1", 1), store_host=("fe80::2", 2)
    )
    assert len(both) == len(v4) + 24
    decoded = decode_record(both)
    assert decoded.sys_flag & (MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOST_V6) == 0x30
    assert decoded.born_host == ("::1", 1) and decoded.store_host == ("fe80::2", 2)
    assert record_field_positions(0x10).store_timestamp == 68
    mapped = encode_record(topic="T", body=b"", queue_id=0, born_host=("::ffff:1.2.3.4", 7))
    assert len(mapped) == len(v4) and decode_record(mapped).born_host == ("1.2.3.4", 7)


hosts = st.one_of(
    st.tuples(st.ip_addresses(v=4).map(str), st.integers(0, 65535)),
    st.tuples(
        st.ip_addresses(v=6).filter(lambda a: a.ipv4_mapped is None).map(str), st.integers(0, 65535)
    ),
)
props_dicts = st.dictionaries(
    st.text(
        st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]),
        min_size=1,
        max_size=10,
    ),
    st.text(
        st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]),
        min_size=1,
        max_size=20,
    ),
    max_size=5,
)


@given(
    topic=st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=127),
    body=st.binary(max_size=2000), queue_id=st.integers(0, 2**31 - 1),
    flag=st.integers(-(2**31), 2**31 - 1), props=props_dicts,
    sys_flag=st.sampled_from([0, 1, 2, 4, 8, 0xC, 0x301]), born=hosts, store=hosts,
    times=st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)),
    offsets=st.tuples(st.integers(0, 2**62), st.integers(0, 2**62), st.integers(0, 2**62)),
    reconsume=st.integers(0, 1000),
)  # fmt: skip
@settings(max_examples=200)
def test_record_round_trip(
    topic: str, body: bytes, queue_id: int, flag: int, props: dict[str, str], sys_flag: int,
    born: tuple[str, int], store: tuple[str, int], times: tuple[int, int],
    offsets: tuple[int, int, int], reconsume: int,
) -> None:  # fmt: skip
    encoded = encode_record(
        topic=topic, body=body, queue_id=queue_id, flag=flag,
        properties=properties_to_string(props), sys_flag=sys_flag, born_timestamp=times[0],
        born_host=born, store_host=store, store_timestamp=times[1], queue_offset=offsets[0],
        physical_offset=offsets[1], reconsume_times=reconsume,
        prepared_transaction_offset=offsets[2],
    )  # fmt: skip
    m = decode_record(encoded, check_crc=True)
    assert (m.topic, m.body, m.queue_id, m.flag, m.properties) == (
        topic,
        body,
        queue_id,
        flag,
        props,
    )
    assert m.sys_flag & 0xF0F == sys_flag
    assert (m.born_timestamp, m.store_timestamp) == times
    assert (m.queue_offset, m.commit_log_offset, m.prepared_transaction_offset) == offsets
    assert (m.born_host, m.store_host, m.reconsume_times) == (born, store, reconsume)
    assert m.store_size == len(encoded)
    patch_record(encoded, 0, queue_offset=1, physical_offset=2, store_timestamp=3)
    patched = decode_record(encoded)
    assert (patched.queue_offset, patched.commit_log_offset, patched.store_timestamp) == (1, 2, 3)
    assert patched.born_host == born


def test_iter_records_and_peek() -> None:
    records = [
        encode_record(topic="T", body=f"m{i}".encode(), queue_id=0, queue_offset=i)
        for i in range(3)
    ]
    joined = b"".join(records)
    assert [m.body for m in iter_records(joined)] == [b"m0", b"m1", b"m2"]
    assert peek_record_header(joined, len(records[0])) == (len(records[1]), MAGIC_CODE)
    blank = struct.pack(">ii", 4096, BLANK_MAGIC_CODE)
    assert peek_record_header(blank, 0) == (4096, BLANK_MAGIC_CODE)


def test_corrupt_records_name_their_offset() -> None:
    good = bytes(encode_record(topic="T", body=b"payload", queue_id=0))
    bad_magic = bytearray(good)
    bad_magic[4] ^= 0xFF
    body_flip = bytearray(good)
    body_flip[88] ^= 0xFF
    for buf, pos, words in (
        (b"\x00" * 10 + bytes(bad_magic), 10, "bad magic"),
        (good[:-1], 0, "overruns"),
        (b"\x00" * 5 + good[:60], 5, "too short"),
    ):
        with pytest.raises(MessageFormatError, match=f"offset {pos}.*{words}"):
            decode_record(buf, pos)
    with pytest.raises(MessageFormatError, match="CRC mismatch"):
        decode_record(body_flip, check_crc=True)
    assert decode_record(body_flip).body != b"payload"


def test_properties_string_rules() -> None:
    assert properties_to_string({"A": "1", "B": "2"}) == "A\x011\x02B\x012"
    assert properties_to_string({"A": "", "": "x", "C": "3"}) == "C\x013"
    # Java drops pieces without a name or a value; C++ ends with a separator.
    assert string_to_properties("A\x011\x02B\x01\x02\x01x\x02C\x013\x02") == {"A": "1", "C": "3"}
    assert string_to_properties("K\x01a\x01b") == {"K": "a\x01b"}
    assert string_to_properties("") == {}


def test_tag_hash_code_is_java_string_hash() -> None:
    assert tag_hash_code("*") == 42
    assert tag_hash_code("TagA") == 2598919
    assert tag_hash_code("") == 0 and tag_hash_code(None) == 0
    assert tag_hash_code("polygenelubricants") == -2147483648  # Java's well-known MIN_VALUE hash
    assert tag_hash_code("\u00e9") == 0xE9
    # A surrogate pair hashes as two UTF-16 units: 31 * 0xD83D + 0xDE00.
    assert tag_hash_code("\U0001f600") == 31 * 0xD83D + 0xDE00


def test_compressed_body_and_crc() -> None:
    raw = b"abc" * 2000
    record = encode_record(
        topic="T", body=zlib.compress(raw, 5), queue_id=0, sys_flag=MessageSysFlag.COMPRESSED
    )
    decoded = decode_record(record, check_crc=True)
    assert decoded.decompressed_body() == raw
    assert decoded.body_crc == body_crc(decoded.body)


@given(
    st.lists(
        st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=300), props_dicts),
        max_size=20,
    )
)
@settings(max_examples=200)
def test_batch_round_trip(items: list[tuple[int, bytes, dict[str, str]]]) -> None:
    elements = [BatchElement(flag, body, properties_to_string(p)) for flag, body, p in items]
    assert decode_batch(encode_batch(elements)) == elements


def test_malformed_batches_are_refused() -> None:
    good = encode_batch([BatchElement(1, b"abc", "K\x01v")])
    inconsistent = bytearray(good)
    inconsistent[3] += 1  # TOTALSIZE no longer matches the lengths inside
    for bad in (good[:-1], good[:10], bytes(inconsistent), good + b"\x00\x00"):
        with pytest.raises(MessageFormatError):
            decode_batch(bad)


def test_offset_msg_ids() -> None:
    msg_id = offset_msg_id(("10.0.0.2", 10911), 0x1234)
    assert msg_id == "0A000002" + "00002A9F" + "0000000000001234"
    assert decode_offset_msg_id(msg_id) == (("10.0.0.2", 10911), 0x1234)
    v6 = offset_msg_id(("fe80::1", 10911), 7)
    assert len(v6) == 56 and decode_offset_msg_id(v6) == (("fe80::1", 10911), 7)
    for bad in ("XYZ", "00" * 10, ""):
        with pytest.raises(MessageFormatError):
            decode_offset_msg_id(bad)


def test_uniq_ids_are_unique_and_well_formed() -> None:
    ids = [create_uniq_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 32 and i == i.upper() and int(i, 16) >= 0 for i in ids)
    # Bytes 10..14 are the milliseconds since the start of the month: under 31 days.
    assert int(ids[0][20:28], 16) < 31 * 24 * 3600 * 1000
