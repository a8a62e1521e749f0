"""A batch send encoded straight into the commit log, in the caller's task (the inline path).

The queued and the fallback paths encode a batch into a buffer (`storage._encode.encode_batch`)
and `CommitLog.append` copies it into the mapped file, then patches each record's queue offset,
commit-log offset and store time. `append_batch` writes each record once, in place, with those
fields already set: byte for byte the same records (tests compare them), without the buffer,
the copy and the patch pass. It takes only the common case and leaves the rest to the caller.
"""

from __future__ import annotations

import zlib

from storage._encode import (
    _IPV4_HEAD,
    _MAGIC_CODE,
    _TOPIC_PARTS,
    _V6_BITS,
    MAX_PROPERTIES_SIZE,
    MAX_TOPIC_SIZE,
    _ipv4_cache,
)
from storage._hash import tags_code as hash_tags
from storage._record import split_properties
from storage.commit_log import CommitLog
from storage.consume_queue import ENTRY
from storage.group_commit import CommitGroup
from storage.results import MessageBatch, PutMessageResult, PutMessageStatus

# PREPARED (0x4) and ROLLBACK (0xC) are the transaction values with bit 0x4 set: such records
# take no queue offset and no consume-queue entry (`CommitLog.append` handles them).
_NOT_IN_QUEUE_BIT = 0x4
_PUT_OK = PutMessageStatus.PUT_OK


def _topic_part(topic: str) -> bytes | None:
    """The record's topic length byte and bytes (cached), None for a topic too long."""
    part = _TOPIC_PARTS.get(topic)
    if part is None:
        encoded = topic.encode()
        if len(encoded) > MAX_TOPIC_SIZE:
            return None
        if len(_TOPIC_PARTS) > 4096:
            _TOPIC_PARTS.clear()
        part = _TOPIC_PARTS[topic] = bytes([len(encoded)]) + encoded
    return part


def append_batch(
    commit_log: CommitLog,
    batch: MessageBatch,
    store_host: tuple[str, int],
    max_message_size: int,
    group: CommitGroup,
    msg_id_prefix: str,
    index_enabled: bool,
) -> PutMessageResult | None:
    """Write ``batch``'s records straight into the commit log at the write position, in
    ``group``, and return its result; None when it is not the common case (an empty batch,
    a host not IPv4, a transaction record, an element too large, properties too long, a
    batch that does not fit the rest of the file or its reserved blocks): the caller then
    encodes it with `storage._encode.encode_batch` and appends it with `append_put`, which
    answers those cases. The caller sets ``group.store_timestamp``."""
    elements = batch.elements
    files = commit_log.files.files
    born = _ipv4_cache.get(batch.born_host[0], b"")
    store = _ipv4_cache.get(store_host[0], b"")
    sys_flag = batch.sys_flag & ~_V6_BITS
    if not elements or not files or not born or not store or sys_flag & _NOT_IN_QUEUE_BIT:
        return None
    topic = batch.topic
    topic_part = _topic_part(topic)
    if topic_part is None:
        return None
    # First pass: each record's properties and size, and whether the batch fits.
    header_props = batch.properties.encode()
    fixed = 90 + len(topic_part)
    all_props: list[bytes] = []
    total = 0
    for _, body, element_props in elements:
        properties = element_props.encode()
        if header_props:
            if properties and not properties.endswith(b"\x02"):
                properties += b"\x02"
            properties += header_props
        size = fixed + len(body) + len(properties)
        if len(properties) > MAX_PROPERTIES_SIZE or size > max_message_size:
            return None
        all_props.append(properties)
        total += size
    mapped = files[-1]
    pos = mapped.wrote_position
    if pos + total > mapped.file_size - 8 or pos + total + 8 > mapped.reserved_position:
        return None  # the slow path writes the end-of-file blank or reserves disk space first
    # Second pass: the records, in place, with their append-time fields.
    queue_id = batch.queue_id
    key = (topic, queue_id)
    table = commit_log.topic_queue_table
    first_queue_offset = queue_offset = table.get(key, 0)
    table[key] = queue_offset + len(elements)
    now = group.store_timestamp
    view = mapped.view
    base = mapped.file_from_offset
    pack_head = _IPV4_HEAD.pack_into
    pack_entry = ENTRY.pack
    crc32 = zlib.crc32
    born_timestamp, born_port = batch.born_timestamp, batch.born_host[1]
    store_port, reconsume = store_host[1], batch.reconsume_times
    topic_len = len(topic_part)
    entries = group.queue_entries.get(key)
    if entries is None:
        entries = group.queue_entries[key] = bytearray()
    index_keys = group.index_keys
    offsets: list[int] = []
    for (flag, body, element_props), properties in zip(elements, all_props, strict=True):
        body_len = len(body)
        props_len = len(properties)
        size = fixed + body_len + props_len
        phys = base + pos
        pack_head(
            view, pos, size, _MAGIC_CODE, crc32(body) & 0x7FFFFFFF, queue_id, flag,
            queue_offset, phys, sys_flag, born_timestamp, born, born_port, now, store,
            store_port, reconsume, 0, body_len,
        )  # fmt: skip
        at = pos + 88
        view[at : at + body_len] = body
        at += body_len
        view[at : at + topic_len] = topic_part
        at += topic_len
        view[at : at + 2] = props_len.to_bytes(2, "big")
        view[at + 2 : at + 2 + props_len] = properties
        pos += size
        queue_offset += 1
        offsets.append(phys)
        # The dispatch takes TAGS, KEYS and UNIQ_KEY from the element's own properties.
        if element_props:
            props = split_properties(element_props)
            tags = props.get("TAGS")
            entries += pack_entry(phys, size, hash_tags(tags) if tags else 0)
            if index_enabled:
                keys = props.get("KEYS")
                if keys:
                    index_keys.extend((f"{topic}#{k}", phys) for k in keys.split(" ") if k)
                uniq_key = props.get("UNIQ_KEY")
                if uniq_key:
                    index_keys.append((f"{topic}#{uniq_key}", phys))
        else:
            entries += pack_entry(phys, size, 0)
    mapped.wrote_position = pos
    commit_log.last_store_timestamp = now
    group.wrote += total
    group.records += len(elements)
    group.last_offset = offsets[-1]
    result = PutMessageResult(
        _PUT_OK, offsets[0], total, first_queue_offset, len(elements), now, offsets, msg_id_prefix
    )
    group.inline.append(result)
    return result
