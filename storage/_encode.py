"""Encoding of puts into commit-log records, done in the caller's task before the writer."""

from __future__ import annotations

import ipaddress
import struct

from protocol.message import MessageFormatError, crc32, encode_record
from storage._hash import tags_code as hash_tags
from storage._record import split_properties
from storage.commit_log import EncodedPut
from storage.results import (
    MessageBatch,
    MessageExtBrokerInner,
    PutMessageResult,
    PutMessageStatus,
)

MAX_PROPERTIES_SIZE = 32767
MAX_TOPIC_SIZE = 127


def encode_message(
    msg: MessageExtBrokerInner, store_host: tuple[str, int], max_message_size: int
) -> EncodedPut | PutMessageResult:
    """The record of one message, or the failed result explaining why it cannot be stored."""
    props = msg.properties
    if props:
        # properties_to_string, inlined: it runs for every message.
        properties = "\x02".join(
            [f"{k}\x01{v}" for k, v in props.items() if k and v is not None and v != ""]
        ).encode()
    else:
        properties = b""
    topic_part = _TOPIC_PARTS.get(msg.topic)
    born = _ipv4_cache.get(msg.born_host[0], b"")
    store = _ipv4_cache.get(store_host[0], b"")
    if topic_part is None or not born or not store or len(properties) > MAX_PROPERTIES_SIZE:
        return _encode_message(msg, properties, store_host, max_message_size)
    # The IPv4 fast path: what fast_encode_record writes, with the topic's bytes cached.
    body = msg.body
    body_len = len(body)
    props_len = len(properties)
    total = 90 + len(topic_part) + body_len + props_len
    if total > max_message_size:
        return PutMessageResult(
            PutMessageStatus.MESSAGE_ILLEGAL,
            remark=f"message of {total} bytes exceeds maxMessageSize {max_message_size}",
        )
    sys_flag = msg.sys_flag & ~_V6_BITS
    head = _IPV4_HEAD.pack(
        total, _MAGIC_CODE, crc32(body) & 0x7FFFFFFF, msg.queue_id, msg.flag, 0, 0,
        sys_flag, msg.born_timestamp, born, msg.born_host[1], 0, store, store_host[1],
        msg.reconsume_times, msg.prepared_transaction_offset, body_len,
    )  # fmt: skip
    record = bytearray().join((head, body, topic_part, props_len.to_bytes(2, "big"), properties))
    tags_code = msg.tags_code
    if tags_code is None:
        tags = props.get("TAGS")
        tags_code = hash_tags(tags) if tags else 0
    return EncodedPut(
        msg.topic,
        msg.queue_id,
        sys_flag,
        record,
        [0],
        [(tags_code, props.get("KEYS", ""), props.get("UNIQ_KEY", ""))],
    )


def _encode_message(
    msg: MessageExtBrokerInner,
    properties: bytes,
    store_host: tuple[str, int],
    max_message_size: int,
) -> EncodedPut | PutMessageResult:
    """`encode_message` for the first message of a topic or host, IPv6 hosts and errors."""
    props = msg.properties
    failure = _check(msg.topic, len(properties))
    if failure is not None:
        return failure
    topic_bytes = msg.topic.encode()
    if len(_TOPIC_PARTS) > 4096:
        _TOPIC_PARTS.clear()
    _TOPIC_PARTS[msg.topic] = bytes([len(topic_bytes)]) + topic_bytes
    try:
        record = fast_encode_record(
            msg.topic,
            msg.body,
            msg.queue_id,
            msg.flag,
            properties,
            msg.sys_flag,
            msg.born_timestamp,
            msg.born_host,
            store_host,
            msg.reconsume_times,
            msg.prepared_transaction_offset,
        ) or encode_record(
            topic=msg.topic,
            body=msg.body,
            queue_id=msg.queue_id,
            flag=msg.flag,
            properties=properties,
            sys_flag=msg.sys_flag,
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host,
            store_host=store_host,
            reconsume_times=msg.reconsume_times,
            prepared_transaction_offset=msg.prepared_transaction_offset,
        )
    except (MessageFormatError, ValueError, OSError) as exc:
        return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=str(exc))
    if len(record) > max_message_size:
        return PutMessageResult(
            PutMessageStatus.MESSAGE_ILLEGAL,
            remark=f"message of {len(record)} bytes exceeds maxMessageSize {max_message_size}",
        )
    tags_code = msg.tags_code
    if tags_code is None:
        tags = props.get("TAGS")
        tags_code = hash_tags(tags) if tags else 0
    return EncodedPut(
        msg.topic,
        msg.queue_id,
        record_sys_flag(record),
        record,
        [0],
        [(tags_code, props.get("KEYS", ""), props.get("UNIQ_KEY", ""))],
    )


