"""The store writer actor: it owns the write side of the commit log.

A put with nothing queued ahead of it, awaited or with a callback (the send path), is
appended in its caller's task, into the open inline group (`storage.inline_puts`, a part the
writer owns and calls). Any other put is queued: the writer takes every put waiting in its
mailbox and cuts them into group commits of at most `GROUP_LIMIT` puts (the callers already
share one wake-up event per such run). For each group it appends the records straight into the
mapped commit-log file (assigning physical offset, queue offset and store timestamp), then
completes it: publishes the new committed offset, dispatches the group's consume-queue
entries and index keys, tells the message-arriving listener (the pull-hold service) which
queues grew, and answers each put. A slave's replicated appends are queued the same way
(`storage.replicated_append`).

With ASYNC_FLUSH a group is completed at once. With SYNC_FLUSH it waits for a flush, run by a
thread of its own (`storage.flush_thread`) while puts keep being appended: one flush answers
every group appended before it started, and the group commit service (a second task) starts
the next flush as soon as one returns, with every group appended meanwhile, before it
completes the flushed ones (a big batch put finding no flush running starts one itself).
Readers never message the writer: they slice the mapped files up to the committed offset.

The writer alone updates the store's put counters and its dispatch position (RocketMQ's
reputFromOffset), both in the `StoreCounters` the store hands it; the store reads them for
its statistics. The commands, the counters and the statistics record are in
`storage.writer_commands`, re-exported here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from storage._encode import encode_message
from storage._record import offset_msg_id_prefix
from storage.commit_log import CommitLog, EncodedPut
from storage.consume_queue import ConsumeQueueStore
from storage.dispatch import CommitLogDispatcher
from storage.flush_thread import Flusher, FlushServerEnded, Waitable, make_flusher
from storage.group_commit import (
    CommitGroup,
    PendingPut,
    append_message,
    append_one,
    append_put,
    append_puts,
)
from storage.inline_puts import InlinePuts
from storage.queue_files import QueueFileOpener
from storage.replicated_append import append_replicated_data, dispatch_replicated
from storage.results import (
    MessageBatch,
    MessageExtBrokerInner,
    PutMessageResult,
    PutMessageStatus,
    put_latency_bucket,
)
from storage.store_api import MessageArrivingListener
from storage.store_config import FlushDiskType, MessageStoreConfig
from storage.truncation import truncate_store
from storage.writer_commands import (
    GROUP_LIMIT,
    WRITER_MAILBOX_SIZE,
    AppendReplicated,
    PrepareMaster,
    PutRecords,
    SealInline,
    StoreCounters,
    StoreWriterCommand,
    StoreWriterStatistics,
    TruncateCommitLog,
)
from supervisors.actor import Actor, ActorError, ActorStatus

#: SYNC_FLUSH: bytes appended since the last flush started that let a batch put start the next
#: flush itself (`StoreWriter.appended_batch`): a batch of 32 1 KiB messages does.
EARLY_FLUSH_BYTES = 16 * 1024

__all__ = [
    "GROUP_LIMIT",
    "WRITER_MAILBOX_SIZE",
    "AppendReplicated",
    "PrepareMaster",
    "PutRecords",
    "SealInline",
    "StoreCounters",
    "StoreWriter",
    "StoreWriterCommand",
    "StoreWriterStatistics",
    "TruncateCommitLog",
]

log = logging.getLogger("boltmq.broker.store")

_SEAL_INLINE = SealInline()


class StoreWriter(Actor[StoreWriterCommand]):
    """Owns the write side of a store: the commit log's appends and flushes, queue offsets,
    the dispatch to consume queues and the index, and the put counters."""

    def __init__(
        self,
        config: MessageStoreConfig,
        commit_log: CommitLog,
        consume_queues: ConsumeQueueStore,
        dispatcher: CommitLogDispatcher,
        counters: StoreCounters,
        *,
        reput_from_offset: int = 0,
        message_arriving_listener: MessageArrivingListener | None = None,
        mailbox_size: int = WRITER_MAILBOX_SIZE,
        before_truncation_sync: Callable[[], object] | None = None,
    ) -> None:
        # batch_limit = mailbox_size: the writer takes its whole mailbox per wake-up.
        super().__init__("store-writer", mailbox_size=mailbox_size, batch_limit=mailbox_size)
        self._config = config
        self._commit_log = commit_log
        self._dispatcher = dispatcher
        self._listener = message_arriving_listener
        # The store's checkpoint, lowered before a truncation is made durable.
        self._before_truncation_sync = before_truncation_sync
        self._counters = counters
        # The dispatch position is the writer's from here on (recovery replayed up to it).
        counters.reput_from_offset = reput_from_offset
        self._sync_flush = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._clock = config.clock
        self._index_enabled = dispatcher.index is not None
        # Set at each start (`on_start`): the store host is known once the broker's port is.
        self._msg_id_prefix = offset_msg_id_prefix(config.store_host)
        self._inline = InlinePuts(
            self,
            commit_log,
            sync_flush=self._sync_flush,
            clock=config.clock,
            msg_id_prefix=self._msg_id_prefix,
            index_enabled=self._index_enabled,
        )
        # The wake-up event the next puts share, and how many already took it.
        self._open_event = trio.Event()
        self._open_count = 0
        # SYNC_FLUSH: groups appended and waiting for the group commit service's flush.
        self._unflushed: list[CommitGroup] = []
        self._flush_wanted = trio.Event()
        # SYNC_FLUSH: the groups of the flush running, with its request; the flusher while
        # the group commit service runs; the commit-log offset the last flush covers.
        self._flushing: tuple[list[CommitGroup], Waitable] | None = None
        self._flusher: Flusher | None = None
        self._flush_requested_to = 0
        self._stopping = False
        # Set while no group commit service runs (so aclose never waits for one).
        self._drained = trio.Event()
        self._drained.set()
        # Set by each completion: a truncation waits on it for the groups before it.
        self._completed = trio.Event()
        self._batches = 0
        self._records = 0
        self._bytes = 0
        self._sync_flushes = 0
        self._flush_timeouts = 0
        self._largest_batch = 0
        self._inline_puts = 0
        self._queue_files = QueueFileOpener(commit_log, consume_queues)

    async def on_start(self) -> None:
        """Take the store host of the MsgIds now (the broker sets it once its port is bound)."""
        self._msg_id_prefix = self._inline.msg_id_prefix = offset_msg_id_prefix(
            self._config.store_host
        )

    @property
    def reput_from_offset(self) -> int:
        """Commit-log offset up to which records are dispatched (RocketMQ's reputFromOffset)."""
        return self._counters.reput_from_offset

    # -- the callers' side -----------------------------------------------------------------

    async def put(self, put: EncodedPut, timeout: float) -> PutMessageResult:
        """Append ``put`` and wait for its result (with SYNC_FLUSH, for the flush)."""
        if self._status is not ActorStatus.RUNNING:
            return self._not_running()
        inline = self._inline
        if refused := self._queue_files.refusal(
            put.topic, put.queue_id, len(put.record_starts), inline.backlog
        ):
            return self._refused(refused)
        group = await inline.enter()
        if group is not None:
            stored = append_put(
                self._commit_log, put, group, self._msg_id_prefix, self._index_enabled
            )
            return await inline.answer(group, stored)
        if self._status is not ActorStatus.RUNNING:
            return self._not_running()
        return await self._put_queued(put, timeout)

    async def put_message(
        self,
        msg: MessageExtBrokerInner,
        store_host: tuple[str, int],
        max_message_size: int,
        timeout: float,
    ) -> PutMessageResult:
        """`put` of one message, encoded here: when appended inline, straight into the
        commit log where it can be (`storage.group_commit.append_message`)."""
        if self._status is not ActorStatus.RUNNING:
            return self._not_running()
        inline = self._inline
        if refused := self._queue_files.refusal(msg.topic, msg.queue_id, 1, inline.backlog):
            return self._refused(refused)
        group = await inline.enter()
        if group is not None:
            stored = append_message(
                self._commit_log,
                msg,
                store_host,
                max_message_size,
                group,
                self._msg_id_prefix,
                self._index_enabled,
            )
            if stored is not None:
                return await inline.answer(group, stored)
        encoded = encode_message(msg, store_host, max_message_size)
        if isinstance(encoded, PutMessageResult):
            self._counters.put_failures += 1
            return encoded
        if group is not None:
            # Still no await since `enter`: the group is still open for this put.
            stored = append_put(
                self._commit_log, encoded, group, self._msg_id_prefix, self._index_enabled
            )
            return await inline.answer(group, stored)
        if self._status is not ActorStatus.RUNNING:
            return self._not_running()
        return await self._put_queued(encoded, timeout)

    async def _put_queued(self, put: EncodedPut, timeout: float) -> PutMessageResult:
        """Queue ``put`` to the writer and wait for its answer."""
        pending = PendingPut(put, None, self._take_event())
        inline = self._inline
        try:
            # No cancel scope and no reply slot of its own: the writer answers every put it
            # takes, and the mailbox's end answers the rest (see on_dropped).
            self._send.send_nowait(pending)
        except trio.WouldBlock:
            inline.backlog += 1
            try:
                return await self.call(PutRecords(put), timeout)
            except ActorError as exc:
                return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=str(exc))
            finally:
                inline.backlog -= 1
        inline.backlog += 1
        await pending.event.wait()
        result = pending.result
        while result is None:
            # The shared event was set by a group that ended before this put (the mailbox
            # held more than one batch): wait for this put's own answer.
            pending.event = trio.Event()
            await pending.event.wait()
            result = pending.result
        return result

    async def append_replicated(
        self, start_offset: int, data: bytes | memoryview, timeout: float
    ) -> bool:
        """Append HA data at ``start_offset`` (must equal the max offset); False if refused."""
        inline = self._inline
        inline.backlog += 1
        try:
            return await self.call(AppendReplicated(start_offset, data), timeout)
        except ActorError:
            return False
        finally:
            inline.backlog -= 1

    async def truncate(self, offset: int, timeout: float) -> int:
        """Drop the commit log from ``offset`` on, with its queue entries and index keys, once
        every put queued before is completed (`storage.truncation`); returns the new max
        offset. Raises `StoreTruncationError` (nothing changed) or `ActorError`."""
        return await self.call(TruncateCommitLog(offset), timeout)

    async def prepare_master(self, timeout: float) -> int:
        """Make a slave's store ready to take puts (`PrepareMaster`); returns the max offset."""
        return await self.call(PrepareMaster(), timeout)

    def put_nowait(self, put: EncodedPut, callback: Callable[[PutMessageResult], object]) -> None:
        """`InlinePuts.put_nowait`, refused first when its queue's file cannot be opened or
        the writer is not running."""
        inline = self._inline
        if refused := self._queue_files.refusal(
            put.topic, put.queue_id, len(put.record_starts), inline.backlog
        ):
            callback(self._refused(refused))
        elif self._status is not ActorStatus.RUNNING:
            callback(self._not_running())
        else:
            inline.put_nowait(put, callback)

    def put_message_nowait(
        self,
        msg: MessageExtBrokerInner,
        store_host: tuple[str, int],
        max_message_size: int,
        callback: Callable[[PutMessageResult], object],
    ) -> None:
        """`InlinePuts.put_message_nowait`, refused first as `put_nowait` is."""
        inline = self._inline
        if refused := self._queue_files.refusal(msg.topic, msg.queue_id, 1, inline.backlog):
            callback(self._refused(refused))
        elif self._status is not ActorStatus.RUNNING:
            callback(self._not_running())
        else:
            inline.put_message_nowait(msg, store_host, max_message_size, callback)

    def put_batch_nowait(
        self,
        batch: MessageBatch,
        store_host: tuple[str, int],
        max_message_size: int,
        callback: Callable[[PutMessageResult], object],
    ) -> None:
        """`InlinePuts.put_batch_nowait`, refused first as `put_nowait` is."""
        inline = self._inline
        if refused := self._queue_files.refusal(
            batch.topic, batch.queue_id, len(batch.elements), inline.backlog
        ):
            callback(self._refused(refused))
        elif self._status is not ActorStatus.RUNNING:
            callback(self._not_running())
        else:
            inline.put_batch_nowait(batch, store_host, max_message_size, callback)

    def settle(self, index: bool = False) -> None:
        """Complete the puts appended inline so far, so that reads see them (ASYNC_FLUSH;
        with SYNC_FLUSH they become visible once flushed, as before); with ``index``, also
        index the keys of completed groups still waiting (a query by key)."""
        self._inline.settle()
        if index:
            self._dispatcher.build_deferred_index()

    # -- what the inline path needs of the writer (`storage.inline_puts.InlineWriter`) ----

    def queue_nowait(self, put: EncodedPut, callback: Callable[[PutMessageResult], object]) -> None:
        """Queue ``put`` for the next group commit (something is queued ahead of it)."""
        try:
            self._send.send_nowait(PendingPut(put, callback, self._take_event()))
        except trio.WouldBlock:
            callback(
                PutMessageResult(
                    PutMessageStatus.OS_PAGECACHE_BUSY,
                    remark=f"the store writer has {self.mailbox_size} puts waiting; retry",
                )
            )
        else:
            self._inline.backlog += 1

    def request_seal(self) -> bool:
        """Send `SealInline` to the mailbox; False when it is full."""
        try:
            self._send.send_nowait(_SEAL_INLINE)
        except trio.WouldBlock:
            return False
        return True

    def sealed(self, group: CommitGroup) -> None:
        """A closed inline group: complete it now (ASYNC) or queue it for the flush (SYNC)."""
        if self._sync_flush:
            self._unflushed.append(group)
        else:
            self._complete([group], flushed=True)

    def wake_group_commit(self) -> None:
        """SYNC_FLUSH: wake the group commit service (a group waits for a flush)."""
        self._flush_wanted.set()

    def count_put_failure(self) -> None:
        """Count a put refused before it was appended (it could not be encoded)."""
        self._counters.put_failures += 1

    def appended_batch(self) -> None:
        """SYNC_FLUSH: after a batch put, start the flush from its own task when none runs
        and at least `EARLY_FLUSH_BYTES` wait for one, instead of after the connection's other
        frames are appended too. The disk then works while those append, and concurrent batch
        senders no longer move in lock step (append all, flush, answer all). Single sends
        keep joining the flush the service starts (a flush each would cost more)."""
        flusher = self._flusher
        if (
            flusher is not None
            and self._flushing is None
            and self._commit_log.max_offset - self._flush_requested_to >= EARLY_FLUSH_BYTES
        ):
            self._start_flush(flusher)
            self._flush_wanted.set()

    def _refused(self, refused: PutMessageResult) -> PutMessageResult:
        # A consume-queue file could not be opened (`QueueFileOpener.refusal`).
        self._counters.put_failures += 1
        return refused

    def _not_running(self) -> PutMessageResult:
        return PutMessageResult(
            PutMessageStatus.SERVICE_NOT_AVAILABLE,
            remark=f"actor {self.name} is {self._status.value}: put not sent",
        )

    def _take_event(self) -> trio.Event:
        event = self._open_event
        count = self._open_count + 1
        if count >= GROUP_LIMIT:
            self._open_event = trio.Event()
            count = 0
        self._open_count = count
        return event

    def on_dropped(self, command: object) -> None:
        """A queued put the writer will not append: it learns so."""
        if isinstance(command, PendingPut) and not command.taken and command.result is None:
            result = PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="store stopped"
            )
            _answer([command], [result])

    # -- the actor's side ------------------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the writer and, with SYNC_FLUSH, its group commit service."""
        self._stopping = False
        self._drained = trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                if self._sync_flush:
                    nursery.start_soon(self._group_commit_service)
                else:
                    self._drained.set()
                try:
                    await super().run(task_status)
                finally:
                    self._inline.seal()
                    self._stopping = True
                    self._flush_wanted.set()
        finally:
            # Cancelled while a SYNC_FLUSH put was being appended after the group commit
            # service stopped: stored, but the flush is not confirmed (shutdown flushes it).
            self._inline.seal()
            groups, self._unflushed = self._unflushed, []
            if groups:
                self._complete(groups, flushed=False)
            self._drained.set()

    async def aclose(self) -> None:
        """Stop taking puts, append what is queued, and wait until every group is answered."""
        await super().aclose()
        await self._drained.wait()

    async def flush_commit_log_service(self) -> None:
        """Flush the commit log every ``flush_interval_commit_log_ms`` when it grew (blocking
        fdatasync in a worker thread; with SYNC_FLUSH the group commits flush first)."""
        commit_log = self._commit_log
        interval = self._config.flush_interval_commit_log_ms / 1000
        while True:
            await trio.sleep(interval)
            if commit_log.flushed_offset < commit_log.max_offset:
                await trio.to_thread.run_sync(commit_log.flush)
                self._counters.flushes += 1

    async def handle(self, command: StoreWriterCommand) -> Any:
        """Handle one command as a group of one (it answers through its reply slot)."""
        await self.handle_batch([command])

    async def handle_batch(self, commands: list[StoreWriterCommand]) -> None:
        """Cut the commands into group commits; complete each (ASYNC) or queue it for the
        group commit service (SYNC), letting a flush start before appending the next."""
        commit_log = self._commit_log
        now = self._clock()
        prefix = self._msg_id_prefix
        index_enabled = self._index_enabled
        inline = self._inline
        crash = inline.take_crash()
        if crash is not None:
            raise crash
        # Puts sent from now on share a new event (this batch takes every queued put).
        self._open_event = trio.Event()
        self._open_count = 0
        # The inline puts came before anything queued now: complete them first.
        inline.seal()
        i, n = 0, len(commands)
        while i < n:
            command = commands[i]
            if isinstance(command, SealInline):
                inline.seal_received()
                i += 1
                continue
            if isinstance(command, TruncateCommitLog | PrepareMaster):
                i += 1
                await self._change_log(command)
                now = self._clock()
                continue
            group = CommitGroup(now)
            if isinstance(command, PendingPut):
                start = i
                i = append_puts(commit_log, commands, i, group, prefix, index_enabled)
                inline.backlog -= i - start
            else:
                i += 1
                self._append_request(command, group, prefix, index_enabled)
            group.close(commit_log)
            if not self._sync_flush:
                self._complete([group], flushed=True)
                continue
            self._unflushed.append(group)
            self._flush_wanted.set()
            if i < n:
                await trio.lowlevel.checkpoint()

    async def _change_log(self, command: TruncateCommitLog | PrepareMaster) -> None:
        """Truncate or prepare for puts once every group before is completed; nothing is
        appended between that wait and the change (no checkpoint in between)."""
        try:
            await self._wait_completed()
            commit_log = self._commit_log
            if isinstance(command, PrepareMaster):
                self._complete_blank_tail()
                # A replicated run may end inside a record: a put must not follow its head.
                offset = min(self._counters.reput_from_offset, commit_log.max_offset)
                if offset < commit_log.max_offset:
                    log.warning("store writer: dropping the partial record the master's last "
                                "replicated data ended with (%d to %d)",
                                offset, commit_log.max_offset)  # fmt: skip
            else:
                offset = command.offset
            cut = truncate_store(
                offset, commit_log, self._dispatcher.consume_queues, self._dispatcher,
                self._counters, at_dispatch_position=isinstance(command, PrepareMaster),
            )  # fmt: skip
            # The replicated appends never touched the queue-offset table: rebuilt from the
            # consume queues, so the next put continues each queue with no gap or duplicate.
            commit_log.topic_queue_table = self._dispatcher.consume_queues.queue_offset_table()
            self._flush_requested_to = min(self._flush_requested_to, commit_log.max_offset)
            if cut.from_offset != cut.to_offset:
                await trio.to_thread.run_sync(cut.sync, self._before_truncation_sync)
        except Exception as exc:
            command.reply.set_error(exc)
        else:
            command.reply.set_result(commit_log.max_offset)

    def _complete_blank_tail(self) -> None:
        """A replicated run that ended inside a file's end-of-file blank: the blank covers
        the rest of that file (dispatch went on to the next file), so the next put must
        start the next file, not follow the bytes received so far."""
        commit_log = self._commit_log
        last = commit_log.files.last_file()
        if last is not None and self._counters.reput_from_offset > commit_log.max_offset:
            log.info("store writer: the replicated log ends inside the end-of-file blank of "
                     "%s; the next put starts the next file", last.path.name)  # fmt: skip
            last.wrote_position = last.file_size
            commit_log.committed_offset = commit_log.max_offset

    async def _wait_completed(self) -> None:
        """Until every appended group is completed (SYNC_FLUSH: flushed and answered)."""
        inline = self._inline
        while True:
            inline.seal()
            if not self._unflushed and self._flushing is None:
                return
            self._completed = trio.Event()
            self._flush_wanted.set()
            await self._completed.wait()

    def _append_request(
        self,
        command: PutRecords | AppendReplicated,
        group: CommitGroup,
        prefix: str,
        index_enabled: bool,
    ) -> None:
        if isinstance(command, AppendReplicated):
            append_replicated_data(self._commit_log, command, group)
            return
        result = append_one(self._commit_log, command.put, group, prefix, index_enabled)
        if result.ok:
            group.records += result.msg_num
            group.last_offset = result.physical_offsets[-1]
        else:
            group.failures += 1
        group.replies.append((command.reply.set_result, result))

    def _start_flush(self, flusher: Flusher) -> None:
        """Seal the groups appended so far and start their flush (unless there are none)."""
        self._inline.seal()
        groups, self._unflushed = self._unflushed, []
        if groups:
            self._flush_requested_to = self._commit_log.max_offset
            self._flushing = (groups, flusher.request())

    async def _group_commit_service(self) -> None:
        """SYNC_FLUSH: flush once for every group appended so far, then complete them.

        The flush runs in a thread of its own (`storage.flush_thread`) while puts keep
        being appended. When a flush
        returns, the groups appended meanwhile go to the next flush at once, and only then
        are the flushed groups completed (dispatched and answered): the next fdatasync
        overlaps that work instead of waiting behind it. Groups are completed in append
        order, each only after a flush that started after its last append."""
        flusher = make_flusher(self._commit_log)
        flusher.start()
        self._flusher = flusher
        self._flush_requested_to = self._commit_log.max_offset
        inline = self._inline
        try:
            while True:
                if self._flushing is None:
                    waited = False
                    if self._dispatcher.index_due:
                        await self._index_after_answers()
                        waited = True
                    while self._flushing is None and not self._unflushed and inline.group is None:
                        if self._stopping:
                            return
                        self._flush_wanted = trio.Event()
                        await self._flush_wanted.wait()
                        waited = True
                    if waited and self._flushing is None:
                        # Woken by the first put since the last flush: one more scheduler
                        # pass lets the puts other connections already received join it.
                        await trio.lowlevel.checkpoint()
                    if self._flushing is None:  # not started by a put meanwhile
                        self._start_flush(flusher)
                    if self._flushing is None:
                        continue  # an inline group whose one put was refused
                groups, request = self._flushing
                if self._dispatcher.index_due:
                    await self._index_after_answers()  # while the fdatasync runs
                flushed = await self._wait_flush(request)
                self._flushing = None
                self._start_flush(flusher)
                self._complete(groups, flushed, defer_index=True)
        finally:
            self._flusher = None
            flusher.stop()
            # Cancelled: stored, but the flush is not confirmed (shutdown flushes them).
            self._inline.seal()
            groups = self._flushing[0] if self._flushing is not None else []
            self._flushing = None
            groups, self._unflushed = groups + self._unflushed, []
            if groups:
                self._complete(groups, flushed=False)
            self._drained.set()

    async def _index_after_answers(self) -> None:
        """Index the keys of the groups completed so far (`DEFERRED_INDEX_KEYS` of them or
        more), once their answers are out: the producers wait for the answers, and nothing
        needs the keys before them. Two scheduler passes let the connections' writers send
        the answers first; a query meanwhile indexes them itself (`settle`)."""
        await trio.lowlevel.checkpoint()
        await trio.lowlevel.checkpoint()
        self._dispatcher.build_deferred_index()

    async def _wait_flush(self, request: Waitable) -> bool:
        """Wait for the fdatasync of ``request``; False on syncFlushTimeout, or when what ran
        it ended unanswered (a flush process died: no disk error, the next flush retries)."""
        timeout_ms = self._config.sync_flush_timeout_ms
        with trio.move_on_after(timeout_ms / 1000):
            try:
                await request.wait()
            except FlushServerEnded as exc:
                self._flush_timeouts += 1
                log.error("store writer: %s; its puts are answered FLUSH_DISK_TIMEOUT (stored, "
                          "not confirmed on disk)", exc)  # fmt: skip
                return False
            self._sync_flushes += 1
            self._counters.flushes += 1
            return True
        self._flush_timeouts += 1
        log.warning("store writer: flush took longer than %d ms", timeout_ms)
        return False

    def _complete(
        self, groups: list[CommitGroup], flushed: bool, defer_index: bool = False
    ) -> None:
        """Publish, dispatch, notify and answer ``groups`` (in order) as one group commit;
        with ``defer_index`` their index keys wait (`CommitLogDispatcher.deferred_index`)."""
        commit_log = self._commit_log
        dispatcher = self._dispatcher
        listener = self._listener
        counters = self._counters
        puts = records = wrote = failures = 0
        # Put latency: from the group's store time (taken before its append) to its answer,
        # one bisect per group for all its puts (RocketMQ's putMessageDistributeTime).
        now = self._clock()
        latency = counters.put_latency
        for group in groups:
            self._inline_puts += len(group.inline)
            commit_log.committed_offset = group.end_offset
            if group.records:
                dispatcher.dispatch_group(
                    group.queue_runs,
                    group.index_keys,
                    group.last_offset,
                    group.store_timestamp,
                    group.records,
                    defer_index,
                )
            grown = group.grown
            if group.replicated:
                counters.reput_from_offset, replicated = dispatch_replicated(
                    commit_log, dispatcher, counters.reput_from_offset
                )
                grown = grown + replicated
            else:
                counters.reput_from_offset = group.end_offset
            if listener is not None:
                for topic, queue_id, max_offset in grown:
                    try:
                        listener(topic, queue_id, max_offset)
                    except Exception:
                        log.exception("message arriving listener failed for %s:%d", topic, queue_id)
            if not flushed:
                group.set_flush_timeout()
            _answer(group.pendings, group.results)
            for callback, result in group.callbacks:
                try:
                    callback(result)
                except Exception:
                    log.exception("store writer: a put callback failed")
            for setter, value in group.replies:
                setter(value)
            if group.flushed is not None:
                group.flushed.set()
            answered = (
                len(group.inline)
                + len(group.pendings)
                + sum(isinstance(value, PutMessageResult) for _, value in group.replies)
            )
            if answered and not group.replicated:
                latency[put_latency_bucket(now - group.store_timestamp)] += answered
            puts += answered
            records += group.records
            wrote += group.wrote
            failures += group.failures
        counters.puts += puts
        counters.put_failures += failures
        counters.put_messages += records
        counters.put_bytes += wrote
        counters.write_batches += 1
        self._batches += 1
        self._records += records
        self._bytes += wrote
        self._largest_batch = max(self._largest_batch, puts)
        self._completed.set()

    def statistics(self) -> StoreWriterStatistics:
        """The actor's counters plus group-commit figures."""
        return StoreWriterStatistics(
            **self._statistics_fields(),
            batches=self._batches,
            records=self._records,
            bytes_written=self._bytes,
            sync_flushes=self._sync_flushes,
            flush_timeouts=self._flush_timeouts,
            largest_batch=self._largest_batch,
            inline_puts=self._inline_puts,
        )


def _answer(pendings: list[PendingPut], results: list[PutMessageResult]) -> None:
    """Hand each put its result: its callback, or its (shared) event."""
    last_event = None
    for pending, result in zip(pendings, results, strict=True):
        pending.result = result
        callback = pending.callback
        if callback is not None:
            try:
                callback(result)
            except Exception:
                log.exception("store writer: a put callback failed")
        event = pending.event
        if event is not last_event:
            last_event = event
            event.set()
