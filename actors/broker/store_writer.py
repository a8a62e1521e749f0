"""The store writer actor: the only task that appends to the commit log.

It drains every put waiting in its mailbox as one group: appends them all (assigning
physical offset, queue offset and store timestamp), flushes once when flushDiskType is
SYNC_FLUSH (fdatasync in a worker thread, so the event loop keeps serving), publishes the new
committed offset, dispatches the group's consume-queue entries and index keys, tells the
message-arriving listener (the pull-hold service) which queues grew, and only then answers
each put. Readers never message it: they slice the mapped files up to the committed offset.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from actors.base import Actor, ActorError, ActorStatistics, MailboxFull, Request
from storage._record import (
    TRANSACTION_PREPARED,
    TRANSACTION_ROLLBACK,
    DispatchRequest,
    offset_msg_id_prefix,
    transaction_type,
)
from storage.commit_log import EncodedPut, MessageTooLargeForFile
from storage.results import PutMessageResult, PutMessageStatus
from storage.store_config import FlushDiskType

if TYPE_CHECKING:
    from storage.message_store import FileMessageStore

log = logging.getLogger("boltmq.broker.store")

WRITER_MAILBOX_SIZE = 8192
"""Puts that may wait for the next group commit before callers block (backpressure)."""


@attrs.frozen
class PutRecords(Request[PutMessageResult]):
    """Append one encoded put (a message or a batch) and answer with its result."""

    put: EncodedPut


@attrs.frozen
class AppendReplicated(Request[bool]):
    """Append raw commit-log bytes received from the HA master at ``start_offset``."""

    start_offset: int
    data: bytes | memoryview


@attrs.frozen
class PutRecordsThen:
    """Append one encoded put and hand its result to ``callback`` (called on the trio thread).

    The send path uses it so that a request needs no task of its own waiting for the store:
    the callback sends the answer. A callback is called exactly once, also when the writer
    stops before appending (with SERVICE_NOT_AVAILABLE).
    """

    put: EncodedPut
    callback: Callable[[PutMessageResult], object]


StoreWriterCommand = PutRecords | PutRecordsThen | AppendReplicated


@attrs.frozen
class StoreWriterStatistics(ActorStatistics):
    """The writer's counters: group commits, records, bytes, flushes."""

    batches: int
    records: int
    bytes_written: int
    sync_flushes: int
    flush_timeouts: int
    largest_batch: int


