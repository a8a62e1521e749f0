"""The RocketMQ 4.x message record: the commit-log layout that is also a pull answer's body.

One record (the "V1" magic) is a fixed head of scalars, the two hosts (8 bytes each for IPv4,
20 for IPv6, chosen by sysflag bits), then the length-prefixed body, topic and properties.
The same bytes are written to the commit log, sent in pull, query and view answers, and
replicated to slaves, so the broker never re-encodes a stored message.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Iterator
from typing import NamedTuple

import attrs

from protocol.message._format import (
    MAGIC_CODE,
    MAX_PROPERTIES_BYTES,
    MAX_TOPIC_BYTES,
    Buffer,
    Host,
    MessageFormatError,
    MessageSysFlag,
    body_crc,
    decompress_body,
    pack_host,
    unpack_host,
)
from protocol.message._msg_id import offset_msg_id
from protocol.message._properties import MessageConst, string_to_properties

# TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTIMESTAMP
_HEAD = struct.Struct(">iiiiiqqiq")
# RECONSUMETIMES PREPAREDOFFSET BODYLEN
_TAIL = struct.Struct(">iqi")
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_SHORT = struct.Struct(">h")
_PEEK = struct.Struct(">ii")
HEAD_SIZE = _HEAD.size  # 48: where BORNHOST starts


def record_size(
    body_len: int,
    topic_len: int,
    properties_len: int,
    *,
    born_v6: bool = False,
    store_v6: bool = False,
) -> int:
    """Bytes of a record: 91 + body + topic + properties, plus 12 per IPv6 host (sheet 5.1)."""
    return 91 + body_len + topic_len + properties_len + 12 * born_v6 + 12 * store_v6


class RecordPositions(NamedTuple):
    """Byte positions of a record's fields, which depend on the host address families."""

    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: int
    store_timestamp: int
    store_host: int
    reconsume_times: int
    prepared_transaction_offset: int
    body_length: int


def record_field_positions(sys_flag: int) -> RecordPositions:
    """Where each fixed field of a record with ``sys_flag`` starts."""
    born_len = 20 if sys_flag & MessageSysFlag.BORNHOST_V6 else 8
    store_len = 20 if sys_flag & MessageSysFlag.STOREHOST_V6 else 8
    store_ts = 48 + born_len
    store_host = store_ts + 8
    reconsume = store_host + store_len
    return RecordPositions(
        4, 8, 12, 16, 20, 28, 36, 40, 48,
        store_ts, store_host, reconsume, reconsume + 4, reconsume + 12,
    )  # fmt: skip


def encode_record(
    *,
    topic: str | bytes,
    body: Buffer,
    queue_id: int,
    flag: int = 0,
    properties: str | bytes = b"",
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: Host = ("127.0.0.1", 0),
    store_host: Host = ("127.0.0.1", 0),
    store_timestamp: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    body_crc_value: int | None = None,
) -> bytearray:
    """One whole record; the host sysflag bits are set from the hosts' address families."""
    topic_bytes = topic.encode() if isinstance(topic, str) else topic
    props = properties.encode() if isinstance(properties, str) else properties
    if len(topic_bytes) > MAX_TOPIC_BYTES:
        raise MessageFormatError(f"topic of {len(topic_bytes)} bytes exceeds {MAX_TOPIC_BYTES}")
    if len(props) > MAX_PROPERTIES_BYTES:
        raise MessageFormatError(f"properties of {len(props)} bytes exceed {MAX_PROPERTIES_BYTES}")
    born = pack_host(born_host)
    store = pack_host(store_host)
    sys_flag &= ~(MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOST_V6)
    if len(born) == 20:
        sys_flag |= MessageSysFlag.BORNHOST_V6
    if len(store) == 20:
        sys_flag |= MessageSysFlag.STOREHOST_V6
    total = 84 + len(born) + len(store) - 16 + 4 + len(body) + 1 + len(topic_bytes) + 2 + len(props)
    crc = body_crc(body) if body_crc_value is None else body_crc_value
    out = bytearray(total)
    _HEAD.pack_into(
        out, 0, total, MAGIC_CODE, crc, queue_id, flag, queue_offset, physical_offset,
        sys_flag, born_timestamp,
    )  # fmt: skip
    pos = HEAD_SIZE
    out[pos : pos + len(born)] = born
    pos += len(born)
    _LONG.pack_into(out, pos, store_timestamp)
    pos += 8
    out[pos : pos + len(store)] = store
    pos += len(store)
    _TAIL.pack_into(out, pos, reconsume_times, prepared_transaction_offset, len(body))
    pos += _TAIL.size
    out[pos : pos + len(body)] = body
    pos += len(body)
    out[pos] = len(topic_bytes)
    out[pos + 1 : pos + 1 + len(topic_bytes)] = topic_bytes
    pos += 1 + len(topic_bytes)
    _SHORT.pack_into(out, pos, len(props))
    out[pos + 2 :] = props
    return out


