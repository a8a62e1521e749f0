"""The RocketMQ 4.x message record: the commit-log layout that is also a pull answer's body.

One record (the "V1" magic) is a fixed head of scalars, the two hosts (8 bytes each for IPv4,
20 for IPv6, chosen by sysflag bits), then the length-prefixed body, topic and properties.
The same bytes are written to the commit log, sent in pull, query and view answers, and
replicated to slaves, so the broker never re-encodes a stored message.

Also here: batch bodies (SEND_BATCH_MESSAGE), the properties string, offset msg ids and client
UNIQ_KEY ids, the tag hash code and body CRC.
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
import os
import random
import socket
import struct
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple

import attrs

MAGIC_CODE = -626843481
"""0xDAA320A7 as a signed int: a message record."""
BLANK_MAGIC_CODE = -875286124
"""0xCBD43194 as a signed int: the end-of-file blank record."""

Host = tuple[str, int]
Buffer = bytes | bytearray | memoryview

PROPERTY_SEPARATOR = "\x02"
NAME_VALUE_SEPARATOR = "\x01"
MAX_TOPIC_BYTES = 127
MAX_PROPERTIES_BYTES = 32767


class MessageFormatError(ValueError):
    """A record, batch body or message id that does not follow the format."""


class MessageSysFlag:
    """Bits of a record's SYSFLAG (sheet 5.5)."""

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_NOT_TYPE = 0x0
    TRANSACTION_PREPARED = 0x4
    TRANSACTION_COMMIT = 0x8
    TRANSACTION_ROLLBACK = 0xC
    TRANSACTION_MASK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20
    NEED_UNWRAP = 0x40
    INNER_BATCH = 0x80
    COMPRESSION_TYPE_MASK = 0x700
    COMPRESSION_LZ4 = 0x100
    COMPRESSION_ZSTD = 0x200
    COMPRESSION_ZLIB = 0x300

    @staticmethod
    def transaction_value(sys_flag: int) -> int:
        """The transaction bits of ``sys_flag``."""
        return sys_flag & MessageSysFlag.TRANSACTION_MASK


class MessageConst:
    """Well-known property keys (sheet 5.4); Java's constant names without ``PROPERTY_``."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT_STORE_MSG_OK = "WAIT"
    DELAY_TIME_LEVEL = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QUEUE_ID = "REAL_QID"
    TRANSACTION_PREPARED = "TRAN_MSG"
    PRODUCER_GROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    BUYER_ID = "BUYER_ID"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    TRANSFER_FLAG = "TRANSFER_FLAG"
    CORRECTION_FLAG = "CORRECTION_FLAG"
    MQ2_FLAG = "MQ2_FLAG"
    RECONSUME_TIME = "RECONSUME_TIME"
    MSG_REGION = "MSG_REGION"
    TRACE_SWITCH = "TRACE_ON"
    UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
    TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    INSTANCE_ID = "INSTANCE_ID"
    CORRELATION_ID = "CORRELATION_ID"
    MESSAGE_REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
    MESSAGE_TTL = "TTL"
    REPLY_MESSAGE_ARRIVE_TIME = "ARRIVE_TIME"
    PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
    MESSAGE_TYPE = "MSG_TYPE"
    CLUSTER = "CLUSTER"
    INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
    INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
    START_DELIVER_TIME = "__STARTDELIVERTIME"
    # Aliases under the short names people use.
    WAIT = WAIT_STORE_MSG_OK
    DELAY = DELAY_TIME_LEVEL
    UNIQ_KEY = UNIQ_CLIENT_MESSAGE_ID_KEYIDX
    REAL_QID = REAL_QUEUE_ID
    TRAN_MSG = TRANSACTION_PREPARED
    PGROUP = PRODUCER_GROUP
    KEY_SEPARATOR = " "


# --- small pieces -------------------------------------------------------------------------


def tag_hash_code(tag: str | None) -> int:
    """Java ``String.hashCode`` of ``tag`` (UTF-16 units, signed 32-bit); empty or None -> 0."""
    if not tag:
        return 0
    h = 0
    if tag.isascii():
        for ch in tag.encode():
            h = (31 * h + ch) & 0xFFFFFFFF
    else:
        # surrogatepass: a lone surrogate is one UTF-16 unit in Java too, not an error.
        units = tag.encode("utf-16-be", "surrogatepass")
        for i in range(0, len(units), 2):
            h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def body_crc(body: Buffer) -> int:
    """BODYCRC: zlib CRC-32 of the stored body, masked to a non-negative int (sheet 5.8)."""
    return zlib.crc32(body) & 0x7FFFFFFF


def properties_to_string(props: Mapping[str, str]) -> str:
    """``name\\x01value`` pairs joined by ``\\x02``, no trailing one; empty values skipped."""
    return PROPERTY_SEPARATOR.join(
        f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items() if k and v is not None and v != ""
    )


def string_to_properties(text: str) -> dict[str, str]:
    """Parse a properties string as Java does: pieces without a name or a value are dropped."""
    props: dict[str, str] = {}
    if not text:
        return props
    for piece in text.split(PROPERTY_SEPARATOR):
        name, sep, value = piece.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            props[name] = value
    return props


def compress_body(body: Buffer, level: int = 5) -> bytes:
    """Zlib-wrapped deflate, as Java's Deflater and the C++ client write."""
    return zlib.compress(body, level)


