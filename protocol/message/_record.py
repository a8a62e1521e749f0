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
# Parsed properties by their text with the UNIQ_KEY value cut out (see `_properties_of`).
_templates: dict[bytes, tuple[dict[str, str], bool]] = {}
_UNIQ_KEY = MessageConst.UNIQ_KEY
_UNIQ_PIECE = _UNIQ_KEY.encode() + b"\x01"


def decode_records_py(buf: Buffer) -> list[MessageExt]:
    """``list(iter_records(buf))`` in about a quarter of the time: the pull consumer's decode path.

    Records with IPv4 hosts are decoded with one struct unpack, cached host and topic strings
    and cached parses of their properties; any other record, and any record that fails a
    check, goes through `decode_record`, so results and errors are the same.
    """
    out: list[MessageExt] = []
    append = out.append
    unpack = _V4_RECORD.unpack_from
    hosts = _hosts
    new = MessageExt
    # Bodies are slices of ``data``: from bytes that is one copy each, as decode_record makes.
    data = buf if isinstance(buf, bytes) else bytes(buf)
    pos = 0
    end = len(data)
    last_born_raw = last_store_raw = b""
    last_born = last_store = ("", 0)
    # A pull answer's records mostly come from one producer's batches: from the topic's length
    # byte to the UNIQ_KEY value (topic, properties' length, properties before the id) and
    # from the id to the end, their bytes are the record before's. A record whose bytes there
    # are the same (``start``, ``tail``, over the same ``span``) has the topic and properties
    # of the record before with its own id: no length to check, nothing to look up.
    same_start = same_tail = b""
    same_span = -1
    start_len = tail_len = 0
    same_topic = ""
    same_template: dict[str, str] = {}
    # Records after such a record mostly have its layout too (its size, body length, and id
    # length): a run of them is unpacked by one struct, body and id included, one C call per
    # record; the first that differs ends the run and goes the record-by-record way below.
    view = memoryview(data)
    run: struct.Struct | None = None
    run_size = run_body = 0
    while pos < end:
        if run is not None:
            count = (end - pos) // run_size
            if count > 1:
                for (
                    total, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
                    born_ts, born_raw, store_ts, store_raw, reconsume, prepared, body_len,
                    body, start, raw_id, tail,
                ) in run.iter_unpack(view[pos : pos + count * run_size]):  # fmt: skip
                    if (
                        total != run_size
                        or magic != MAGIC_CODE
                        or sys_flag & _V6_HOST_BITS
                        or body_len != run_body
                        or start != same_start
                        or tail != same_tail
                    ):
                        break
                    try:
                        uniq = raw_id.decode()
                    except UnicodeDecodeError:
                        break
                    if "\x02" in uniq:
                        break
                    copied = same_template.copy()
                    copied[_UNIQ_KEY] = uniq
                    if born_raw != last_born_raw:  # mostly the record before's: no lookup
                        last_born = hosts.get(born_raw) or _cached_v4_host(born_raw)
                        last_born_raw = born_raw
                    if store_raw != last_store_raw:  # mostly the record before's: no lookup
                        last_store = hosts.get(store_raw) or _cached_v4_host(store_raw)
                        last_store_raw = store_raw
                    append(new(
                        total, crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
                        born_ts, last_born, store_ts, last_store, reconsume, prepared,
                        body, same_topic, copied,
                    ))  # fmt: skip
                    pos += run_size
            run = None
            continue
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
                and body_len >= 0
                and record_end <= end
            ):
                properties: dict[str, str] | None = None
                try:
                    if (
                        record_end - topic_at == same_span
                        and data.startswith(same_start, topic_at)
                        and data.endswith(same_tail, record_end - tail_len, record_end)
                    ):
                        # The id has the length it had before, so it is not empty; a
                        # separator in it would make it more than one piece.
                        uniq = data[topic_at + start_len : record_end - tail_len].decode()
                        if "\x02" not in uniq:
                            topic = same_topic
                            properties = same_template.copy()
                            properties[_UNIQ_KEY] = uniq
                    if properties is None:
                        found = _topic_and_properties(data, topic_at, record_end)
                        if found is not None:
                            topic, properties, template, value_at, value_end = found
                            if template is not None:
                                same_start = data[topic_at:value_at]
                                same_tail = data[value_end:record_end]
                                start_len = value_at - topic_at
                                tail_len = record_end - value_end
                                same_span = record_end - topic_at
                                same_topic = topic
                                same_template = template
                                run_size = total
                                run_body = body_len
                                run = _run_struct(
                                    body_len, start_len, same_span - start_len - tail_len, tail_len
                                )
                except UnicodeDecodeError:
                    properties = None  # decode_record below says where
                if properties is not None:
                    # The host lookups are inline in both loops, not a call: one per record
                    # would cost more than the comparison that mostly skips them.
                    if born_raw != last_born_raw:  # mostly the record before's: no lookup
                        last_born = hosts.get(born_raw) or _cached_v4_host(born_raw)
                        last_born_raw = born_raw
                    if store_raw != last_store_raw:  # mostly the record before's: no lookup
                        last_store = hosts.get(store_raw) or _cached_v4_host(store_raw)
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