def encode_batch(
    batch: MessageBatch, store_host: tuple[str, int], max_message_size: int
) -> EncodedPut | PutMessageResult:
    """The records of a batch back to back (all or nothing)."""
    if not batch.elements:
        return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark="empty batch")
    fast = _encode_batch_ipv4(batch, store_host, max_message_size)
    if fast is not None:
        return fast
    header_props = batch.properties
    data = bytearray()
    starts: list[int] = []
    dispatch: list[tuple[int, str, str]] = []
    for flag, body, element_props in batch.elements:
        props_text = element_props
        if header_props:
            if props_text and not props_text.endswith("\x02"):
                props_text += "\x02"
            props_text += header_props
        properties = props_text.encode()
        failure = _check(batch.topic, len(properties))
        if failure is not None:
            return failure
        try:
            record = fast_encode_record(
                batch.topic,
                body,
                batch.queue_id,
                flag,
                properties,
                batch.sys_flag,
                batch.born_timestamp,
                batch.born_host,
                store_host,
                batch.reconsume_times,
                0,
            ) or encode_record(
                topic=batch.topic,
                body=body,
                queue_id=batch.queue_id,
                flag=flag,
                properties=properties,
                sys_flag=batch.sys_flag,
                born_timestamp=batch.born_timestamp,
                born_host=batch.born_host,
                store_host=store_host,
                reconsume_times=batch.reconsume_times,
            )
        except (MessageFormatError, ValueError, OSError) as exc:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=str(exc))
        if len(record) > max_message_size:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL,
                remark=f"batch element of {len(record)} bytes exceeds maxMessageSize",
            )
        props = split_properties(element_props) if element_props else {}
        tags = props.get("TAGS")
        starts.append(len(data))
        data += record
        dispatch.append(
            (hash_tags(tags) if tags else 0, props.get("KEYS", ""), props.get("UNIQ_KEY", ""))
        )
    return EncodedPut(batch.topic, batch.queue_id, record_sys_flag(data), data, starts, dispatch)


def _encode_batch_ipv4(
    batch: MessageBatch, store_host: tuple[str, int], max_message_size: int
) -> EncodedPut | PutMessageResult | None:
    """`encode_batch` for IPv4 hosts: records packed straight into one buffer, the invariant
    parts (topic, hosts, header properties) worked out once; None for IPv6 hosts."""
    born = _ipv4(batch.born_host[0])
    store = _ipv4(store_host[0])
    if born is None or store is None:
        return None
    topic_bytes = batch.topic.encode()
    failure = _check(batch.topic, 0)
    if failure is not None:
        return failure
    header_props = batch.properties.encode()
    pack = _IPV4_HEAD.pack
    fixed = 91 + len(topic_bytes)
    queue_id, sys_flag = batch.queue_id, batch.sys_flag & ~_V6_BITS
    born_timestamp, born_port = batch.born_timestamp, batch.born_host[1]
    store_port, reconsume = store_host[1], batch.reconsume_times
    topic_part = bytes([len(topic_bytes)]) + topic_bytes
    data = bytearray()
    starts: list[int] = []
    dispatch: list[tuple[int, str, str]] = []
    for flag, body, element_props in batch.elements:
        properties = element_props.encode()
        if header_props:
            if properties and not properties.endswith(b"\x02"):
                properties += b"\x02"
            properties += header_props
        props_len = len(properties)
        if props_len > MAX_PROPERTIES_SIZE:
            return PutMessageResult(
                PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                remark=f"properties of {props_len} bytes exceed {MAX_PROPERTIES_SIZE}",
            )
        body_len = len(body)
        total = fixed + body_len + props_len
        if total > max_message_size:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL,
                remark=f"batch element of {total} bytes exceeds maxMessageSize",
            )
        starts.append(len(data))
        data += pack(
            total, _MAGIC_CODE, crc32(body) & 0x7FFFFFFF, queue_id, flag, 0, 0, sys_flag,
            born_timestamp, born, born_port, 0, store, store_port, reconsume, 0, body_len,
        )  # fmt: skip
        data += body
        data += topic_part
        data += props_len.to_bytes(2, "big")
        data += properties
        if element_props:
            props = split_properties(element_props)
            tags = props.get("TAGS")
            dispatch.append(
                (hash_tags(tags) if tags else 0, props.get("KEYS", ""), props.get("UNIQ_KEY", ""))
            )
        else:
            dispatch.append((0, "", ""))
    return EncodedPut(batch.topic, batch.queue_id, sys_flag, data, starts, dispatch)


