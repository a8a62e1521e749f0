"""Store-side reading of commit-log records: validation for recovery and dispatch metadata.

The full decoder is `protocol.message.decode_record`; these helpers read only the fields the
store needs, straight from the mapped bytes, because recovery and the dispatcher run them
over every record.
"""

from __future__ import annotations

import ipaddress
import struct
from typing import NamedTuple

from protocol.message import BLANK_MAGIC_CODE, MAGIC_CODE, MessageSysFlag, crc32
from storage._hash import tags_code

HEAD = struct.Struct(">iiiiiqqiq")  # total..born timestamp: 48 bytes
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_SHORT = struct.Struct(">h")
_TWO_LONGS = struct.Struct(">qq")
MIN_RECORD_SIZE = 91
BLANK_RECORD = struct.Struct(">ii")
PROPERTY_SEPARATOR = "\x02"
NAME_VALUE_SEPARATOR = "\x01"

_BORN_V6: int = MessageSysFlag.BORNHOST_V6
_STORE_V6: int = MessageSysFlag.STOREHOST_V6
_TRANSACTION_MASK: int = MessageSysFlag.TRANSACTION_MASK
TRANSACTION_PREPARED: int = MessageSysFlag.TRANSACTION_PREPARED
TRANSACTION_ROLLBACK: int = MessageSysFlag.TRANSACTION_ROLLBACK


class DispatchRequest(NamedTuple):
    """What the dispatcher needs of one stored record (consume queue entry and index keys)."""

    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    queue_offset: int
    keys: str  # the KEYS property (space separated), "" when absent
    uniq_key: str
    sys_flag: int


def store_timestamp_position(sys_flag: int) -> int:
    """Byte position of STORETIMESTAMP inside a record with this sysflag."""
    return 68 if sys_flag & _BORN_V6 else 56


def patch_append_fields(
    buf: bytearray, pos: int, queue_offset: int, physical_offset: int, store_timestamp: int
) -> None:
    """Write QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP of the record at ``buf[pos]``."""
    _TWO_LONGS.pack_into(buf, pos + 20, queue_offset, physical_offset)
    (sys_flag,) = _INT.unpack_from(buf, pos + 36)
    _LONG.pack_into(buf, pos + store_timestamp_position(sys_flag), store_timestamp)


def transaction_type(sys_flag: int) -> int:
    """The transaction value bits of a sysflag."""
    return sys_flag & _TRANSACTION_MASK


def read_store_timestamp(view: memoryview | bytes, pos: int) -> int:
    """STORETIMESTAMP of the record at ``pos``."""
    (sys_flag,) = _INT.unpack_from(view, pos + 36)
    (ts,) = _LONG.unpack_from(view, pos + store_timestamp_position(sys_flag))
    return int(ts)


def split_properties(text: str) -> dict[str, str]:
    """Parse a property string the tolerant Java way (pieces without key or value dropped)."""
    result: dict[str, str] = {}
    for piece in text.split(PROPERTY_SEPARATOR):
        key, sep, value = piece.partition(NAME_VALUE_SEPARATOR)
        if sep and key and value:
            result[key] = value
    return result


class RecordCheck(NamedTuple):
    """Outcome of checking the bytes at one position of a commit-log file."""

    kind: int  # RECORD, BLANK, END or BAD
    size: int
    reason: str


RECORD, BLANK, END, BAD = 0, 1, 2, 3


def check_record(
    view: memoryview, pos: int, file_from: int, file_size: int, check_crc: bool
) -> RecordCheck:
    """Validate the record at ``pos`` of the file starting at log offset ``file_from``."""
    remaining = file_size - pos
    if remaining < 8:
        return RecordCheck(END, 0, "end of file")
    total, magic = BLANK_RECORD.unpack_from(view, pos)
    if magic == BLANK_MAGIC_CODE:
        if total != remaining:
            return RecordCheck(BAD, 0, f"blank record size {total} != remaining {remaining}")
        return RecordCheck(BLANK, total, "")
    if magic != MAGIC_CODE:
        if total == 0 and magic == 0:
            return RecordCheck(END, 0, "no more data")
        return RecordCheck(BAD, 0, f"bad magic code {magic:#x}")
    if total < MIN_RECORD_SIZE or total > remaining:
        return RecordCheck(BAD, 0, f"bad record size {total}")
    _, _, crc, _, _, _, phys, sys_flag, _ = HEAD.unpack_from(view, pos)
    if phys != file_from + pos:
        return RecordCheck(BAD, 0, f"physical offset field {phys} != position {file_from + pos}")
    p = pos + 48 + (20 if sys_flag & _BORN_V6 else 8) + 8 + (20 if sys_flag & _STORE_V6 else 8)
    p += 12
    (body_len,) = _INT.unpack_from(view, p)
    body_start = p + 4
    p = body_start + body_len
    if body_len < 0 or p + 3 > pos + total:
        return RecordCheck(BAD, 0, f"bad body length {body_len}")
    topic_len = view[p]
    p += 1 + topic_len
    if p + 2 > pos + total:
        return RecordCheck(BAD, 0, f"bad topic length {topic_len}")
    (props_len,) = _SHORT.unpack_from(view, p)
    p += 2 + props_len
    if props_len < 0 or p != pos + total:
        return RecordCheck(BAD, 0, f"record lengths do not add up to its size {total}")
    if check_crc and crc32(view[body_start : body_start + body_len]) & 0x7FFFFFFF != crc:
        return RecordCheck(BAD, 0, "body CRC mismatch")
    return RecordCheck(RECORD, total, "")


def read_dispatch_request(view: memoryview, pos: int) -> DispatchRequest:
    """The dispatch metadata of the (already validated) record at ``pos``."""
    total, _, _, queue_id, _, queue_offset, phys, sys_flag, _ = HEAD.unpack_from(view, pos)
    p = pos + 48 + (20 if sys_flag & _BORN_V6 else 8)
    (store_ts,) = _LONG.unpack_from(view, p)
    p += 8 + (20 if sys_flag & _STORE_V6 else 8) + 12
    (body_len,) = _INT.unpack_from(view, p)
    p += 4 + body_len
    topic_len = view[p]
    topic = bytes(view[p + 1 : p + 1 + topic_len]).decode()
    p += 1 + topic_len
    (props_len,) = _SHORT.unpack_from(view, p)
    props = split_properties(bytes(view[p + 2 : p + 2 + props_len]).decode()) if props_len else {}
    return DispatchRequest(
        topic,
        queue_id,
        phys,
        total,
        tags_code_of(props.get("TAGS")),
        store_ts,
        queue_offset,
        props.get("KEYS", ""),
        props.get("UNIQ_KEY", ""),
        sys_flag,
    )


def tags_code_of(tags: str | None) -> int:
    """Consume-queue tags code of a TAGS value (0 when absent)."""
    return tags_code(tags) if tags else 0


def offset_msg_id_prefix(host: tuple[str, int]) -> str:
    """Hex of the store host part of an offset msg id (the offset's 16 hex digits follow)."""
    address = ipaddress.ip_address(host[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return (address.packed + host[1].to_bytes(4, "big")).hex().upper()
