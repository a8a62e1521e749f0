"""`MemoryMessageStore`: the `MessageStore` protocol in memory, for test suites and notebooks.

It keeps what the file store keeps, in the same formats, without files: one growing commit
log of RocketMQ records (a list of chunks, one per put, each at its commit-log offset), a
consume queue of 20-byte entries per (topic, queue id) and a key index. Records are encoded
by the file store's encoder (`storage._encode`) and their consume-queue entries and index keys
are read back by its dispatcher (`storage.dispatch.read_dispatch_batch`, as recovery and a
slave read them), so a record, its MsgId, its tags code (a delayed message's due time) and its
keys are the same bytes and values a file store would give; a pull answer is slices of the
records, never a re-encoding.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Set
from typing import Any, TypeVar

import trio

from protocol.message import MAGIC_CODE
from storage._encode import encode_batch, encode_message
from storage._record import (
    BLANK_RECORD,
    offset_msg_id_prefix,
    read_dispatch_request,
    read_store_timestamp,
)
from storage.commit_log import (
    EncodedPut,
    MessageTooLargeForFile,
    assign_append_fields,
    check_fits_file,
)
from storage.consume_queue import CQ_STORE_UNIT_SIZE, ENTRY, search_offset_by_time
from storage.dispatch import DispatchBatch, read_dispatch_batch
from storage.queue_read import offset_out_of_range, read_entries
from storage.results import (
    PUT_LATENCY_BUCKETS,
    GetMessageResult,
    GetMessageStatus,
    Host,
    MessageBatch,
    MessageExtBrokerInner,
    PutMessageResult,
    PutMessageStatus,
    QueryMessageResult,
    StoreStatistics,
    put_latency_bucket,
)
from storage.store_api import (
    MAX_TRANSFER_BYTES_ON_MESSAGE_IN_MEMORY,
    MessageArrivingListener,
    run_store,
)
from storage.store_config import (
    BrokerRole,
    MessageStoreConfig,
    StoreTruncationError,
    StoreUnsupportedError,
)

log = logging.getLogger("boltmq.storage")

__all__ = ["MemoryMessageStore", "open_memory_store"]

_HOUR_MS = 3600 * 1000
T = TypeVar("T", MessageExtBrokerInner, MessageBatch)


def _only_this_record(_physical_offset: int) -> int:
    # A record gone from memory says nothing of the next ones (retention drops whole puts).
    return -1


class MemoryMessageStore:
    """A `MessageStore` that keeps everything in memory (tests, notebooks); nothing on disk.

    Works as the file store does: puts (awaited and with callbacks, single and batch, with
    the same refusals: not running, slave role, message too large or larger than a
    commit-log file of ``mapped_file_size_commit_log``), gets by queue offset with the
    tags-code filter and the pull limits, min/max offsets, offsets by time, earliest times,
    look-ups by commit-log offset, queries by KEYS token and UNIQ_KEY (when
    ``message_index_enable``), and the message-arriving listener after each put.

    Each put is its own group commit, answered at once (a callback put calls its callback
    before the put returns, as the file store's ASYNC_FLUSH callback puts are answered).
    ``store_path_root_dir`` and the flush, prefault and disk settings are not used.

    Refused: HA replication (`append_to_commit_log`, `get_commit_log_data`, so also a dedup
    index rebuild over stored records) raises `StoreUnsupportedError`; a memory store is
    empty when made, so nothing survives the process, but a store run again after `aclose`
    keeps its messages.

    Retention: every ``clean_resource_interval_ms`` the records stored more than
    ``file_reserved_time_hours`` ago are dropped (oldest first; the commit log's and the
    queues' min offsets move up past them, as the file store's retention moves them past
    deleted files), so memory holds that many hours of messages; nothing else bounds it.

    `statistics` fields without a meaning here: ``commit_log_files``, ``index_files``,
    ``flushes`` and ``dispatch_behind_bytes`` are 0; ``committed_offset`` and
    ``flushed_offset`` equal the max offset (nothing waits for a flush); ``write_batches``
    counts puts; every put's latency is in the first bucket.
    """

    def __init__(
        self,
        config: MessageStoreConfig,
        *,
        message_arriving_listener: MessageArrivingListener | None = None,
    ) -> None:
        self.config = config
        self.message_arriving_listener = message_arriving_listener
        # The commit log: each put's records back to back, at its commit-log offset.
        self._chunks: list[bytes] = []
        self._chunk_starts: list[int] = []
        self._min_offset = 0
        self._max_offset = 0
        # (topic, queue id) -> the queue; and the next queue offset of each.
        self._queues: dict[tuple[str, int], _MemoryQueue] = {}
        self._topic_queue_table: dict[tuple[str, int], int] = {}
        # "<topic>#<key>" -> [(store timestamp, commit-log offset)], oldest first.
        self._index: dict[str, list[tuple[int, int]]] = {}
        self._index_last_timestamp = 0
        self._index_last_offset = 0
        self._msg_id_prefix = offset_msg_id_prefix(config.store_host)
        self._running = False
        self._closing = trio.Event()
        self._stopped = trio.Event()
        self._stopped.set()
        self._puts = self._put_messages = self._put_bytes = self._put_failures = 0
        self._gets = self._get_messages = 0
        self._put_latency = [0] * len(PUT_LATENCY_BUCKETS)

    # -- life (a supervisor child) ----------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Take puts and run retention until `aclose` or cancellation."""
        # The broker sets the store host once its port is bound, before it starts the store.
        self._msg_id_prefix = offset_msg_id_prefix(self.config.store_host)
        self._closing = trio.Event()
        self._stopped = trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._retention_service)
                self._running = True
                task_status.started()
                await self._closing.wait()
                nursery.cancel_scope.cancel()
        finally:
            self._running = False
            self._stopped.set()

    async def aclose(self) -> None:
        """Stop taking puts (the messages stay, for a later `run`)."""
        self._closing.set()
        await self._stopped.wait()

    @property
    def running(self) -> bool:
        """Whether puts are being taken."""
        return self._running

    # -- writes -------------------------------------------------------------------------------

    async def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        """Store one message."""
        await trio.lowlevel.checkpoint()
        return self._put(self._encode_message(msg))

    async def put_messages(self, batch: MessageBatch) -> PutMessageResult:
        """Store a batch: consecutive queue offsets."""
        await trio.lowlevel.checkpoint()
        return self._put(self._encode_batch(batch))

    def put_message_nowait(
        self, msg: MessageExtBrokerInner, callback: Callable[[PutMessageResult], object]
    ) -> None:
        """`put_message` without waiting: ``callback`` gets the result before this returns."""
        self._put(self._encode_message(msg), callback)

    def put_messages_nowait(
        self, batch: MessageBatch, callback: Callable[[PutMessageResult], object]
    ) -> None:
        """`put_messages` without waiting: ``callback`` gets the result before this returns."""
        self._put(self._encode_batch(batch), callback)

    async def append_to_commit_log(self, start_offset: int, data: bytes | memoryview) -> bool:
        """Refused: a memory store takes no replicated commit log (`StoreUnsupportedError`)."""
        raise _unsupported("appending a master's commit log (an HA slave)")

    # -- role changes -------------------------------------------------------------------------

    async def truncate_commit_log(self, offset: int) -> int:
        """Drop the records from ``offset`` (a record boundary) on, with their queue entries
        and index keys; returns the new max offset. Raises `StoreTruncationError` when
        ``offset`` is not a record boundary or is below the min offset (nothing changed)."""
        await trio.lowlevel.checkpoint()
        before = self._max_offset
        if offset >= before:
            return before
        if offset < self._min_offset:
            raise StoreTruncationError(
                f"cannot truncate the commit log to {offset}: its first record kept is at "
                f"{self._min_offset}"
            )
        at = bisect.bisect_right(self._chunk_starts, offset) - 1
        chunk, pos = self._chunks[at], offset - self._chunk_starts[at]
        walked = 0
        while walked < pos:  # a batch's chunk holds several records back to back
            total = BLANK_RECORD.unpack_from(chunk, walked)[0]
            if total <= 0:
                break
            walked += total
        if walked != pos:
            raise StoreTruncationError(
                f"cannot truncate the commit log to {offset}: no record starts there"
            )
        if pos:
            self._chunks[at] = chunk[:pos]
            at += 1
        del self._chunks[at:]
        del self._chunk_starts[at:]
        self._max_offset = offset
        for queue in self._queues.values():
            queue.drop_from(offset)
        self._topic_queue_table = {
            key: queue.max_offset for key, queue in self._queues.items() if queue.max_offset
        }
        for key, hits in list(self._index.items()):
            keep = [hit for hit in hits if hit[1] < offset]
            if keep:
                self._index[key] = keep
            else:
                del self._index[key]
        last = max((hits[-1] for hits in self._index.values()), key=lambda h: h[1], default=None)
        self._index_last_timestamp, self._index_last_offset = last if last else (0, 0)
        log.warning("commit log truncated from %d to %d (%d bytes dropped)",
                    before, offset, before - offset)  # fmt: skip
        return offset

    async def change_role(self, role: BrokerRole) -> int:
        """Become a SLAVE (puts refused) or a master (puts taken, each queue continuing where
        it ends); returns the max offset. A memory store takes no replicated data, so as a
        slave it only refuses puts."""
        await trio.lowlevel.checkpoint()
        self.config.broker_role = role
        return self._max_offset

    # -- reads ----------------------------------------------------------------------------------

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        tag_codes: Set[int] | None = None,
        max_total_bytes: int = MAX_TRANSFER_BYTES_ON_MESSAGE_IN_MEMORY,
        record_filter: Callable[[memoryview], bool] | None = None,
    ) -> GetMessageResult:
        """Whole records from ``offset`` on, filtered by tag hash codes (None = ``*``)."""
        self._gets += 1
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        min_offset, max_offset = queue.min_offset, queue.max_offset
        refused = offset_out_of_range(offset, min_offset, max_offset)
        if refused is not None:
            return refused
        # The entries the file store would scan (it reads up to one such slice at a time).
        scan_bytes = max(16000, max_msg_nums * CQ_STORE_UNIT_SIZE)
        entries = queue.entries_from(offset, scan_bytes - scan_bytes % CQ_STORE_UNIT_SIZE)
        result = read_entries(
            entries, offset, min_offset, max_offset, max_msg_nums=max_msg_nums,
            max_total_bytes=max_total_bytes, tag_codes=tag_codes, record_filter=record_filter,
            get_data=self._get_data, skip_to=_only_this_record,
        )  # fmt: skip
        self._get_messages += len(result.buffers)
        return result

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """First live queue offset (0 when the queue does not exist)."""
        queue = self._queues.get((topic, queue_id))
        return queue.min_offset if queue is not None else 0

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """Entries ever written (0 when the queue does not exist)."""
        queue = self._queues.get((topic, queue_id))
        return queue.max_offset if queue is not None else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """Queue offset stored at ``timestamp`` or the nearer neighbour (0 when empty)."""
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            return 0

        def store_time_at(queue_offset: int) -> int | None:
            entry = queue.get(queue_offset)
            return None if entry is None else self._store_time_of(entry[0], entry[1])

        return search_offset_by_time(
            queue.min_offset, queue.max_offset - 1, timestamp, store_time_at
        )

    def look_message_by_offset(self, commit_log_offset: int) -> memoryview | None:
        """The record at a commit-log offset (None when absent)."""
        return self._get_record(commit_log_offset)

    def query_message(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> QueryMessageResult:
        """Records of ``topic`` whose KEYS token or UNIQ_KEY is ``key``, newest first."""
        buffers: list[memoryview] = []
        if not self.config.message_index_enable:
            return QueryMessageResult(buffers, 0, 0)
        for store_timestamp, phys in reversed(self._index.get(f"{topic}#{key}", ())):
            if not begin <= store_timestamp <= end:
                continue
            record = self._get_record(phys)
            if record is None:
                continue
            meta = read_dispatch_request(record, 0)
            # "<topic>#<key>" is ambiguous when a topic holds "#": keep only real matches.
            if meta.topic == topic and (key == meta.uniq_key or key in meta.keys.split(" ")):
                buffers.append(record)
                if len(buffers) >= max_num:
                    break
        return QueryMessageResult(buffers, self._index_last_timestamp, self._index_last_offset)

    def get_commit_log_data(self, offset: int) -> memoryview | None:
        """Refused: a memory store serves no HA slave (`StoreUnsupportedError`)."""
        raise _unsupported("reading the commit log for an HA slave or a rebuild")

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store time of a queue's first live message (-1 when none)."""
        return self.get_message_store_timestamp(
            topic, queue_id, self.get_min_offset_in_queue(topic, queue_id)
        )

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the message at a queue offset (-1 when absent)."""
        queue = self._queues.get((topic, queue_id))
        entry = queue.get(offset) if queue is not None else None
        if entry is None:
            return -1
        stored = self._store_time_of(entry[0], entry[1])
        return -1 if stored is None else stored

    def get_earliest_message_store_time(self) -> int:
        """Store time of the oldest record kept (0 when empty)."""
        return read_store_timestamp(self._chunks[0], 0) if self._chunks else 0

    def get_max_phy_offset(self) -> int:
        """Commit-log offset just past the last record."""
        return self._max_offset

    def get_min_phy_offset(self) -> int:
        """Commit-log offset of the first record still kept."""
        return self._min_offset

    def statistics(self) -> StoreStatistics:
        """Counters at one moment (see the class doc for the fields without a meaning here)."""
        max_offset = self._max_offset
        return StoreStatistics(
            commit_log_min_offset=self._min_offset,
            commit_log_max_offset=max_offset,
            committed_offset=max_offset,
            flushed_offset=max_offset,
            commit_log_files=0,
            consume_queues=len(self._queues),
            index_files=0,
            puts=self._puts,
            put_messages=self._put_messages,
            put_bytes=self._put_bytes,
            put_failures=self._put_failures,
            write_batches=self._puts,
            flushes=0,
            gets=self._gets,
            get_messages=self._get_messages,
            dispatch_behind_bytes=0,
            running=self._running,
            put_latency=tuple(self._put_latency),
        )

    # -- retention --------------------------------------------------------------------------

    def clean_once(self) -> int:
        """Drop the records stored more than ``file_reserved_time_hours`` ago; returns how
        many commit-log bytes went."""
        reserved_ms = int(self.config.file_reserved_time_hours * _HOUR_MS)
        cutoff = self.config.clock() - reserved_ms
        chunks = self._chunks
        count = 0
        # A chunk's records share one store time, and store times grow along the log.
        while count < len(chunks) and read_store_timestamp(chunks[count], 0) <= cutoff:
            count += 1
        if not count:
            return 0
        before = self._min_offset
        del chunks[:count]
        del self._chunk_starts[:count]
        self._min_offset = self._chunk_starts[0] if chunks else self._max_offset
        min_offset = self._min_offset
        for queue in self._queues.values():
            queue.drop_below(min_offset)
        for key, hits in list(self._index.items()):
            keep = next((i for i, (_, phys) in enumerate(hits) if phys >= min_offset), len(hits))
            if keep == len(hits):
                del self._index[key]
            elif keep:
                del hits[:keep]
        return min_offset - before

    async def _retention_service(self) -> None:
        interval = self.config.clean_resource_interval_ms / 1000
        while True:
            await trio.sleep(interval)
            self.clean_once()

    # -- helpers --------------------------------------------------------------------------

    def _encode_message(self, msg: MessageExtBrokerInner) -> EncodedPut | PutMessageResult:
        return self._encode(encode_message, msg)

    def _encode_batch(self, batch: MessageBatch) -> EncodedPut | PutMessageResult:
        return self._encode(encode_batch, batch)

    def _encode(
        self, encoder: Callable[[T, Host, int], EncodedPut | PutMessageResult], item: T
    ) -> EncodedPut | PutMessageResult:
        refused = self._refuse_put()
        if refused is not None:
            return refused
        encoded = encoder(item, self.config.store_host, self.config.max_message_size)
        if isinstance(encoded, PutMessageResult):
            self._put_failures += 1
        return encoded

    def _refuse_put(self) -> PutMessageResult | None:
        if not self._running:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="store closed")
        if self.config.broker_role is BrokerRole.SLAVE:
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="the broker role is slave"
            )
        return None

    def _put(
        self,
        encoded: EncodedPut | PutMessageResult,
        callback: Callable[[PutMessageResult], object] | None = None,
    ) -> PutMessageResult:
        """Append, dispatch and answer one put as a group commit of its own."""
        grown: dict[tuple[str, int], int] = {}
        if isinstance(encoded, PutMessageResult):
            result = encoded
        else:
            result, grown = self._append(encoded)
        if callback is not None:
            callback(result)
        listener = self.message_arriving_listener
        if listener is not None:
            for (topic, queue_id), max_offset in grown.items():
                try:
                    listener(topic, queue_id, max_offset)
                except Exception:
                    log.exception("message arriving listener failed for %s:%d", topic, queue_id)
        return result

    def _append(self, put: EncodedPut) -> tuple[PutMessageResult, dict[tuple[str, int], int]]:
        self._puts += 1
        size = len(put.data)
        try:
            # The file store's limit, so that both stores take the same messages.
            check_fits_file(size, self.config.mapped_file_size_commit_log)
        except MessageTooLargeForFile as exc:
            self._put_failures += 1
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=str(exc)), {}
        now = self.config.clock()
        phys = self._max_offset
        queue_offset = assign_append_fields(put, phys, now, self._topic_queue_table)
        record = bytes(put.data)
        self._chunks.append(record)
        self._chunk_starts.append(phys)
        self._max_offset = phys + size
        # The entries and keys are read back from the record, as recovery reads them.
        batch = DispatchBatch(self.config.message_index_enable, self.config.schedule_delays_ms)
        read_dispatch_batch(record, phys, batch)
        for topic, queue_id, first, entries in batch.queue_runs:
            key = (topic, queue_id)
            queue = self._queues.get(key)
            if queue is None:
                queue = self._queues[key] = _MemoryQueue(first)
            queue.entries += entries
        for store_timestamp, keys in batch.index_segments:
            for index_key, offset in keys:
                self._index.setdefault(index_key, []).append((store_timestamp, offset))
            self._index_last_timestamp = store_timestamp
            self._index_last_offset = keys[-1][1]
        self._put_messages += len(put.record_starts)
        self._put_bytes += size
        self._put_latency[put_latency_bucket(0)] += 1  # answered within the call
        offsets = [phys + start for start in put.record_starts]
        result = PutMessageResult(
            PutMessageStatus.PUT_OK,
            wrote_offset=phys,
            wrote_bytes=size,
            queue_offset=queue_offset,
            msg_num=len(offsets),
            store_timestamp=now,
            physical_offsets=offsets,
            msg_id_prefix=self._msg_id_prefix,
        )
        return result, batch.grown

    def _get_data(self, offset: int, size: int) -> memoryview | None:
        """``size`` bytes at ``offset`` within one put's records, zero-copy; None if gone."""
        if offset < self._min_offset or size <= 0 or offset + size > self._max_offset:
            return None
        at = bisect.bisect_right(self._chunk_starts, offset) - 1
        chunk = self._chunks[at]
        pos = offset - self._chunk_starts[at]
        if pos + size > len(chunk):
            return None
        return memoryview(chunk)[pos : pos + size]

    def _get_record(self, offset: int) -> memoryview | None:
        head = self._get_data(offset, 8)
        if head is None:
            return None
        total, magic = BLANK_RECORD.unpack_from(head, 0)
        if magic != MAGIC_CODE or total <= 0:
            return None
        return self._get_data(offset, total)

    def _store_time_of(self, offset: int, size: int) -> int | None:
        data = self._get_data(offset, size)
        if data is None or size < 80:
            return None
        return read_store_timestamp(data, 0)


class _MemoryQueue:
    """One consume queue: its live 20-byte entries and the queue offset of the first."""

    __slots__ = ("entries", "min_offset")

    def __init__(self, min_offset: int) -> None:
        self.min_offset = min_offset
        self.entries = bytearray()

    @property
    def max_offset(self) -> int:
        """Entries ever written (the next queue offset)."""
        return self.min_offset + len(self.entries) // CQ_STORE_UNIT_SIZE

    def get(self, queue_offset: int) -> tuple[int, int, int] | None:
        """The entry ``(commit-log offset, size, tags code)`` at ``queue_offset``, if live."""
        if not self.min_offset <= queue_offset < self.max_offset:
            return None
        phys, size, tags = ENTRY.unpack_from(
            self.entries, (queue_offset - self.min_offset) * CQ_STORE_UNIT_SIZE
        )
        return phys, size, tags

    def entries_from(self, queue_offset: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` of entries from ``queue_offset`` (a copy: the queue grows)."""
        start = (queue_offset - self.min_offset) * CQ_STORE_UNIT_SIZE
        return bytes(self.entries[start : start + max_bytes])

    def drop_from(self, commit_log_offset: int) -> None:
        """Drop the entries pointing at or past ``commit_log_offset`` (a truncation)."""
        entries = self.entries
        count = len(entries) // CQ_STORE_UNIT_SIZE
        while count and ENTRY.unpack_from(entries, (count - 1) * CQ_STORE_UNIT_SIZE)[0] >= (
            commit_log_offset
        ):
            count -= 1
        del entries[count * CQ_STORE_UNIT_SIZE :]

    def drop_below(self, commit_log_min_offset: int) -> None:
        """Drop the entries pointing below the commit log's min offset (retention)."""
        entries = self.entries
        low, high = 0, len(entries) // CQ_STORE_UNIT_SIZE
        while low < high:  # entries point at increasing commit-log offsets
            mid = (low + high) // 2
            if ENTRY.unpack_from(entries, mid * CQ_STORE_UNIT_SIZE)[0] >= commit_log_min_offset:
                high = mid
            else:
                low = mid + 1
        if low:
            del entries[: low * CQ_STORE_UNIT_SIZE]
            self.min_offset += low


def _unsupported(what: str) -> StoreUnsupportedError:
    return StoreUnsupportedError(
        f"the memory store cannot do this: {what} needs the file store "
        "(storage.message_store), which keeps the commit log on disk"
    )


@contextlib.asynccontextmanager
async def open_memory_store(
    config: MessageStoreConfig, **kwargs: Any
) -> AsyncIterator[MemoryMessageStore]:
    """Run a `MemoryMessageStore` for the duration of the block, closing it after."""
    async with run_store(MemoryMessageStore(config, **kwargs)) as store:
        yield store
