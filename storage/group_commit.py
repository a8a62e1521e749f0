"""One group commit: the puts the store writer appends, flushes, dispatches and answers together.

`append_puts` is the put path's hot loop. For each queued put it assigns the queue offset,
copies the record straight into the mapped commit-log file and patches its append-time fields
there, packs the consume-queue entry onto its queue's run of entries and notes the index keys;
`CommitLogDispatcher.dispatch_group` later writes each queue's run with one copy and the index
header once. Puts that are not a single plain record, or that do not fit the rest of the file,
go through `CommitLog.append` (blank end-of-file record, batches, transactions).
`append_put` does the same for one put appended in its caller's task (the inline path).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from protocol.message import crc32
from protocol.names import SCHEDULE_TOPIC
from storage._encode import (
    _IPV4_HEAD,
    _MAGIC_CODE,
    _TOPIC_PARTS,
    _V6_BITS,
    MAX_PROPERTIES_SIZE,
    _ipv4_cache,
)
from storage._hash import tags_code as hash_tags
from storage._record import TRANSACTION_PREPARED, TRANSACTION_ROLLBACK, transaction_type
from storage.commit_log import CommitLog, EncodedPut, MessageTooLargeForFile
from storage.consume_queue import CQ_STORE_UNIT_SIZE, ENTRY
from storage.mapped_file import DiskFullError
from storage.results import MessageExtBrokerInner, PutMessageResult, PutMessageStatus
from storage.store_config import schedule_tags_code

_QUEUE_AND_PHYSICAL_OFFSET = struct.Struct(">qq")  # QUEUEOFFSET, PHYSICALOFFSET at byte 20
_LONG = struct.Struct(">q")
_SHORT = struct.Struct(">h")
_BORN_V6 = 0x10
# PREPARED (0x4) and ROLLBACK (0xC) are the transaction values with bit 0x4 set: such records
# take no queue offset and no consume-queue entry.
_NOT_IN_QUEUE_BIT = 0x4
_PUT_OK = PutMessageStatus.PUT_OK


class PendingPut:
    """A put waiting for its group commit: answered through ``callback`` or by setting
    ``result`` and then ``event`` (which the puts queued next to it share)."""

    __slots__ = ("callback", "event", "put", "result", "taken")

    def __init__(
        self,
        put: EncodedPut,
        callback: Callable[[PutMessageResult], object] | None,
        event: Any,
    ) -> None:
        self.put = put
        self.callback = callback
        # A trio.Event shared by the puts sent one after the other (at most GROUP_LIMIT);
        # the writer also uses it to cut its mailbox into groups.
        self.event = event
        self.result: PutMessageResult | None = None
        self.taken = False  # appended: the group commit answers it, never the mailbox's end


class CommitGroup:
    """What one group commit appended and still has to publish, dispatch and answer."""

    __slots__ = (
        "callbacks",
        "end_offset",
        "failures",
        "flushed",
        "grown",
        "index_keys",
        "inline",
        "last_offset",
        "pendings",
        "queue_entries",
        "queue_runs",
        "records",
        "replicated",
        "replies",
        "results",
        "store_timestamp",
        "wrote",
    )

    def __init__(self, store_timestamp: int) -> None:
        self.store_timestamp = store_timestamp
        self.pendings: list[PendingPut] = []
        self.results: list[PutMessageResult] = []
        # Requests answered after the group: (set_result of the reply slot, value).
        self.replies: list[tuple[Callable[[Any], object], Any]] = []
        # Results of puts appended in their caller's task (`append_put`); with SYNC_FLUSH
        # those callers wait on ``flushed``, set once the group is answered.
        self.inline: list[PutMessageResult] = []
        # SYNC_FLUSH callback puts appended inline (the send path): each callback with its
        # result (one of ``inline``), called when the group is answered after its flush.
        self.callbacks: list[tuple[Callable[[PutMessageResult], object], PutMessageResult]] = []
        self.flushed: Any = None
        self.queue_entries: dict[tuple[str, int], bytearray] = {}
        self.index_keys: list[tuple[str, int]] = []
        self.records = 0
        self.wrote = 0
        self.failures = 0
        self.replicated = False
        self.last_offset = -1
        self.end_offset = 0
        # Filled by `close`: (topic, queue id, first queue offset, entries), (topic, queue id,
        # new max offset) per queue that grew.
        self.queue_runs: list[tuple[str, int, int, bytearray]] = []
        self.grown: list[tuple[str, int, int]] = []

    def close(self, commit_log: CommitLog) -> None:
        """Note where the group ends and which queue offsets it took (before later groups)."""
        self.end_offset = commit_log.max_offset
        table = commit_log.topic_queue_table
        for key, entries in self.queue_entries.items():
            if key[0] == SCHEDULE_TOPIC:
                # Due time = store time + the level's delay, known only now (RocketMQ derives
                # it the same way from the record, as recovery and a slave do here).
                due = schedule_tags_code(
                    commit_log.config.schedule_delays_ms, key[1], self.store_timestamp
                )
                for at in range(12, len(entries), CQ_STORE_UNIT_SIZE):
                    _LONG.pack_into(entries, at, due)
            max_offset = table[key]
            self.queue_runs.append(
                (key[0], key[1], max_offset - len(entries) // CQ_STORE_UNIT_SIZE, entries)
            )
            self.grown.append((key[0], key[1], max_offset))

    def set_flush_timeout(self) -> None:
        """The flush did not finish in time: stored, but not known to be on disk."""
        for results in (self.results, self.inline):
            for result in results:
                if result.status is _PUT_OK:
                    result.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
        for _, value in self.replies:
            if isinstance(value, PutMessageResult) and value.status is _PUT_OK:
                value.status = PutMessageStatus.FLUSH_DISK_TIMEOUT


def append_puts(
    commit_log: CommitLog,
    commands: Sequence[object],
    start: int,
    group: CommitGroup,
    msg_id_prefix: str,
    index_enabled: bool,
) -> int:
    """Append the `PendingPut` run at ``commands[start]`` (up to the first other command or
    the first put of another run) into ``group``; returns the index after it."""
    files = commit_log.files
    table = commit_log.topic_queue_table
    now = group.store_timestamp
    pendings = group.pendings
    results = group.results
    queue_entries = group.queue_entries
    index_keys = group.index_keys
    pack_offsets = _QUEUE_AND_PHYSICAL_OFFSET.pack_into
    pack_long = _LONG.pack_into
    pack_entry = ENTRY.pack
    run = getattr(commands[start], "event", None)
    n = len(commands)
    i = start
    wrote = records = failures = 0
    phys = group.last_offset
    # The file being written: its view, start offset, write position and the last position
    # a record may end at (8 bytes stay free for a blank end-of-file record).
    mapped = files.files[-1] if files.files else None
    pos = room = base = 0
    view = memoryview(b"")
    if mapped is not None:
        view, base, pos = mapped.view, mapped.file_from_offset, mapped.wrote_position
        room = mapped.file_size - 8
    try:
        while i < n:
            command = commands[i]
            if type(command) is not PendingPut or command.event is not run:
                break
            i += 1
            command.taken = True
            put = command.put
            data = put.data
            size = len(data)
            sys_flag = put.sys_flag
            if (
                pos + size > room
                or mapped is None
                or pos + size + 8 > mapped.reserved_position
                or sys_flag & _NOT_IN_QUEUE_BIT
                or len(put.record_starts) != 1
            ):
                if mapped is not None:
                    mapped.wrote_position = pos
                result = append_one(commit_log, put, group, msg_id_prefix, index_enabled)
                pendings.append(command)
                results.append(result)
                if result.ok:
                    records += result.msg_num
                    phys = result.physical_offsets[-1]
                else:
                    failures += 1
                mapped = files.files[-1] if files.files else None
                if mapped is not None:
                    view, base, pos = mapped.view, mapped.file_from_offset, mapped.wrote_position
                    room = mapped.file_size - 8
                continue
            topic = put.topic
            key = (topic, put.queue_id)
            queue_offset = table.get(key, 0)
            table[key] = queue_offset + 1
            phys = base + pos
            end = pos + size
            view[pos:end] = data
            pack_offsets(view, pos + 20, queue_offset, phys)
            pack_long(view, pos + (68 if sys_flag & _BORN_V6 else 56), now)
            pos = end
            wrote += size
            records += 1
            tags_code, keys, uniq_key = put.dispatch[0]
            entries = queue_entries.get(key)
            if entries is None:
                entries = queue_entries[key] = bytearray()
            entries += pack_entry(phys, size, tags_code)
            if index_enabled and (keys or uniq_key):
                if keys:
                    index_keys.extend((f"{topic}#{k}", phys) for k in keys.split(" ") if k)
                if uniq_key:
                    index_keys.append((f"{topic}#{uniq_key}", phys))
            pendings.append(command)
            results.append(
                PutMessageResult(_PUT_OK, phys, size, queue_offset, 1, now, [phys], msg_id_prefix)
            )
    finally:
        if mapped is not None:
            mapped.wrote_position = pos
        group.wrote += wrote
        group.records += records
        group.failures += failures
        group.last_offset = phys
        commit_log.last_store_timestamp = now
    return i


def append_put(
    commit_log: CommitLog,
    put: EncodedPut,
    group: CommitGroup,
    msg_id_prefix: str,
    index_enabled: bool,
) -> PutMessageResult:
    """Append one put into ``group`` now (the inline put path) and return its result.

    The single-record case is `append_puts`' loop body for one put (kept in step with it);
    anything else goes through `append_one`. The caller sets ``group.store_timestamp``.
    """
    files = commit_log.files.files
    mapped = files[-1] if files else None
    data = put.data
    size = len(data)
    sys_flag = put.sys_flag
    if (
        mapped is None
        or mapped.wrote_position + size > mapped.file_size - 8
        or mapped.wrote_position + size + 8 > mapped.reserved_position
        or sys_flag & _NOT_IN_QUEUE_BIT
        or len(put.record_starts) != 1
    ):
        result = append_one(commit_log, put, group, msg_id_prefix, index_enabled)
        if result.ok:
            group.records += result.msg_num
            group.last_offset = result.physical_offsets[-1]
        else:
            group.failures += 1
        commit_log.last_store_timestamp = group.store_timestamp
        group.inline.append(result)
        return result
    now = group.store_timestamp
    topic = put.topic
    key = (topic, put.queue_id)
    table = commit_log.topic_queue_table
    queue_offset = table.get(key, 0)
    table[key] = queue_offset + 1
    pos = mapped.wrote_position
    phys = mapped.file_from_offset + pos
    end = pos + size
    view = mapped.view
    view[pos:end] = data
    _QUEUE_AND_PHYSICAL_OFFSET.pack_into(view, pos + 20, queue_offset, phys)
    _LONG.pack_into(view, pos + (68 if sys_flag & _BORN_V6 else 56), now)
    mapped.wrote_position = end
    commit_log.last_store_timestamp = now
    tags_code, keys, uniq_key = put.dispatch[0]
    if not index_enabled:
        keys = uniq_key = ""
    return _add_inline_record(
        group, key, phys, size, queue_offset, tags_code, keys, uniq_key, msg_id_prefix
    )


def _add_inline_record(
    group: CommitGroup,
    key: tuple[str, int],
    phys: int,
    size: int,
    queue_offset: int,
    tags_code: int,
    keys: str | None,
    uniq_key: str | None,
    msg_id_prefix: str,
) -> PutMessageResult:
    """Note a record an inline put wrote: its consume-queue entry and index keys for the
    group's dispatch, and its result."""
    group.wrote += size
    group.records += 1
    group.last_offset = phys
    entries = group.queue_entries.get(key)
    if entries is None:
        entries = group.queue_entries[key] = bytearray()
    entries += ENTRY.pack(phys, size, tags_code)
    topic = key[0]
    if keys:
        group.index_keys.extend((f"{topic}#{k}", phys) for k in keys.split(" ") if k)
    if uniq_key:
        group.index_keys.append((f"{topic}#{uniq_key}", phys))
    now = group.store_timestamp
    result = PutMessageResult(_PUT_OK, phys, size, queue_offset, 1, now, [phys], msg_id_prefix)
    group.inline.append(result)
    return result


