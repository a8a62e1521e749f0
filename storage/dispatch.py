"""The dispatcher: turns stored records into consume-queue entries and index keys.

The store writer hands it the records of each group commit directly (it already knows their
metadata); recovery and replicated (HA) data go through `CommitLog.dispatch_range`, which
reads the same metadata back from the commit log with `read_dispatch_batch` into the same
packed shape (consume-queue entries per queue, index keys per store timestamp). Replays are
idempotent: an entry or key that is already there is skipped.
"""

from __future__ import annotations

from typing import Any

from protocol.message import BLANK_MAGIC_CODE, MAGIC_CODE
from protocol.names import SCHEDULE_TOPIC, TIMER_TOPIC
from storage._hash import tags_code
from storage._record import (
    _BORN_V6,
    _INT,
    _LONG,
    _STORE_V6,
    HEAD,
    TRANSACTION_PREPARED,
    TRANSACTION_ROLLBACK,
)
from storage.consume_queue import ENTRY, ConsumeQueueStore
from storage.index_file import IndexService
from storage.store_config import DEFAULT_SCHEDULE_DELAYS_MS, schedule_tags_code

_TRANSACTION_MASK = 0xC
#: Why `read_dispatch_batch` stopped: the bytes end inside a record (or at the end), a blank
#: end-of-file record, or bytes that are no record.
STOP_MORE, STOP_FILE_END, STOP_BAD = 0, 1, 2
#: Bytes of the commit log `CommitLog.dispatch_range` reads (and dispatches) at a time.
DISPATCH_CHUNK = 1 << 20
_SCHEDULE, _TIMER = 1, 2
_TOPIC_KINDS = {SCHEDULE_TOPIC: _SCHEDULE, TIMER_TOPIC: _TIMER}
#: Index keys that wait after group commits before the dispatcher builds them in one go. As
#: RocketMQ's index lags the puts (its reput service builds it), nothing waits for the keys
#: but a query by key, which builds them first; a writer call costs about as much as a few
#: keys, and a group commit holds one millisecond's keys (often a handful). The checkpoint
#: builds them too, so a crash replays no more than before.
DEFERRED_INDEX_KEYS = 256
_TOPICS: dict[bytes, tuple[str, int]] = {}  # topic bytes -> (topic, kind)
_TAG_CODES: dict[bytes, int] = {}


class DispatchBatch:
    """Dispatch metadata of consecutive stored records, packed as a group commit packs its own.

    ``queue_runs``: per queue ``(topic, queue id, first queue offset, packed entries)`` with
    consecutive offsets; ``index_segments``: ``(store timestamp, [(<topic>#<key>, offset)])``
    in log order, one per run of records stored in the same millisecond (an index entry keeps
    its record's time).
    """

    __slots__ = (
        "_closed",
        "_open",
        "count",
        "index_enabled",
        "index_segments",
        "last_offset",
        "last_timestamp",
        "schedule_delays_ms",
    )

    def __init__(
        self, index_enabled: bool, schedule_delays_ms: tuple[int, ...] = DEFAULT_SCHEDULE_DELAYS_MS
    ) -> None:
        self.index_enabled = index_enabled
        self.schedule_delays_ms = schedule_delays_ms
        # (topic, queue id) -> [first queue offset, entries, next queue offset]
        self._open: dict[tuple[str, int], list[Any]] = {}
        self._closed: list[tuple[str, int, int, bytearray]] = []
        self.index_segments: list[tuple[int, list[tuple[str, int]]]] = []
        self.last_offset = -1
        self.last_timestamp = 0
        self.count = 0

    @property
    def grown(self) -> dict[tuple[str, int], int]:
        """The queue offset after the last entry, per queue with entries."""
        return {key: run[2] for key, run in self._open.items()}

    @property
    def queue_runs(self) -> list[tuple[str, int, int, bytearray]]:
        """Every run of consecutive entries, each queue's in queue-offset order."""
        return self._closed + [(k[0], k[1], run[0], run[1]) for k, run in self._open.items()]