def decompress_body(body: Buffer) -> bytes:
    """Inflate a zlib-wrapped body; MessageFormatError when it is not valid zlib."""
    try:
        return zlib.decompress(body)
    except zlib.error as exc:
        raise MessageFormatError(f"compressed body does not inflate: {exc}") from exc


# --- hosts --------------------------------------------------------------------------------

_V4_HOST = struct.Struct(">4si")
_V6_HOST = struct.Struct(">16si")


def _host_bytes(host: Host) -> bytes:
    """4 or 16 address bytes; an IPv4-mapped IPv6 address is written as IPv4."""
    address = host[0]
    try:
        ip = ipaddress.ip_address(address)
    except ValueError as exc:
        raise MessageFormatError(f"host {address!r} is not an IP address") from exc
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.packed


@functools.lru_cache(maxsize=4096)
def _pack_host(host: Host) -> bytes:
    # Cached: a broker packs the same few hosts for every record, and parsing is most of the cost.
    raw = _host_bytes(host)
    port = host[1]
    if len(raw) == 4:
        return _V4_HOST.pack(raw, port)
    return _V6_HOST.pack(raw, port)


def _unpack_host(buf: Buffer, pos: int, v6: bool) -> tuple[Host, int]:
    if v6:
        raw, port = _V6_HOST.unpack_from(buf, pos)
        return (str(ipaddress.IPv6Address(bytes(raw))), port), pos + 20
    raw, port = _V4_HOST.unpack_from(buf, pos)
    return (socket.inet_ntoa(raw), port), pos + 8


# --- the record ---------------------------------------------------------------------------

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
    born = _pack_host(born_host)
    store = _pack_host(store_host)
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
        born_host, p = _unpack_host(buf, p, bool(sys_flag & MessageSysFlag.BORNHOST_V6))
        (store_ts,) = _LONG.unpack_from(buf, p)
        store_host, p = _unpack_host(buf, p + 8, bool(sys_flag & MessageSysFlag.STOREHOST_V6))
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


def iter_records(buf: Buffer, *, read_body: bool = True) -> Iterator[MessageExt]:
    """Decode concatenated records (a pull answer's body)."""
    pos = 0
    end = len(buf)
    while pos < end:
        message = decode_record(buf, pos, read_body=read_body)
        pos += message.store_size
        yield message


# Head, both hosts as IPv4 and the tail in one unpack: the common record, 88 bytes up to BODY.
_V4_RECORD = struct.Struct(">iiiiiqqiq4siq4siiqi")
_V6_HOST_BITS = MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOST_V6
_hosts: dict[tuple[bytes, int], Host] = {}
_topics: dict[bytes, str] = {}