def append_message(
    commit_log: CommitLog,
    msg: MessageExtBrokerInner,
    store_host: tuple[str, int],
    max_message_size: int,
    group: CommitGroup,
    msg_id_prefix: str,
    index_enabled: bool,
) -> PutMessageResult | None:
    """Encode ``msg`` straight into the commit log at the write position, in ``group`` (the
    inline put path's common case), and return its result; None when it is not that case
    (a host not IPv4, a topic not yet checked, a transaction record, a record that does not
    fit the rest of the file or is too large): the caller then encodes it with
    `storage._encode.encode_message` and appends it with `append_put`.

    The record is byte for byte what `encode_message` builds with the append-time fields
    `append_put` patches (tests compare them); written in place it skips the record's
    intermediate buffer and copy. The caller sets ``group.store_timestamp``.
    """
    props = msg.properties
    if props:
        properties = "\x02".join(
            [f"{k}\x01{v}" for k, v in props.items() if k and v is not None and v != ""]
        ).encode()
    else:
        properties = b""
    topic = msg.topic
    topic_part = _TOPIC_PARTS.get(topic)
    born_host = msg.born_host
    born = _ipv4_cache.get(born_host[0], b"")
    store = _ipv4_cache.get(store_host[0], b"")
    sys_flag = msg.sys_flag & ~_V6_BITS
    files = commit_log.files.files
    if (
        topic_part is None
        or not born
        or not store
        or sys_flag & _NOT_IN_QUEUE_BIT
        or not files
        or len(properties) > MAX_PROPERTIES_SIZE
    ):
        return None
    body = msg.body
    body_len = len(body)
    props_len = len(properties)
    size = 90 + len(topic_part) + body_len + props_len
    mapped = files[-1]
    pos = mapped.wrote_position
    if size > max_message_size or pos + size > mapped.file_size - 8:
        return None
    if pos + size + 8 > mapped.reserved_position:
        return None  # the slow path reserves disk space first
    queue_id = msg.queue_id
    key = (topic, queue_id)
    table = commit_log.topic_queue_table
    queue_offset = table.get(key, 0)
    table[key] = queue_offset + 1
    phys = mapped.file_from_offset + pos
    now = group.store_timestamp
    view = mapped.view
    _IPV4_HEAD.pack_into(
        view, pos, size, _MAGIC_CODE, crc32(body) & 0x7FFFFFFF, queue_id, msg.flag,
        queue_offset, phys, sys_flag, msg.born_timestamp, born, born_host[1], now, store,
        store_host[1], msg.reconsume_times, msg.prepared_transaction_offset, body_len,
    )  # fmt: skip
    at = pos + 88
    view[at : at + body_len] = body
    at += body_len
    end = at + len(topic_part)
    view[at:end] = topic_part
    _SHORT.pack_into(view, end, props_len)
    view[end + 2 : end + 2 + props_len] = properties
    mapped.wrote_position = pos + size
    commit_log.last_store_timestamp = now
    tags_code = msg.tags_code
    if tags_code is None:
        tags = props.get("TAGS")
        tags_code = hash_tags(tags) if tags else 0
    keys = props.get("KEYS") if index_enabled else None
    uniq_key = props.get("UNIQ_KEY") if index_enabled else None
    return _add_inline_record(
        group, key, phys, size, queue_offset, tags_code, keys, uniq_key, msg_id_prefix
    )