def patch_record(
    buf: bytearray | memoryview,
    pos: int,
    *,
    queue_offset: int,
    physical_offset: int,
    store_timestamp: int,
) -> None:
    """Write the three append-time fields of the record at ``buf[pos]`` in place."""
    _LONG.pack_into(buf, pos + 20, queue_offset)
    _LONG.pack_into(buf, pos + 28, physical_offset)
    (sys_flag,) = _INT.unpack_from(buf, pos + 36)
    born_len = 20 if sys_flag & MessageSysFlag.BORNHOST_V6 else 8
    _LONG.pack_into(buf, pos + 48 + born_len, store_timestamp)


def peek_record_header(buf: Buffer, pos: int) -> tuple[int, int]:
    """(TOTALSIZE, MAGICCODE) of the record at ``pos`` without decoding it."""
    if pos + 8 > len(buf):
        raise MessageFormatError(f"record header at offset {pos} is cut short")
    size, magic = _PEEK.unpack_from(buf, pos)
    return size, magic


@attrs.define(slots=True)
class MessageExt:
    """A decoded stored record (RocketMQ's MessageExt)."""

    store_size: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: Host
    store_timestamp: int
    store_host: Host
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]

    @property
    def offset_msg_id(self) -> str:
        """The broker-made id: store host + commit-log offset."""
        return offset_msg_id(self.store_host, self.commit_log_offset)

    @property
    def msg_id(self) -> str:
        """What users see as the message id: UNIQ_KEY if set, else the offset msg id."""
        return self.properties.get(MessageConst.UNIQ_KEY) or self.offset_msg_id

    @property
    def tags(self) -> str | None:
        """The TAGS property."""
        return self.properties.get(MessageConst.TAGS)

    @property
    def keys(self) -> list[str]:
        """The KEYS property split on spaces."""
        return self.properties.get(MessageConst.KEYS, "").split()

    def decompressed_body(self) -> bytes:
        """The body, inflated when the COMPRESSED bit is set."""
        if self.sys_flag & MessageSysFlag.COMPRESSED:
            return decompress_body(self.body)
        return self.body


def decode_record(
    buf: Buffer, pos: int = 0, *, read_body: bool = True, check_crc: bool = False
) -> MessageExt:
    """Decode the record at ``buf[pos]``; MessageFormatError names the offset when it is bad."""
    end_of_buffer = len(buf)
    if pos + 88 > end_of_buffer:
        raise MessageFormatError(
            f"record at offset {pos}: {end_of_buffer - pos} bytes is too short"
        )
    (
        total, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts,
    ) = _HEAD.unpack_from(buf, pos)  # fmt: skip
    if magic != MAGIC_CODE:
        raise MessageFormatError(f"record at offset {pos}: bad magic code {magic & 0xFFFFFFFF:#x}")
    if total < 91 or pos + total > end_of_buffer:
        raise MessageFormatError(
            f"record at offset {pos}: size {total} overruns the {end_of_buffer - pos} bytes left"
        )
    end = pos + total
    try:
        p = pos + HEAD_SIZE
        born_host, p = unpack_host(buf, p, bool(sys_flag & MessageSysFlag.BORNHOST_V6))
        (store_ts,) = _LONG.unpack_from(buf, p)
        store_host, p = unpack_host(buf, p + 8, bool(sys_flag & MessageSysFlag.STOREHOST_V6))
        reconsume, prepared, body_len = _TAIL.unpack_from(buf, p)
        p += _TAIL.size
        if body_len < 0 or p + body_len + 3 > end:
            raise MessageFormatError(f"record at offset {pos}: body length {body_len} overruns")
        body_view = buf[p : p + body_len]
        if check_crc and body_crc(body_view) != crc:
            raise MessageFormatError(f"record at offset {pos}: body CRC mismatch")
        body = bytes(body_view) if read_body else b""
        p += body_len
        topic_len = buf[p]
        if topic_len > MAX_TOPIC_BYTES or p + 1 + topic_len + 2 > end:
            raise MessageFormatError(f"record at offset {pos}: topic length {topic_len} overruns")
        topic = bytes(buf[p + 1 : p + 1 + topic_len]).decode()
        p += 1 + topic_len
        (props_len,) = _SHORT.unpack_from(buf, p)
        p += 2
        if props_len < 0 or p + props_len != end:
            raise MessageFormatError(
                f"record at offset {pos}: properties length {props_len} does not end the record"
            )
        properties = string_to_properties(bytes(buf[p:end]).decode()) if props_len else {}
    except (struct.error, UnicodeDecodeError, IndexError) as exc:
        raise MessageFormatError(f"record at offset {pos}: {exc}") from exc
    return MessageExt(
        total, crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts,
        born_host, store_ts, store_host, reconsume, prepared, body, topic, properties,
    )  # fmt: skip