def record_sys_flag(record: bytearray) -> int:
    """SYSFLAG of the (first) record: the encoder may have added the IPv6 host bits."""
    return int.from_bytes(record[36:40], "big", signed=True)


def _check(topic: str, properties_len: int) -> PutMessageResult | None:
    if len(topic.encode()) > MAX_TOPIC_SIZE:
        return PutMessageResult(
            PutMessageStatus.MESSAGE_ILLEGAL, remark=f"topic longer than {MAX_TOPIC_SIZE} bytes"
        )
    if properties_len > MAX_PROPERTIES_SIZE:
        return PutMessageResult(
            PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
            remark=f"properties of {properties_len} bytes exceed {MAX_PROPERTIES_SIZE}",
        )
    return None


# The record up to the body length field when both hosts are IPv4 (sheet 5.1): 88 bytes.
_IPV4_HEAD = struct.Struct(">iiiiiqqiq4siq4siiqi")
_MAGIC_CODE = -626843481
_V6_BITS = 0x10 | 0x20
_ipv4_cache: dict[str, bytes | None] = {}
# topic -> its length byte and UTF-8 bytes, for topics already checked (at most 127 bytes).
_TOPIC_PARTS: dict[str, bytes] = {}


def _ipv4(address: str) -> bytes | None:
    """The 4 address bytes of an IPv4 (or IPv4-mapped IPv6) host, else None (cached)."""
    packed = _ipv4_cache.get(address, b"")
    if packed != b"":
        return packed
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        result = None
    else:
        if isinstance(ip, ipaddress.IPv6Address):
            ip = ip.ipv4_mapped or ip
        result = ip.packed if isinstance(ip, ipaddress.IPv4Address) else None
    if len(_ipv4_cache) > 4096:
        _ipv4_cache.clear()
    _ipv4_cache[address] = result
    return result


def fast_encode_record(
    topic: str,
    body: bytes,
    queue_id: int,
    flag: int,
    properties: bytes,
    sys_flag: int,
    born_timestamp: int,
    born_host: tuple[str, int],
    store_host: tuple[str, int],
    reconsume_times: int,
    prepared_transaction_offset: int,
) -> bytearray | None:
    """The put path's encoder for the common case of IPv4 hosts (one struct call and three
    copies); None for IPv6 hosts, which `protocol.message.encode_record` handles. The output
    is byte for byte what `encode_record` writes (tests compare them)."""
    born = _ipv4(born_host[0])
    store = _ipv4(store_host[0])
    if born is None or store is None:
        return None
    topic_bytes = topic.encode()
    body_len = len(body)
    total = 91 + body_len + len(topic_bytes) + len(properties)
    record = bytearray(
        _IPV4_HEAD.pack(
            total, _MAGIC_CODE, crc32(body) & 0x7FFFFFFF, queue_id, flag, 0, 0,
            sys_flag & ~_V6_BITS, born_timestamp, born, born_host[1], 0, store, store_host[1],
            reconsume_times, prepared_transaction_offset, body_len,
        )
    )  # fmt: skip
    record += body
    record.append(len(topic_bytes))
    record += topic_bytes
    record += len(properties).to_bytes(2, "big")
    record += properties
    return record