# Structs of whole records by layout (see `decode_records_py`): made once per layout.
_runs: dict[tuple[int, int, int, int], struct.Struct] = {}


def _run_struct(body_len: int, start_len: int, id_len: int, tail_len: int) -> struct.Struct:
    """A struct of one whole IPv4 record of this layout: the fixed fields, the hosts' raw
    bytes, then the body, the bytes from the topic to the id, the id, and the rest."""
    key = (body_len, start_len, id_len, tail_len)
    found = _runs.get(key)
    if found is None:
        if len(_runs) > 256:
            _runs.clear()  # answers of ever new layouts: kept bounded
        found = _runs[key] = struct.Struct(
            f">iiiiiqqiq8sq8siqi{body_len}s{start_len}s{id_len}s{tail_len}s"
        )
    return found


def _topic_and_properties(
    data: bytes, topic_at: int, record_end: int
) -> tuple[str, dict[str, str], dict[str, str] | None, int, int] | None:
    """The topic and properties of the record whose topic's length byte is at ``topic_at``,
    with `_properties_of`'s template and the id's bounds; None when the lengths overrun
    (`decode_record` then says how). UnicodeDecodeError as ``bytes.decode``."""
    if topic_at + 3 > record_end:
        return None
    topic_len = data[topic_at]
    props_at = topic_at + 3 + topic_len
    if topic_len > MAX_TOPIC_BYTES or props_at > record_end:
        return None
    props_len = (data[props_at - 2] << 8) | data[props_at - 1]
    if props_len > MAX_PROPERTIES_BYTES or props_at + props_len != record_end:
        return None
    raw_topic = data[topic_at + 1 : props_at - 2]
    topic = _topics.get(raw_topic)
    if topic is None:
        if len(_topics) > 4096:
            _topics.clear()  # many topics read by one process: kept bounded
        topic = _topics[raw_topic] = raw_topic.decode()
    if not props_len:
        return topic, {}, None, 0, 0
    return topic, *_properties_of(data, props_at, record_end)


def _properties_of(
    data: bytes, start: int, end: int
) -> tuple[dict[str, str], dict[str, str] | None, int, int]:
    """`string_to_properties` of ``data[start:end]`` (UTF-8), through the template cache.

    Also returns, when the text's first ``UNIQ_KEY`` piece has a value that the parse keeps
    (no later piece of that name replaces it), the template and where that value starts and
    ends, so the records after it with the same bytes around their id skip even the lookup.
    The cache key is the text with that value cut out: it holds ``UNIQ_KEY\x01`` at a piece
    start, which a text without such a piece cannot, so keys of both kinds never meet. A
    text whose first ``UNIQ_KEY\x01`` is not at a piece start, or whose value is empty, is
    parsed in full (rare: no producer writes it so). UnicodeDecodeError as ``bytes.decode``.
    """
    at = data.find(_UNIQ_PIECE, start, end)
    if at < 0:
        key = data[start:end]
        entry = _templates.get(key)
        if entry is None:
            entry = _add_template(key, -1)
        return entry[0].copy(), None, 0, 0
    value_at = at + len(_UNIQ_PIECE)
    value_end = data.find(b"\x02", value_at, end)
    if value_end < 0:
        value_end = end
    if (at != start and data[at - 1] != 2) or value_end == value_at:
        return string_to_properties(data[start:end].decode()), None, 0, 0
    key = data[start:value_at] + data[value_end:end]
    entry = _templates.get(key)
    if entry is None:
        entry = _add_template(key, value_at - start)
    template, keeps_value = entry
    properties = template.copy()
    if not keeps_value:
        return properties, None, 0, 0
    properties[_UNIQ_KEY] = data[value_at:value_end].decode()
    return properties, template, value_at, value_end


def _add_template(key: bytes, cut: int) -> tuple[dict[str, str], bool]:
    """Parse ``key`` (a text with its first UNIQ_KEY value cut out at byte ``cut``, or -1 for
    a text without one) as `string_to_properties` would the whole text, and cache it.

    The cut value is stood in for by a placeholder, so the template has UNIQ_KEY in the
    place the whole text's parse gives it; the flag says whether that piece's value is the
    one kept (True), or a later piece of the same name replaced it (False).
    """
    if len(_templates) >= 1024:
        _templates.clear()  # texts that differ record by record (distinct KEYS): kept bounded
    text = key.decode() if cut < 0 else (key[:cut] + b"-" + key[cut:]).decode()
    ours = -1 if cut < 0 else key.count(b"\x02", 0, cut)
    parsed: dict[str, str] = {}
    keeps_value = False
    for index, piece in enumerate(text.split("\x02")):
        name, sep, value = piece.partition("\x01")
        if sep and name and value:
            parsed[name] = value
            if name == _UNIQ_KEY:
                keeps_value = index == ours
    entry = _templates[key] = (parsed, keeps_value)
    return entry


def _cached_v4_host(raw: bytes) -> Host:
    """The host of a record's raw 8 bytes (IPv4 address, port), cached for the records after."""
    host = _hosts[raw] = _v4_host(raw[:4], _INT.unpack_from(raw, 4)[0])
    return host


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