def record_properties(buf: Buffer, pos: int = 0) -> dict[str, str]:
    """Only the properties of the record at ``buf[pos]`` (a broker filtering by SQL92 reads
    nothing else); MessageFormatError when the record is cut short."""
    try:
        (sys_flag,) = _INT.unpack_from(buf, pos + 36)
        p = pos + HEAD_SIZE + (20 if sys_flag & MessageSysFlag.BORNHOST_V6 else 8) + 8
        p += 20 if sys_flag & MessageSysFlag.STOREHOST_V6 else 8
        (body_len,) = _INT.unpack_from(buf, p + 12)
        p += _TAIL.size + body_len
        p += 1 + buf[p]
        (props_len,) = _SHORT.unpack_from(buf, p)
        if props_len <= 0:
            return {}
        return string_to_properties(bytes(buf[p + 2 : p + 2 + props_len]).decode())
    except (struct.error, UnicodeDecodeError, IndexError) as exc:
        raise MessageFormatError(f"record at offset {pos}: {exc}") from exc


def iter_records(buf: Buffer, *, read_body: bool = True) -> Iterator[MessageExt]:
    """Decode concatenated records (a pull answer's body)."""
    pos = 0
    end = len(buf)
    while pos < end:
        message = decode_record(buf, pos, read_body=read_body)
        pos += message.store_size
        yield message


# Head, both hosts as IPv4 and the tail in one unpack: the common record, 88 bytes up to BODY.
# Each host is read as its 8 raw bytes (address and port), the key of the host cache.
_V4_RECORD = struct.Struct(">iiiiiqqiq8sq8siqi")
_V6_HOST_BITS = MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOST_V6
_hosts: dict[bytes, Host] = {}
_topics: dict[bytes, str] = {}
# Parsed properties by the text before their last piece (see `decode_records_py`).
_properties_heads: dict[str, dict[str, str]] = {}


