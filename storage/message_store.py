"""The `MessageStore` protocol and its file implementation, RocketMQ's DefaultMessageStore.

Writes go through the store writer actor (``storage.store_writer``), which owns the
write side: group commit, flush, dispatch to consume queues and the index, and the put
counters and dispatch position the statistics report. Reads are plain
method calls that slice the mapped files up to the published committed offset; each first
completes the puts appended in their callers' tasks since the last group commit (with
ASYNC_FLUSH those are answered before they are dispatched, as RocketMQ answers before its
reput service builds the consume queue), so a get after a put always sees it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
from collections.abc import AsyncIterator, Callable, Set
from typing import Any

import trio

from storage._encode import encode_batch
from storage._record import read_dispatch_request
from storage.checkpoint import StoreCheckpoint, StoreLock, create_abort_file, delete_abort_file
from storage.commit_log import CommitLog, EncodedPut
from storage.consume_queue import CQ_STORE_UNIT_SIZE, ConsumeQueueStore
from storage.dispatch import CommitLogDispatcher
from storage.index_file import IndexService
from storage.queue_read import offset_out_of_range, read_entries
from storage.results import (
    GetMessageResult,
    GetMessageStatus,
    MessageBatch,
    MessageExtBrokerInner,
    PutMessageResult,
    PutMessageStatus,
    QueryMessageResult,
    StoreStatistics,
)
from storage.retention import RetentionService
from storage.store_api import (
    MAX_TRANSFER_BYTES_ON_MESSAGE_IN_MEMORY,
    MessageArrivingListener,
    MessageStore,
    run_store,
)
from storage.store_config import BrokerRole, MessageStoreConfig, StoreError
from storage.store_writer import StoreWriter
from storage.writer_commands import StoreCounters

log = logging.getLogger("boltmq.storage")

PREFAULT_AHEAD = 16 * 1024 * 1024
PREFAULT_STEP = 1024 * 1024
INDEX_PREFAULT_AHEAD = 2 * 1024 * 1024
#: Seconds without an append after which the store counts as idle (`idle_prefault_bytes`).
IDLE_PREFAULT_AFTER = 0.1
#: Seconds before the next commit-log file is made ahead again after that failed.
SPARE_RETRY_AFTER = 10.0

PUT_CALL_TIMEOUT = 60.0
"""Seconds a put waits for the writer when its mailbox is full (a backstop, not a flush timeout)."""

#: An offset past any commit log's end: a truncation to it only waits for the puts ahead.
_NO_CUT = (1 << 63) - 1

__all__ = ["FileMessageStore", "MessageArrivingListener", "MessageStore", "open_message_store"]


class FileMessageStore:
    """The file store: commit log, consume queues, index, checkpoint; see docs/storage.md."""

    def __init__(
        self,
        config: MessageStoreConfig,
        *,
        message_arriving_listener: MessageArrivingListener | None = None,
    ) -> None:
        self.config = config
        self.message_arriving_listener = message_arriving_listener
        self._build_parts()
        self._lock = StoreLock(config.lock_path)
        # Put counters and the dispatch position: the writer's to update (one per store, so
        # they outlive a restart of the writer).
        self._counters = StoreCounters()
        # The writer made by the last `open`, and the one taking puts while it runs.
        self._store_writer: StoreWriter | None = None
        self._writer: StoreWriter | None = None
        self._opened = False
        self._closing = trio.Event()
        self._stopped = trio.Event()
        # Reads count themselves (they never reach the writer).
        self._gets = 0
        self._get_messages = 0
        self.recovered_abnormally = False
        # A periodic checkpoint write put off by the open-file limit (logged once per spell).
        self._checkpoint_deferred = False
        # Set when the parts were closed: the next `open` builds them afresh from the files.
        self._parts_closed = False
        # What ended the last run, when it crashed (logged again once the restart recovers).
        self._crash: str | None = None

    def _build_parts(self) -> None:
        # The commit log, consume queues, index and checkpoint as the files on disk hold
        # them, before loading. A closed part is never reused: its maps are released, and
        # its file lists still name them (a reopen would read a released view).
        config = self.config
        closed: CommitLog | None = getattr(self, "commit_log", None)
        self.commit_log = CommitLog(config)
        if closed is not None:
            # Maps pull answers in flight still held at the close: closed by retention.
            self.commit_log.files.adopt_closing(closed.files)
        self.consume_queues = ConsumeQueueStore(
            config.consume_queue_dir, config.mapped_file_size_consume_queue_entries
        )
        self.index: IndexService | None = (
            IndexService(
                config.index_dir, config.max_hash_slot_num, config.max_index_num, config.clock
            )
            if config.message_index_enable
            else None
        )
        self.checkpoint = StoreCheckpoint(config.checkpoint_path)
        self.dispatcher = CommitLogDispatcher(self.consume_queues, self.index)
        self._parts_closed = False

    # -- lifecycle -------------------------------------------------------------------------

    def open(self) -> None:
        """Lock the directory, load the files and recover (abnormally if ``abort`` exists)."""
        if self._opened:
            return
        config = self.config
        if self._parts_closed:  # a restart (after a crash, or a reopen after aclose)
            self._build_parts()
        config.store_path_root_dir.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()
        try:
            abnormal = create_abort_file(config.abort_path)
            self.recovered_abnormally = abnormal
            self.commit_log.load()
            self.consume_queues.load()
            if self.index is not None:
                self.index.load()
            self.consume_queues.recover()
            if abnormal:
                if self._crash is None:  # after a crash `run` logs the stop and the recovery
                    log.warning(
                        "store %s was not shut down cleanly: recovering from the checkpoint",
                        config.store_path_root_dir,
                    )
                replay_from = self.commit_log.recover_abnormally(self.checkpoint.min_timestamp())
            else:
                self.commit_log.recover_normally()
                replay_from = self.consume_queues.max_physic_offset()
            commit_log = self.commit_log
            self.consume_queues.truncate_dirty(commit_log.max_offset)
            self.consume_queues.correct_min_offsets(commit_log.min_offset)
            replay_from = min(max(replay_from, commit_log.min_offset), commit_log.max_offset)
            self.dispatcher.index_end_offset = (
                self.index.end_phy_offset if self.index is not None else -1
            )
            reput_from_offset, _ = commit_log.dispatch_range(
                replay_from, commit_log.max_offset, self.dispatcher
            )
            commit_log.topic_queue_table = self.consume_queues.queue_offset_table()
            # The writer dispatches from where recovery stopped.
            self._store_writer = StoreWriter(
                config,
                commit_log,
                self.consume_queues,
                self.dispatcher,
                self._counters,
                reput_from_offset=reput_from_offset,
                message_arriving_listener=self.message_arriving_listener,
                before_truncation_sync=self._checkpoint_truncation,
            )
        except BaseException:
            self._close_files()
            self._lock.release()
            raise
        self._opened = True

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Open (if needed), run the writer and the flush and retention services until
        `aclose` or cancellation, then shut down cleanly."""
        self.open()
        writer = self._store_writer
        assert writer is not None  # made by open
        self._closing = trio.Event()
        self._stopped = trio.Event()
        retention = RetentionService(self.config, self.commit_log, self.consume_queues, self.index)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(writer.run)
                self._writer = writer
                nursery.start_soon(writer.flush_commit_log_service)
                nursery.start_soon(self._flush_logics_service)
                nursery.start_soon(self._prefault_service)
                nursery.start_soon(retention.run)
                task_status.started()
                if self._crash is not None:
                    self._log_recovered()
                await self._closing.wait()
                self._writer = None
                with trio.move_on_after(30):
                    await writer.aclose()
                nursery.cancel_scope.cancel()
        except Exception as exc:
            # The writer or a service of it failed (say an fdatasync): whoever runs the
            # store restarts it, and `open` recovers from the files.
            self._writer = None
            self._crash = _first_error(exc)
            root = self.config.store_path_root_dir
            log.error("store %s stopped: %s; sends are refused with SERVICE_NOT_AVAILABLE until "
                      "it restarts and recovers from its files (if this repeats, check the disk "
                      "holding %s and the kernel log)", root, self._crash, root)  # fmt: skip
            raise
        finally:
            self._writer = None
            # After a crash the abort file stays: the restart recovers as after a kill,
            # from the checkpoint, since a flush that failed once may not be trusted.
            self._shutdown(clean=self._crash is None)
            self._stopped.set()

    def _log_recovered(self) -> None:
        commit_log = self.commit_log
        log.warning("store %s recovered after it stopped (%s): commit log [%d, %d), %d consume "
                    "queues; sends are stored again", self.config.store_path_root_dir,
                    self._crash, commit_log.min_offset, commit_log.max_offset,
                    len(self.consume_queues.queues))  # fmt: skip
        self._crash = None

    async def aclose(self) -> None:
        """Stop taking puts, finish queued ones, flush everything and release the directory."""
        self._closing.set()
        if self._opened:
            await self._stopped.wait()

    def _shutdown(self, clean: bool = True) -> None:
        if not self._opened:
            return
        try:
            if clean:  # after a crash the restart's replay indexes what waited
                self.dispatcher.build_deferred_index()
            self.commit_log.flush()
            self.consume_queues.flush()
            if self.index is not None:
                self.index.flush()
            self._update_checkpoint()
            self.checkpoint.flush()
            if clean:
                delete_abort_file(self.config.abort_path)
        finally:
            self._close_files()
            self._lock.release()
            self._opened = False

    def _close_files(self) -> None:
        self._parts_closed = True
        self.commit_log.close()
        self.consume_queues.close()
        if self.index is not None:
            self.index.close()

    @property
    def running(self) -> bool:
        """Whether puts are being taken."""
        return self._writer is not None

    # -- background services ---------------------------------------------------------------

    async def _prefault_service(self) -> None:
        # Keep PREFAULT_AHEAD bytes past the write position faulted in (see MappedFile.prefault),
        # idle_prefault_bytes while no append comes, past the file's end into the spare next
        # file (made ahead, see MappedFileQueue.make_spare), and the newest index file's
        # slots and next entries (see IndexFile.prefault).
        commit_log = self.commit_log
        files = commit_log.files
        idle_ahead = self.config.idle_prefault_bytes
        seen_end = commit_log.max_offset
        idle_since = trio.current_time()
        spare_retry_at = 0.0
        while True:
            await trio.sleep(0.02)
            # A slave's log is written through the file (`MappedFile.append_through_file`).
            last = None if self.config.broker_role is BrokerRole.SLAVE else files.last_file()
            now = trio.current_time()
            if commit_log.max_offset != seen_end:
                seen_end, idle_since = commit_log.max_offset, now
            target, until_append = 0, False
            if last is not None and not last.is_full:
                if files.spare is None and now >= spare_retry_at:
                    try:
                        await trio.to_thread.run_sync(files.make_spare)
                    except OSError as exc:
                        # Only ahead of need: the writer creates the file itself when it
                        # gets there, and answers what fails then (a put, not the store).
                        log.warning("commit log %s: could not make the next file ahead (%s); "
                                    "trying again in %.0f s", files.directory, exc,
                                    SPARE_RETRY_AFTER)  # fmt: skip
                        spare_retry_at = now + SPARE_RETRY_AFTER
                distance = last.prefaulted_position - last.wrote_position
                spare = files.spare
                if spare is not None and last.prefaulted_position >= last.file_size:
                    distance += spare.prefaulted_position
                if distance < PREFAULT_AHEAD // 2:
                    target = last.wrote_position + PREFAULT_AHEAD
                elif idle_ahead and now - idle_since >= IDLE_PREFAULT_AFTER:
                    # Idle: further ahead, and only until the next append. Faulting in a new
                    # stretch of the log costs cpu the writers then lack (and a group
                    # commit's fdatasync was measured to wait 10-40 ms behind it); done while
                    # idle, the next burst of sends meets none of it (docs/performance-journal.md).
                    target, until_append = last.wrote_position + idle_ahead, True
            if last is not None and target:
                # The file being written, then the spare, each up to its share of the target.
                for mapped, end in ((last, target), (files.spare, target - last.file_size)):
                    # In steps: a long madvise would take a cpu from the writers for ms.
                    end = min(end, last.file_size)
                    while (
                        mapped is not None
                        and mapped.prefaulted_position < end
                        and files.last_file() is last
                        and not last.is_full
                        and not (until_append and commit_log.max_offset != seen_end)
                    ):
                        step = min(end, mapped.prefaulted_position + PREFAULT_STEP)
                        await trio.to_thread.run_sync(mapped.prefault, step)
            index = self.index.files[-1] if self.index is not None and self.index.files else None
            if index is not None and index.wants_prefault(INDEX_PREFAULT_AHEAD):
                await trio.to_thread.run_sync(index.prefault, INDEX_PREFAULT_AHEAD)

    async def _flush_logics_service(self) -> None:
        interval = self.config.flush_interval_consume_queue_ms / 1000
        while True:
            await trio.sleep(interval)
            # The keys waiting for the index go in first, here in the trio thread, so that
            # every record dispatched by the checkpoint's logics time is indexed by its index
            # time: a crash then replays the waiting keys with the rest.
            self.dispatcher.build_deferred_index()
            logics = self.dispatcher.last_dispatch_timestamp
            index = self.index.last_update_timestamp if self.index is not None else 0
            await trio.to_thread.run_sync(self.flush_logics, logics, index)

    def flush_logics(
        self, logics_timestamp: int | None = None, index_timestamp: int | None = None
    ) -> None:
        """Flush consume queues and index, then the checkpoint (blocking), with the
        dispatch and index times read before (each by default: now)."""
        if logics_timestamp is None:
            logics_timestamp = self.dispatcher.last_dispatch_timestamp
        if index_timestamp is None:
            index_timestamp = self.index.last_update_timestamp if self.index is not None else 0
        self.consume_queues.flush()
        if self.index is not None:
            self.index.flush()
        self._update_checkpoint(logics_timestamp, index_timestamp)
        try:
            self.checkpoint.flush()
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            # Writing the checkpoint takes a descriptor for a moment. At the open-file limit
            # (met and logged by the connections and queue files that took it) the write
            # waits for the next round: recovery from older times is slower, not wrong.
            if not self._checkpoint_deferred:
                log.warning("store %s: checkpoint not written (%s); it is written again each "
                            "second until a descriptor is free", self.config.store_path_root_dir,
                            exc.strerror)  # fmt: skip
            self._checkpoint_deferred = True
        else:
            self._checkpoint_deferred = False

    def _update_checkpoint(self, logics: int | None = None, index: int | None = None) -> None:
        checkpoint = self.checkpoint
        if self.commit_log.flushed_store_timestamp:
            checkpoint.physic_msg_timestamp = self.commit_log.flushed_store_timestamp
        logics = self.dispatcher.last_dispatch_timestamp if logics is None else logics
        if logics:
            checkpoint.logics_msg_timestamp = logics
        if index is None and self.index is not None:
            index = self.index.last_update_timestamp
        if index:
            checkpoint.index_msg_timestamp = index

    # -- writing ---------------------------------------------------------------------------

    async def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        """Store one message (answered per flushDiskType)."""
        refused = self._refuse_put()
        writer = self._writer
        if refused is not None or writer is None:
            return refused or PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE)
        config = self.config
        # The writer encodes it: when it is appended in this task, straight into the file.
        return await writer.put_message(
            msg, config.store_host, config.max_message_size, PUT_CALL_TIMEOUT
        )

    async def put_messages(self, batch: MessageBatch) -> PutMessageResult:
        """Store a batch: consecutive queue offsets, never split across files."""
        refused = self._refuse_put()
        if refused is not None:
            return refused
        encoded = encode_batch(batch, self.config.store_host, self.config.max_message_size)
        return await self._put(encoded)

    def put_message_nowait(
        self, msg: MessageExtBrokerInner, callback: Callable[[PutMessageResult], object]
    ) -> None:
        """`put_message` without waiting: ``callback`` gets the result after the group commit."""
        refused = self._refuse_put()
        writer = self._writer
        if refused is None and writer is not None:
            # The writer encodes it: appended now, straight into the file where it can be.
            config = self.config
            writer.put_message_nowait(msg, config.store_host, config.max_message_size, callback)
        else:
            callback(refused or PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE))

    def put_messages_nowait(
        self, batch: MessageBatch, callback: Callable[[PutMessageResult], object]
    ) -> None:
        """`put_messages` without waiting: ``callback`` gets the result."""
        refused = self._refuse_put()
        writer = self._writer
        if refused is None and writer is not None:
            # The writer encodes it: appended now, straight into the file where it can be.
            config = self.config
            writer.put_batch_nowait(batch, config.store_host, config.max_message_size, callback)
        else:
            callback(refused or PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE))

    async def put_encoded(self, put: EncodedPut) -> PutMessageResult:
        """Store records the caller has already encoded (no copy of the record bytes)."""
        refused = self._refuse_put()
        return refused if refused is not None else await self._put(put)

    async def _put(self, encoded: EncodedPut | PutMessageResult) -> PutMessageResult:
        writer = self._writer
        if writer is None:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="store closed")
        if isinstance(encoded, PutMessageResult):
            writer.count_put_failure()
            return encoded
        return await writer.put(encoded, PUT_CALL_TIMEOUT)

    async def append_to_commit_log(self, start_offset: int, data: bytes | memoryview) -> bool:
        """Append replicated bytes at exactly the store's max offset (HA slave)."""
        writer = self._writer
        if writer is None:
            return False
        return await writer.append_replicated(start_offset, data, PUT_CALL_TIMEOUT)

    async def truncate_commit_log(self, offset: int) -> int:
        """Drop the commit log from ``offset`` (a record boundary) on, with the queue entries
        and index keys pointing there, through the writer (`storage.truncation`); returns
        the new max offset. Raises `StoreTruncationError` when refused (nothing changed)."""
        return await self._running_writer().truncate(offset, PUT_CALL_TIMEOUT)

    def _checkpoint_truncation(self) -> None:
        # Made durable before the cut itself (the store writer calls it first, in a worker
        # thread): no time in the checkpoint is later than the newest record left, so an
        # abnormal recovery after a crash in the middle replays from before the cut.
        last = self.commit_log.last_store_timestamp
        checkpoint = self.checkpoint
        checkpoint.physic_msg_timestamp = min(checkpoint.physic_msg_timestamp, last)
        checkpoint.logics_msg_timestamp = min(checkpoint.logics_msg_timestamp, last)
        checkpoint.index_msg_timestamp = min(checkpoint.index_msg_timestamp, last)
        checkpoint.flush()

    async def change_role(self, role: BrokerRole) -> int:
        """Become a SLAVE or a master at run time; returns the max offset once done.

        SLAVE: puts are refused from this call on; the puts already taken are completed
        and `append_to_commit_log` continues at the max offset. A master role: the writer
        first dispatches every replicated record, drops a partial one at the end, and takes
        each queue's next offset from its consume queue, then puts are taken.
        """
        writer = self._running_writer()
        previous, self.config.broker_role = self.config.broker_role, role
        if role is BrokerRole.SLAVE:
            # A truncation past any end cuts nothing: it returns once the puts queued ahead
            # are appended and completed.
            return await writer.truncate(_NO_CUT, PUT_CALL_TIMEOUT)
        if previous is not BrokerRole.SLAVE:
            return self.commit_log.max_offset
        # Refuse puts until the table is rebuilt (a put now would take stale offsets).
        self.config.broker_role = BrokerRole.SLAVE
        max_offset = await writer.prepare_master(PUT_CALL_TIMEOUT)
        self.config.broker_role = role
        log.info("store %s: role %s; puts continue at commit-log offset %d",
                 self.config.store_path_root_dir, role, max_offset)  # fmt: skip
        return max_offset

    def _running_writer(self) -> StoreWriter:
        writer = self._writer
        if writer is None:
            raise StoreError(f"store {self.config.store_path_root_dir} is not running")
        return writer

    def _refuse_put(self) -> PutMessageResult | None:
        if self._writer is None:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="store closed")
        if self.config.broker_role is BrokerRole.SLAVE:
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="the broker role is slave"
            )
        return None

    # -- reading ---------------------------------------------------------------------------

    def _settle(self, index: bool = False) -> None:
        # Dispatch the puts appended inline since the last group commit (see the module doc);
        # with ``index``, index the keys still waiting (`CommitLogDispatcher.deferred_index`).
        writer = self._writer
        if writer is not None:
            writer.settle(index)
        elif index:
            self.dispatcher.build_deferred_index()

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
        """Whole records from ``offset`` on (sheet 3.13 limits), zero-copy."""
        self._settle()
        self._gets += 1
        queue = self.consume_queues.find(topic, queue_id)
        if queue is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        min_offset, max_offset = queue.min_offset, queue.max_offset
        refused = offset_out_of_range(offset, min_offset, max_offset)
        if refused is not None:
            return refused
        scan_bytes = max(16000, max_msg_nums * CQ_STORE_UNIT_SIZE)
        entries = queue.entries_from(offset, scan_bytes)
        if entries is None:
            # Skip to the start of the next consume-queue file.
            per_file = queue.file_size // CQ_STORE_UNIT_SIZE
            next_offset = (offset // per_file + 1) * per_file
            return GetMessageResult(
                GetMessageStatus.OFFSET_FOUND_NULL, next_offset, min_offset, max_offset
            )
        result = read_entries(
            entries, offset, min_offset, max_offset, max_msg_nums=max_msg_nums,
            max_total_bytes=max_total_bytes, tag_codes=tag_codes, record_filter=record_filter,
            get_data=self.commit_log.get_data, skip_to=self.commit_log.roll_next_file,
        )  # fmt: skip
        self._get_messages += len(result.buffers)
        return result

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """First live queue offset (0 when the queue does not exist)."""
        self._settle()
        queue = self.consume_queues.find(topic, queue_id)
        return queue.min_offset if queue is not None else 0

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """Entries ever written (0 when the queue does not exist)."""
        self._settle()
        queue = self.consume_queues.find(topic, queue_id)
        return queue.max_offset if queue is not None else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """Queue offset stored at ``timestamp`` or the nearer neighbour (0 when empty)."""
        self._settle()
        queue = self.consume_queues.find(topic, queue_id)
        if queue is None:
            return 0
        return queue.offset_by_time(timestamp, self.commit_log.store_time_of)

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the message at a queue offset (-1 when absent)."""
        self._settle()
        queue = self.consume_queues.find(topic, queue_id)
        entry = queue.get(offset) if queue is not None else None
        if entry is None:
            return -1
        stored = self.commit_log.store_time_of(entry[0], entry[1])
        return -1 if stored is None else stored

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store time of a queue's first live message (-1 when none)."""
        return self.get_message_store_timestamp(
            topic, queue_id, self.get_min_offset_in_queue(topic, queue_id)
        )

    def get_earliest_message_store_time(self) -> int:
        """Store time of the oldest record in the commit log (0 when empty)."""
        return self.commit_log.first_store_timestamp()

    def look_message_by_offset(self, commit_log_offset: int) -> memoryview | None:
        """The record at a commit-log offset (None when absent)."""
        self._settle()
        return self.commit_log.get_record(commit_log_offset)

    def query_message(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> QueryMessageResult:
        """Records of ``topic`` whose KEYS token or UNIQ_KEY is ``key``, newest first."""
        self._settle(index=True)
        index = self.index
        buffers: list[memoryview] = []
        if index is None:
            return QueryMessageResult(buffers, 0, 0)
        for phys in index.query(topic, key, max_num * 2 + 8, begin, end):
            record = self.commit_log.get_record(phys)
            if record is None:
                continue
            meta = read_dispatch_request(record, 0)
            # The hash index has collisions; keep only real matches.
            if meta.topic == topic and (key == meta.uniq_key or key in meta.keys.split(" ")):
                buffers.append(record)
                if len(buffers) >= max_num:
                    break
        last = index.files[-1] if index.files else None
        return QueryMessageResult(
            buffers,
            last.end_timestamp if last else 0,
            last.end_phy_offset if last else 0,
        )

    def get_commit_log_data(self, offset: int) -> memoryview | None:
        """Committed bytes from ``offset`` to the end of its file's data (HA master)."""
        self._settle()
        return self.commit_log.get_data_from(offset)

    def get_max_phy_offset(self) -> int:
        """Commit-log offset just past the last record."""
        return self.commit_log.max_offset

    def get_min_phy_offset(self) -> int:
        """Commit-log offset of the first byte still on disk."""
        return self.commit_log.min_offset

    def statistics(self) -> StoreStatistics:
        """Counters at one moment."""
        self._settle()
        c = self._counters
        commit_log = self.commit_log
        return StoreStatistics(
            commit_log_min_offset=commit_log.min_offset,
            commit_log_max_offset=commit_log.max_offset,
            committed_offset=commit_log.committed_offset,
            flushed_offset=commit_log.flushed_offset,
            commit_log_files=len(commit_log.files.files),
            consume_queues=len(self.consume_queues.queues),
            index_files=len(self.index.files) if self.index is not None else 0,
            puts=c.puts,
            put_messages=c.put_messages,
            put_bytes=c.put_bytes,
            put_failures=c.put_failures,
            write_batches=c.write_batches,
            flushes=c.flushes,
            gets=self._gets,
            get_messages=self._get_messages,
            dispatch_behind_bytes=commit_log.max_offset - c.reput_from_offset,
            running=self.running,
            put_latency=tuple(c.put_latency),
        )


def _first_error(exc: BaseException) -> str:
    """``Type: message`` of the first error inside ``exc`` (nurseries wrap it in groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


@contextlib.asynccontextmanager
async def open_message_store(
    config: MessageStoreConfig, **kwargs: Any
) -> AsyncIterator[FileMessageStore]:
    """Run a `FileMessageStore` for the duration of the block, closing it cleanly after."""
    async with run_store(FileMessageStore(config, **kwargs)) as store:
        yield store