class StoreWriter(Actor[StoreWriterCommand]):
    """Owns the write side of a `FileMessageStore` (commit log, queue offsets, dispatch)."""

    def __init__(self, store: FileMessageStore, *, mailbox_size: int = WRITER_MAILBOX_SIZE) -> None:
        super().__init__("store-writer", mailbox_size=mailbox_size, batch_limit=mailbox_size)
        self.store = store
        self._msg_id_prefix = offset_msg_id_prefix(store.config.store_host)
        self._batches = 0
        self._records = 0
        self._bytes = 0
        self._sync_flushes = 0
        self._flush_timeouts = 0
        self._largest_batch = 0

    # -- the callers' side -----------------------------------------------------------------

    async def put(self, put: EncodedPut, timeout: float) -> PutMessageResult:
        """Append ``put`` in the next group commit and wait for its result."""
        request = PutRecords(put)
        try:
            # The hot path skips `call`'s cancel scope: the writer answers every request it
            # takes, and a crash fails the queued ones (ActorCrashed), so nobody waits forever.
            self.cast_nowait(request)
        except MailboxFull:
            try:
                return await self.call(request, timeout)
            except ActorError as exc:
                return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=str(exc))
        except ActorError as exc:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=str(exc))
        try:
            return await request.reply.wait()
        except ActorError as exc:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=str(exc))

    async def append_replicated(
        self, start_offset: int, data: bytes | memoryview, timeout: float
    ) -> bool:
        """Append HA data at ``start_offset`` (must equal the max offset); False if refused."""
        try:
            return await self.call(AppendReplicated(start_offset, data), timeout)
        except ActorError:
            return False

    def put_nowait(self, put: EncodedPut, callback: Callable[[PutMessageResult], object]) -> None:
        """Queue ``put`` for the next group commit; ``callback`` gets its result."""
        try:
            self.cast_nowait(PutRecordsThen(put, callback))
        except MailboxFull:
            callback(
                PutMessageResult(
                    PutMessageStatus.OS_PAGECACHE_BUSY,
                    remark=f"the store writer has {WRITER_MAILBOX_SIZE} puts waiting; retry",
                )
            )
        except ActorError as exc:
            callback(PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=str(exc)))

    def on_dropped(self, command: object) -> None:
        """A queued put the writer will not append: its callback learns so."""
        if isinstance(command, PutRecordsThen):
            command.callback(
                PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="store stopped")
            )

    # -- the actor's side ------------------------------------------------------------------

    async def handle(self, command: StoreWriterCommand) -> Any:
        """Handle one command as a group of one (it answers through its reply slot)."""
        await self.handle_batch([command])

    async def handle_batch(self, commands: list[StoreWriterCommand]) -> None:
        """One group commit: append all, flush once, publish, dispatch, notify, answer."""
        store = self.store
        commit_log = store.commit_log
        now = store.config.clock()
        prefix = self._msg_id_prefix
        answers: list[tuple[StoreWriterCommand, Any]] = []
        dispatch: list[DispatchRequest] = []
        replicated = False
        wrote = 0
        for command in commands:
            if isinstance(command, AppendReplicated):
                ok = commit_log.append_data(command.start_offset, command.data)
                replicated = replicated or ok
                answers.append((command, ok))
                continue
            put = command.put
            try:
                appended = commit_log.append(put, now)
            except MessageTooLargeForFile as exc:
                answers.append(
                    (command, PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=str(exc)))
                )
                continue
            except OSError as exc:
                log.error("store writer: cannot create or map a commit-log file: %s", exc)
                answers.append(
                    (
                        command,
                        PutMessageResult(PutMessageStatus.CREATE_MAPEDFILE_FAILED, remark=str(exc)),
                    )
                )
                continue
            wrote += appended.wrote_bytes
            starts = put.record_starts
            data_len = len(put.data)
            offsets = appended.physical_offsets
            tran = transaction_type(put.sys_flag)
            in_queue = tran != TRANSACTION_PREPARED and tran != TRANSACTION_ROLLBACK
            for i, (tags_code, keys, uniq_key) in enumerate(put.dispatch):
                size = (starts[i + 1] if i + 1 < len(starts) else data_len) - starts[i]
                dispatch.append(
                    DispatchRequest(
                        put.topic,
                        put.queue_id,
                        offsets[i],
                        size,
                        tags_code,
                        now,
                        appended.queue_offset + i if in_queue else 0,
                        keys,
                        uniq_key,
                        put.sys_flag,
                    )
                )
            answers.append(
                (
                    command,
                    PutMessageResult(
                        PutMessageStatus.PUT_OK,
                        wrote_offset=appended.wrote_offset,
                        wrote_bytes=appended.wrote_bytes,
                        queue_offset=appended.queue_offset,
                        msg_num=appended.msg_num,
                        store_timestamp=now,
                        physical_offsets=offsets,
                        msg_id_prefix=prefix,
                    ),
                )
            )
        sync_flush = store.config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        if (wrote or replicated) and sync_flush and not await self._flush():
            for _, result in answers:
                if (
                    isinstance(result, PutMessageResult)
                    and result.status is PutMessageStatus.PUT_OK
                ):
                    result.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
        commit_log.publish()
        grown = self._dispatch(dispatch, replicated)
        self._notify(grown)
        self._account(commands, answers, wrote)
        for command, value in answers:
            if isinstance(command, PutRecordsThen):
                try:
                    command.callback(value)
                except Exception:
                    log.exception("store writer: a put callback failed")
            else:
                command.reply.set_result(value)

    async def _flush(self) -> bool:
        """fdatasync the commit log in a worker thread; False on syncFlushTimeout."""
        store = self.store
        with trio.move_on_after(store.config.sync_flush_timeout_ms / 1000):
            await trio.to_thread.run_sync(store.commit_log.flush, abandon_on_cancel=True)
            self._sync_flushes += 1
            store.counters["flushes"] += 1
            return True
        self._flush_timeouts += 1
        log.warning(
            "store writer: flush took longer than %d ms", store.config.sync_flush_timeout_ms
        )
        return False

    def _dispatch(
        self, requests: list[DispatchRequest], replicated: bool
    ) -> dict[tuple[str, int], int]:
        """Write consume-queue entries and index keys; returns queue -> new max offset."""
        store = self.store
        dispatcher = store.dispatcher
        grown: dict[tuple[str, int], int] = {}
        for request in requests:
            dispatcher.dispatch(request)
            grown[(request.topic, request.queue_id)] = request.queue_offset + 1
        if replicated:
            commit_log = store.commit_log

            def follow(request: DispatchRequest) -> None:
                dispatcher.dispatch(request)
                grown[(request.topic, request.queue_id)] = request.queue_offset + 1

            # Replicated data may end inside a record: the rest comes with the next append.
            store.reput_from_offset = commit_log.iter_dispatch(
                store.reput_from_offset, commit_log.committed_offset, follow
            )
        else:
            store.reput_from_offset = store.commit_log.committed_offset
        return grown

    def _notify(self, grown: dict[tuple[str, int], int]) -> None:
        listener = self.store.message_arriving_listener
        if listener is None:
            return
        for (topic, queue_id), max_offset in grown.items():
            try:
                listener(topic, queue_id, max_offset)
            except Exception:
                log.exception("message arriving listener failed for %s:%d", topic, queue_id)

    def _account(
        self,
        commands: list[StoreWriterCommand],
        answers: list[tuple[StoreWriterCommand, Any]],
        wrote: int,
    ) -> None:
        counters = self.store.counters
        records = 0
        for _, result in answers:
            if isinstance(result, PutMessageResult):
                counters["puts"] += 1
                if result.ok:
                    records += result.msg_num
                else:
                    counters["put_failures"] += 1
        counters["put_messages"] += records
        counters["put_bytes"] += wrote
        counters["write_batches"] += 1
        self._batches += 1
        self._records += records
        self._bytes += wrote
        self._largest_batch = max(self._largest_batch, len(commands))

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
        )