def read_dispatch_batch(buf: bytes, base: int, batch: DispatchBatch) -> tuple[int, int]:
    """Read the whole records at the start of ``buf`` (log offset ``base``) into ``batch``.

    Returns (bytes read, why it stopped: STOP_MORE, STOP_FILE_END or STOP_BAD). The records
    are trusted to be well formed past their magic code (written by this store or its master).
    """
    unpack_head = HEAD.unpack_from
    unpack_long = _LONG.unpack_from
    unpack_int = _INT.unpack_from
    pack_entry = ENTRY.pack
    topics = _TOPICS
    tag_codes = _TAG_CODES
    open_runs = batch._open
    segments = batch.index_segments
    index_enabled = batch.index_enabled
    keys_ts = -1
    index_keys: list[tuple[str, int]] = []
    n = len(buf)
    pos = 0
    stop = STOP_MORE
    count = 0
    store_ts = last_phys = -1
    while pos + 8 <= n:
        if pos + HEAD.size > n:  # room for a blank end-of-file record only, or a partial head
            magic = _INT.unpack_from(buf, pos + 4)[0]
            if magic != MAGIC_CODE:
                stop = STOP_FILE_END if magic == BLANK_MAGIC_CODE else STOP_BAD
            break
        total, magic, _, queue_id, _, queue_offset, phys, sys_flag, _ = unpack_head(buf, pos)
        if magic != MAGIC_CODE or total <= 0 or phys != base + pos:
            stop = STOP_FILE_END if magic == BLANK_MAGIC_CODE else STOP_BAD
            break
        end = pos + total
        if end > n:
            break
        p = pos + (68 if sys_flag & _BORN_V6 else 56)
        (store_ts,) = unpack_long(buf, p)
        p += 8 + (20 if sys_flag & _STORE_V6 else 8) + 12
        p += 4 + unpack_int(buf, p)[0]  # past the body
        topic_len = buf[p]
        raw_topic = buf[p + 1 : p + 1 + topic_len]
        known = topics.get(raw_topic)
        if known is None:
            if len(topics) > 4096:
                topics.clear()
            name = raw_topic.decode()
            known = topics[raw_topic] = (name, _TOPIC_KINDS.get(name, 0))
        topic, kind = known
        p += 3 + topic_len
        props = buf[p:end]
        tran = sys_flag & _TRANSACTION_MASK
        if tran != TRANSACTION_PREPARED and tran != TRANSACTION_ROLLBACK:
            tags = _property(props, b"TAGS\x01")
            key = (topic, queue_id)
            run = open_runs.get(key)
            if run is None:
                run = open_runs[key] = [queue_offset, bytearray(), queue_offset]
            elif run[2] != queue_offset:  # not consecutive: start a new run for the queue
                batch._closed.append((topic, queue_id, run[0], run[1]))
                run = open_runs[key] = [queue_offset, bytearray(), queue_offset]
            if tags:
                code = tag_codes.get(tags)
                if code is None:
                    if len(tag_codes) > 4096:
                        tag_codes.clear()
                    code = tag_codes[tags] = tags_code(tags.decode())
            else:
                code = 0
            if kind:  # due times, as the master's group commit wrote them
                if kind == _SCHEDULE:
                    code = schedule_tags_code(batch.schedule_delays_ms, queue_id, store_ts)
                else:
                    start = _property(props, b"__STARTDELIVERTIME\x01")
                    code = int(start) if start.isdigit() else 0
            run[1] += pack_entry(phys, total, code)
            run[2] = queue_offset + 1
        if index_enabled and tran != TRANSACTION_ROLLBACK:
            keys = _property(props, b"KEYS\x01")
            uniq = _property(props, b"UNIQ_KEY\x01")
            if keys or uniq:
                if store_ts != keys_ts:
                    index_keys = []
                    segments.append((store_ts, index_keys))
                    keys_ts = store_ts
                if keys:
                    index_keys.extend((f"{topic}#{k}", phys) for k in keys.decode().split(" ") if k)
                if uniq:
                    index_keys.append((f"{topic}#{uniq.decode()}", phys))
        last_phys = phys
        count += 1
        pos = end
    if count:
        batch.count += count
        batch.last_offset = last_phys
        batch.last_timestamp = store_ts
    return pos, stop