def decode_records_py(buf: Buffer) -> list[MessageExt]:
    """``list(iter_records(buf))`` in about 60% of the time: the pull consumer's decode path.

    Records with IPv4 hosts are decoded with one struct unpack and cached host and topic
    strings; any other record, and any record that fails a check, goes through
    `decode_record`, so results and errors are the same.
    """
    out: list[MessageExt] = []
    append = out.append
    unpack = _V4_RECORD.unpack_from
    hosts = _hosts
    topics = _topics
    new = MessageExt
    heads = _properties_heads
    # Bodies are slices of ``data``: from bytes that is one copy each, as decode_record makes.
    data = buf if isinstance(buf, bytes) else bytes(buf)
    pos = 0
    end = len(data)
    # A pull answer is of one topic: its name is compared in place, not sliced and looked up.
    last_raw = b""
    last_topic = ""
    last_born_raw = last_store_raw = b""
    last_born = last_store = ("", 0)
    while pos < end:
        if pos + 88 <= end:
            (
                total, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
                born_ts, born_raw, store_ts, store_raw, reconsume, prepared, body_len,
            ) = unpack(data, pos)  # fmt: skip
            record_end = pos + total
            topic_at = pos + 88 + body_len
            if (
                magic == MAGIC_CODE
                and not sys_flag & _V6_HOST_BITS
                and total >= 91
                and record_end <= end
                and body_len >= 0
                and topic_at + 3 <= record_end
            ):
                topic_len = data[topic_at]
                props_at = topic_at + 3 + topic_len
                props_len = -1
                if topic_len <= MAX_TOPIC_BYTES and props_at <= record_end:
                    props_len = (data[props_at - 2] << 8) | data[props_at - 1]
                if 0 <= props_len <= MAX_PROPERTIES_BYTES and props_at + props_len == record_end:
                    try:
                        if topic_len == len(last_raw) and data.startswith(last_raw, topic_at + 1):
                            topic = last_topic
                        else:
                            raw_topic = data[topic_at + 1 : props_at - 2]
                            cached = topics.get(raw_topic)
                            if cached is None:
                                if len(topics) > 4096:
                                    topics.clear()
                                cached = topics[raw_topic] = raw_topic.decode()
                            topic = cached
                            last_raw = raw_topic
                            last_topic = topic
                        # A producer's records share all their properties but the last
                        # piece (UNIQ_KEY, set last): the rest is parsed once and copied.
                        properties: dict[str, str]
                        if props_len:
                            text = data[props_at:record_end].decode()
                            head, _, last = text.rpartition("\x02")
                            shared = heads.get(head)
                            if shared is None:
                                shared = _properties_head(head)
                            properties = shared.copy()
                            name, _, value = last.partition("\x01")
                            if value and name:  # a value means the separator was there
                                properties[name] = value
                        else:
                            properties = {}
                    except UnicodeDecodeError:
                        pass  # decode_record below says where
                    else:
                        # A pull answer's records mostly share their hosts: compared with
                        # the record before, looked up only when they differ.
                        if born_raw != last_born_raw:
                            host = hosts.get(born_raw)
                            if host is None:
                                host = hosts[born_raw] = _v4_host(
                                    born_raw[:4], _INT.unpack_from(born_raw, 4)[0]
                                )
                            last_born = host
                            last_born_raw = born_raw
                        if store_raw != last_store_raw:
                            host = hosts.get(store_raw)
                            if host is None:
                                host = hosts[store_raw] = _v4_host(
                                    store_raw[:4], _INT.unpack_from(store_raw, 4)[0]
                                )
                            last_store = host
                            last_store_raw = store_raw
                        append(new(
                            total, crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
                            born_ts, last_born, store_ts, last_store, reconsume, prepared,
                            data[pos + 88 : topic_at], topic, properties,
                        ))  # fmt: skip
                        pos = record_end
                        continue
        message = decode_record(data, pos)  # IPv6 hosts, or a bad record: raises with details
        append(message)
        pos += message.store_size
    return out


def _properties_head(head: str) -> dict[str, str]:
    """`string_to_properties` of ``head`` (all of a record's properties but the last piece),
    kept for the records after it."""
    if len(_properties_heads) >= 256:
        _properties_heads.clear()  # heads that differ record by record: kept bounded
    parsed: dict[str, str] = {}
    for piece in head.split("\x02"):
        name, _, value = piece.partition("\x01")
        if value and name:
            parsed[name] = value
    _properties_heads[head] = parsed
    return parsed


def _v4_host(raw: bytes, port: int) -> Host:
    if len(_hosts) > 4096:
        _hosts.clear()  # many distinct born hosts (clients) must not grow the cache unbounded
    return (socket.inet_ntoa(raw), port)


#: What `decode_records` runs: the compiled twin when ``./dev build-ext`` built it, else the
#: pure-Python `decode_records_py` above (same results, same errors; tests compare them).
decode_records: Callable[[Buffer], list[MessageExt]] = decode_records_py
try:
    import protocol._speedups as _speedups
except ImportError:
    pass
else:
    _speedups.bind_records(MessageExt, decode_record, string_to_properties, _v4_host)
    decode_records = _speedups.decode_records