def decode_records(buf: Buffer) -> list[MessageExt]:
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
    # Bodies are slices of ``data``: from bytes that is one copy each, as decode_record makes.
    data = buf if isinstance(buf, bytes) else bytes(buf)
    pos = 0
    end = len(data)
    while pos < end:
        if pos + 88 <= end:
            (
                total, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
                born_ts, born_ip, born_port, store_ts, store_ip, store_port, reconsume, prepared,
                body_len,
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
                if props_len <= MAX_PROPERTIES_BYTES and props_at + props_len == record_end:
                    try:
                        raw_topic = data[topic_at + 1 : props_at - 2]
                        topic = topics.get(raw_topic)
                        if topic is None:
                            if len(topics) > 4096:
                                topics.clear()
                            topic = topics[raw_topic] = raw_topic.decode()
                        properties = (
                            string_to_properties(data[props_at:record_end].decode())
                            if props_len
                            else {}
                        )
                    except UnicodeDecodeError:
                        pass  # decode_record below says where
                    else:
                        born_host = hosts.get((born_ip, born_port))
                        if born_host is None:
                            born_host = hosts[(born_ip, born_port)] = _v4_host(born_ip, born_port)
                        store_host = hosts.get((store_ip, store_port))
                        if store_host is None:
                            store_host = hosts[(store_ip, store_port)] = _v4_host(
                                store_ip, store_port
                            )
                        append(MessageExt(
                            total, crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
                            born_ts, born_host, store_ts, store_host, reconsume, prepared,
                            data[pos + 88 : topic_at], topic, properties,
                        ))  # fmt: skip
                        pos = record_end
                        continue
        message = decode_record(data, pos)  # IPv6 hosts, or a bad record: raises with details
        append(message)
        pos += message.store_size
    return out


def _v4_host(raw: bytes, port: int) -> Host:
    if len(_hosts) > 4096:
        _hosts.clear()  # many distinct born hosts (clients) must not grow the cache unbounded
    return (socket.inet_ntoa(raw), port)


# --- batches ------------------------------------------------------------------------------

_BATCH_HEAD = struct.Struct(">iiiii")  # TOTALSIZE MAGIC BODYCRC FLAG BODYLEN


@attrs.define(slots=True)
class BatchElement:
    """One message of a batch body: its flag, body and own properties string."""

    flag: int
    body: bytes
    properties: str = ""


def encode_batch(elements: Iterable[BatchElement]) -> bytes:
    """A SEND_BATCH_MESSAGE body (sheet 5.9); magic and CRC are written as 0, as clients do."""
    parts: list[Buffer] = []
    append = parts.append
    pack_head = _BATCH_HEAD.pack
    pack_short = _SHORT.pack
    for element in elements:
        props = element.properties.encode()
        props_len = len(props)
        if props_len > MAX_PROPERTIES_BYTES:
            raise MessageFormatError(f"batch element properties of {props_len} bytes too long")
        body = element.body
        body_len = len(body)
        append(pack_head(22 + body_len + props_len, 0, 0, element.flag, body_len))
        append(body)  # join copies it once; no bytes() copy before
        append(pack_short(props_len) + props)
    return b"".join(parts)


def decode_batch(body: Buffer) -> list[BatchElement]:
    """Split a batch body into its elements; MessageFormatError on any inconsistency."""
    return [BatchElement(*element) for element in decode_batch_tuples(body)]


def decode_batch_tuples(body: Buffer) -> list[tuple[int, bytes, str]]:
    """`decode_batch` as plain (flag, body, properties) tuples: the broker's send path."""
    elements: list[tuple[int, bytes, str]] = []
    append = elements.append
    unpack_head = _BATCH_HEAD.unpack_from
    unpack_short = _SHORT.unpack_from
    view = memoryview(body)
    pos = 0
    end = len(view)
    while pos < end:
        if pos + 22 > end:
            raise MessageFormatError(f"batch element at offset {pos} is cut short")
        total, _magic, _crc, flag, body_len = unpack_head(view, pos)
        props_at = pos + 20 + body_len
        if body_len < 0 or props_at + 2 > end:
            raise MessageFormatError(
                f"batch element at offset {pos}: body length {body_len} overruns the body"
            )
        (props_len,) = unpack_short(view, props_at)
        if props_len < 0 or total != 22 + body_len + props_len:
            raise MessageFormatError(f"batch element at offset {pos}: inconsistent sizes")
        next_pos = pos + total
        if next_pos > end:
            raise MessageFormatError(f"batch element at offset {pos} overruns the body")
        try:
            props = str(view[props_at + 2 : next_pos], "utf-8") if props_len else ""
        except UnicodeDecodeError as exc:
            raise MessageFormatError(f"batch element at offset {pos}: {exc}") from exc
        append((flag, view[pos + 20 : props_at].tobytes(), props))
        pos = next_pos
    return elements


# --- message ids --------------------------------------------------------------------------


def offset_msg_id(host: Host, commit_log_offset: int) -> str:
    """Store host address + port + commit-log offset in upper-case hex (32 or 56 chars)."""
    return (_pack_host(host) + _LONG.pack(commit_log_offset)).hex().upper()


def offset_msg_id_prefix(host: Host) -> str:
    """The host part of offset msg ids, to which a broker appends ``f"{offset:016X}"``."""
    return _pack_host(host).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[Host, int]:
    """(store host, commit-log offset) of an offset msg id."""
    if len(msg_id) not in (32, 56):
        raise MessageFormatError(f"msg id {msg_id!r} has {len(msg_id)} characters, not 32 or 56")
    try:
        # fromhex skips whitespace; the byte count below refuses text with spaces in it
        raw = bytes.fromhex(msg_id)
    except ValueError as exc:
        raise MessageFormatError(f"msg id {msg_id!r} is not hex") from exc
    if len(raw) * 2 != len(msg_id):
        raise MessageFormatError(f"msg id {msg_id!r} is not hex")
    host, _ = _unpack_host(raw, 0, len(raw) == 28)
    (offset,) = _LONG.unpack_from(raw, len(raw) - 8)
    return host, offset


class _UniqIdState:
    """Per-process fixed prefix and counter of client message ids (sheet 5.7)."""

    def __init__(self) -> None:
        try:
            ip = socket.inet_aton(socket.gethostbyname(socket.gethostname()))
        except OSError:
            ip = bytes([127, 0, 0, 1])
        self.prefix = ip + struct.pack(">HI", os.getpid() & 0xFFFF, random.getrandbits(32))
        self.prefix_hex = self.prefix.hex().upper()
        self.counter = itertools.count(random.getrandbits(16))
        self.month_start_ms = 0
        self.next_month_ms = 0

    def month_ms(self, now_ms: int) -> int:
        if now_ms >= self.next_month_ms:
            local = time.localtime(now_ms / 1000)
            start = time.mktime((local.tm_year, local.tm_mon, 1, 0, 0, 0, 0, 0, -1))
            year, month = (local.tm_year + 1, 1) if local.tm_mon == 12 else (
                local.tm_year, local.tm_mon + 1)  # fmt: skip
            self.month_start_ms = int(start * 1000)
            self.next_month_ms = int(time.mktime((year, month, 1, 0, 0, 0, 0, 0, -1)) * 1000)
        return now_ms - self.month_start_ms


_uniq_state: _UniqIdState | None = None


def _forget_uniq_state() -> None:
    global _uniq_state
    _uniq_state = None


# A forked child makes a prefix of its own (its pid differs) for its first id; checking the
# pid on every id instead cost a system call per message.
os.register_at_fork(after_in_child=_forget_uniq_state)


def create_uniq_id() -> str:
    """A client message id (UNIQ_KEY): ip, pid, random, ms in month, counter; 32 hex chars."""
    global _uniq_state
    state = _uniq_state
    if state is None:
        state = _uniq_state = _UniqIdState()
    month_ms = state.month_ms(time.time_ns() // 1_000_000) & 0xFFFFFFFF
    return f"{state.prefix_hex}{month_ms:08X}{next(state.counter) & 0xFFFF:04X}"