def append_one(
    commit_log: CommitLog,
    put: EncodedPut,
    group: CommitGroup,
    msg_id_prefix: str,
    index_enabled: bool,
) -> PutMessageResult:
    """Append any put through `CommitLog.append` (the slow path) and note its dispatch;
    returns its result. Only ``group.wrote`` is counted here (the caller counts the rest)."""
    now = group.store_timestamp
    try:
        appended = commit_log.append(put, now)
    except MessageTooLargeForFile as exc:
        return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=str(exc))
    except DiskFullError as exc:
        return PutMessageResult(
            PutMessageStatus.SERVICE_NOT_AVAILABLE,
            remark=f"the broker's disk is full ({commit_log.files.directory}: {exc.strerror}); "
            "the message was not stored: free disk space, sends are taken again at once",
        )
    except OSError as exc:
        return PutMessageResult(PutMessageStatus.CREATE_MAPEDFILE_FAILED, remark=str(exc))
    group.wrote += appended.wrote_bytes
    starts = put.record_starts
    data_len = len(put.data)
    offsets = appended.physical_offsets
    tran = transaction_type(put.sys_flag)
    key = (put.topic, put.queue_id)
    for i, (tags_code, keys, uniq_key) in enumerate(put.dispatch):
        size = (starts[i + 1] if i + 1 < len(starts) else data_len) - starts[i]
        if tran != TRANSACTION_PREPARED and tran != TRANSACTION_ROLLBACK:
            entries = group.queue_entries.get(key)
            if entries is None:
                entries = group.queue_entries[key] = bytearray()
            entries += ENTRY.pack(offsets[i], size, tags_code)
        if index_enabled and tran != TRANSACTION_ROLLBACK and (keys or uniq_key):
            if keys:
                group.index_keys.extend(
                    (f"{put.topic}#{k}", offsets[i]) for k in keys.split(" ") if k
                )
            if uniq_key:
                group.index_keys.append((f"{put.topic}#{uniq_key}", offsets[i]))
    return PutMessageResult(
        _PUT_OK,
        wrote_offset=appended.wrote_offset,
        wrote_bytes=appended.wrote_bytes,
        queue_offset=appended.queue_offset,
        msg_num=appended.msg_num,
        store_timestamp=now,
        physical_offsets=offsets,
        msg_id_prefix=msg_id_prefix,
    )