def _property(props: bytes, name: bytes) -> bytes:
    """The value of ``name`` (with its separator) in a property string, b"" when absent; as
    `split_properties` reads it: the last piece wins, pieces without a value do not count."""
    at = props.rfind(name)
    while at >= 0:
        if at == 0 or props[at - 1] == 2:  # the start of a piece, not inside a value
            start = at + len(name)
            stop = props.find(b"\x02", start)
            value = props[start:] if stop < 0 else props[start:stop]
            if value:
                return value
        at = props.rfind(name, 0, at)
    return b""


class CommitLogDispatcher:
    """Builds consume queues and the index from group commits and dispatch batches."""

    def __init__(self, consume_queues: ConsumeQueueStore, index: IndexService | None) -> None:
        self.consume_queues = consume_queues
        self.index = index
        # Records at or below this offset are already indexed (replays skip them).
        self.index_end_offset = index.end_phy_offset if index is not None else -1
        self.last_dispatch_timestamp = 0
        self.dispatched = 0
        #: Index keys of dispatched groups, and their store times, in dispatch order: not in
        #: the index until `build_deferred_index`; ``deferred_keys`` counts them.
        self.deferred_index: list[tuple[list[tuple[str, int]], int]] = []
        self.deferred_keys = 0

    def dispatch_group(
        self,
        queue_entries: list[tuple[str, int, int, bytearray]],
        index_keys: list[tuple[str, int]],
        last_offset: int,
        store_timestamp: int,
        count: int,
        defer_index: bool = False,
    ) -> None:
        """Add a group commit's records at once: per queue ``(topic, queue id, first queue
        offset, packed entries)``, and the full index keys ``(<topic>#<key>, offset)``.

        ``last_offset`` is the commit-log offset of the group's last record, ``count`` its
        number of records (they all share ``store_timestamp``). The keys wait in
        `deferred_index` until `DEFERRED_INDEX_KEYS` wait (then this builds them, unless
        ``defer_index``: the SYNC_FLUSH writer answers the group's puts first and builds
        them itself), a read of the index, a checkpoint or another kind of dispatch.
        """
        queues = self.consume_queues
        for topic, queue_id, queue_offset, entries in queue_entries:
            queue = queues.queues.get((topic, queue_id))
            if queue is None:
                queue = queues.find_or_create(topic, queue_id)
            queue.put_entries(queue_offset, entries)
        index = self.index
        if index is not None and last_offset > self.index_end_offset:
            if index_keys:
                end = self.index_end_offset
                if index_keys[0][1] <= end:  # a replay: skip what is already indexed
                    index_keys = [k for k in index_keys if k[1] > end]
                self.deferred_index.append((index_keys, store_timestamp))
                self.deferred_keys += len(index_keys)
                if not defer_index and self.index_due:
                    self.build_deferred_index()
            self.index_end_offset = last_offset
        self.last_dispatch_timestamp = store_timestamp
        self.dispatched += count

    @property
    def index_due(self) -> bool:
        """Whether `DEFERRED_INDEX_KEYS` keys or more wait."""
        return self.deferred_keys >= DEFERRED_INDEX_KEYS

    def build_deferred_index(self) -> None:
        """Add the keys of `deferred_index` to the index, in dispatch order. Whoever reads
        or changes the index calls this first (the store's queries settle through it)."""
        deferred = self.deferred_index
        if deferred and self.index is not None:
            self.deferred_index = []
            self.deferred_keys = 0
            self.index.build_segments(deferred)

    def dispatch_batch(self, batch: DispatchBatch) -> None:
        """Add the records of a `DispatchBatch` (read back from the commit log)."""
        if not batch.count:
            return
        self.build_deferred_index()
        queues = self.consume_queues
        for topic, queue_id, queue_offset, entries in batch.queue_runs:
            queue = queues.queues.get((topic, queue_id))
            if queue is None:
                queue = queues.find_or_create(topic, queue_id)
            queue.put_entries(queue_offset, entries)
        index = self.index
        if index is not None and batch.last_offset > self.index_end_offset:
            end = self.index_end_offset
            for store_timestamp, keys in batch.index_segments:
                if keys[-1][1] <= end:
                    continue  # a replay: already indexed
                if keys[0][1] <= end:
                    keys = [k for k in keys if k[1] > end]
                index.build_many(keys, store_timestamp)
            self.index_end_offset = batch.last_offset
        self.last_dispatch_timestamp = batch.last_timestamp
        self.dispatched += batch.count
