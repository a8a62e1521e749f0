"""Puts appended in their callers' tasks: the store writer's open inline group.

A put (`StoreWriter.put`, or a callback put: `InlinePuts.put_nowait` and its message and
batch forms, the send path) with nothing queued ahead of it is appended in its caller's task,
as RocketMQ appends in the sending thread under its put lock: in trio code that does not await
is atomic, so the append (read the write position, copy, advance) needs no lock and no hop to
the writer. Such puts collect in an open "inline" group, which is completed later as one group
commit: with ASYNC_FLUSH by the writer (the first inline put of a group sends it a
`SealInline` command) or by a reader that must see the puts now (`InlinePuts.settle`); with
SYNC_FLUSH by the group commit service after the fdatasync that covers it, the callers (and
callbacks) waiting for that. With ASYNC_FLUSH an inline put is answered at once, a callback
put too, so answers keep the call order. While anything is queued (puts that found the writer
busy, HA appends), puts queue behind it, so the append order is the call order.

`InlinePuts` is the base of `storage.store_writer.StoreWriter`: it decides whether a put may
be appended inline and keeps the open group until it is sealed; the writer appends into it
and completes the sealed groups.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from storage._encode import encode_batch, encode_message
from storage._record import offset_msg_id_prefix
from storage.commit_log import EncodedPut
from storage.group_commit import CommitGroup, append_message, append_put
from storage.inline_batch import append_batch
from storage.results import (
    MessageBatch,
    MessageExtBrokerInner,
    PutMessageResult,
    PutMessageStatus,
)
from storage.store_config import FlushDiskType
from storage.writer_commands import SealInline, StoreWriterCommand
from supervisors.actor import Actor, ActorStatus

if TYPE_CHECKING:
    from storage.message_store import FileMessageStore

log = logging.getLogger("boltmq.broker.store")

_SEAL_INLINE = SealInline()


class InlinePuts(Actor[StoreWriterCommand]):
    """The store writer's inline put path: when a put may be appended in its caller's task,
    and the open group such puts collect in until it is sealed."""

    # Kept by the group commit side (`StoreWriter`): SYNC_FLUSH groups waiting for the
    # flush, and the event that wakes the group commit service.
    _unflushed: list[CommitGroup]
    _flush_wanted: trio.Event

    def __init__(self, name: str, store: FileMessageStore, *, mailbox_size: int) -> None:
        # batch_limit = mailbox_size: the writer takes its whole mailbox per wake-up.
        super().__init__(name, mailbox_size=mailbox_size, batch_limit=mailbox_size)
        self.store = store
        self._sync_flush = store.config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._clock = store.config.clock
        # Puts appended in their callers' tasks and not yet completed (see the module doc).
        self._inline: CommitGroup | None = None
        # Puts and requests sent to the mailbox and not yet appended: while any, puts queue
        # behind them instead of appending inline (the append order is the call order).
        self._backlog = 0
        # A SealInline is in the mailbox (ASYNC_FLUSH): it seals whatever group is open then.
        self._seal_sent = False
        # A failure to complete inline puts outside the writer's task (`_seal_for_caller`).
        self._crash: Exception | None = None
        self._msg_id_prefix = offset_msg_id_prefix(store.config.store_host)
        self._index_enabled = store.index is not None

    # -- callback puts (the send path) ----------------------------------------------------

    def put_nowait(self, put: EncodedPut, callback: Callable[[PutMessageResult], object]) -> None:
        """Append ``put`` now when nothing is queued, else queue it for the next group commit;
        ``callback`` gets its result as an awaited put would: with ASYNC_FLUSH at once when
        appended now, else (and always with SYNC_FLUSH) when its group commit is answered."""
        if self._status is not ActorStatus.RUNNING:
            callback(self._not_running())
            return
        group = None if self._backlog else self._inline_group()
        if group is not None:
            stored = append_put(
                self.store.commit_log, put, group, self._msg_id_prefix, self._index_enabled
            )
            _answer_inline(group, callback, stored)
            return
        self._queue_nowait(put, callback)

    def put_message_nowait(
        self,
        msg: MessageExtBrokerInner,
        store_host: tuple[str, int],
        max_message_size: int,
        callback: Callable[[PutMessageResult], object],
    ) -> None:
        """`put_nowait` of one message, encoded here: when nothing is queued, straight into
        the commit log where it can be (`storage.group_commit.append_message`)."""
        if self._status is not ActorStatus.RUNNING:
            callback(self._not_running())
            return
        group = None if self._backlog else self._inline_group()
        if group is not None:
            stored = append_message(
                self.store.commit_log,
                msg,
                store_host,
                max_message_size,
                group,
                self._msg_id_prefix,
                self._index_enabled,
            )
            if stored is not None:
                _answer_inline(group, callback, stored)
                return
        encoded = encode_message(msg, store_host, max_message_size)
        if isinstance(encoded, PutMessageResult):
            self.store.counters["put_failures"] += 1
            callback(encoded)
        elif group is not None:
            # Nothing was awaited since `_inline_group`: the group is still open for this put.
            stored = append_put(
                self.store.commit_log, encoded, group, self._msg_id_prefix, self._index_enabled
            )
            _answer_inline(group, callback, stored)
        else:
            self._queue_nowait(encoded, callback)

    def put_batch_nowait(
        self,
        batch: MessageBatch,
        store_host: tuple[str, int],
        max_message_size: int,
        callback: Callable[[PutMessageResult], object],
    ) -> None:
        """`put_nowait` of a batch, encoded here: when nothing is queued, straight into the
        commit log where it can be (`storage.inline_batch.append_batch`)."""
        if self._status is not ActorStatus.RUNNING:
            callback(self._not_running())
            return
        group = None if self._backlog else self._inline_group()
        if group is not None:
            stored = append_batch(
                self.store.commit_log,
                batch,
                store_host,
                max_message_size,
                group,
                self._msg_id_prefix,
                self._index_enabled,
            )
            if stored is not None:
                _answer_inline(group, callback, stored)
                self._appended_inline()
                return
        encoded = encode_batch(batch, store_host, max_message_size)
        if isinstance(encoded, PutMessageResult):
            self.store.counters["put_failures"] += 1
            callback(encoded)
        elif group is not None:
            # Nothing was awaited since `_inline_group`: the group is still open for this put.
            stored = append_put(
                self.store.commit_log, encoded, group, self._msg_id_prefix, self._index_enabled
            )
            _answer_inline(group, callback, stored)
            self._appended_inline()
        else:
            self._queue_nowait(encoded, callback)

    def _queue_nowait(
        self, put: EncodedPut, callback: Callable[[PutMessageResult], object]
    ) -> None:
        """Queue ``put`` to the writer; ``callback`` gets its result (the writer's)."""
        raise NotImplementedError

    def _appended_inline(self) -> None:
        """A batch was just appended inline (the writer may start its flush now)."""

    def _not_running(self) -> PutMessageResult:
        return PutMessageResult(
            PutMessageStatus.SERVICE_NOT_AVAILABLE,
            remark=f"actor {self.name} is {self._status.value}: put not sent",
        )

    def settle(self) -> None:
        """Complete the puts appended inline so far, so that reads see them (ASYNC_FLUSH;
        with SYNC_FLUSH they become visible once flushed, as before)."""
        if self._inline is not None and not self._sync_flush:
            self._seal_for_caller()

    def _complete(self, groups: list[CommitGroup], flushed: bool) -> None:
        """Publish, dispatch, notify and answer ``groups`` as one group commit (the writer's)."""
        raise NotImplementedError

    async def _enter_inline(self) -> CommitGroup | None:
        """The inline group to append a put into, after the put's checkpoint; None when
        something is queued (the put queues behind it) or the writer stopped meanwhile."""
        if self._backlog:
            return None
        # The cancel point comes before the append: a put cancelled here stores nothing.
        # An ASYNC_FLUSH put yields here too (a put is a schedule point); a SYNC_FLUSH put
        # yields when it waits for the flush.
        if self._sync_flush:
            await trio.lowlevel.checkpoint_if_cancelled()
        else:
            await trio.lowlevel.checkpoint()
            if self._status is not ActorStatus.RUNNING:
                return None
        if self._backlog:
            return None
        return self._inline_group()

    @staticmethod
    async def _inline_answer(group: CommitGroup, stored: PutMessageResult) -> PutMessageResult:
        # SYNC_FLUSH: answered once the group commit's flush covers the record.
        if group.flushed is not None:
            await group.flushed.wait()
        return stored

    def _inline_group(self) -> CommitGroup | None:
        """The open inline group (opened, and its completion arranged, by its first put);
        None when the writer cannot be told (mailbox full: the put queues instead).

        A group holds the puts of one store time (millisecond): when the clock moved, the
        open group is sealed first, so each record's consume-queue and index entries carry
        its own store time, as with the groups the writer cuts."""
        group = self._inline
        now = self._clock()
        if group is not None:
            if group.store_timestamp == now:
                return group
            self._seal_for_caller()
        group = CommitGroup(now)
        if self._sync_flush:
            group.flushed = trio.Event()
            self._flush_wanted.set()
        elif not self._seal_sent:
            try:
                self._send.send_nowait(_SEAL_INLINE)
            except trio.WouldBlock:
                return None
            self._seal_sent = True
        self._inline = group
        return group

    def _seal_inline(self) -> None:
        """Close the open inline group: complete it (ASYNC) or queue it for the flush (SYNC).
        Runs before anything else is appended, so its queue offsets are still its own."""
        group = self._inline
        if group is None:
            return
        self._inline = None
        if not group.inline:
            return  # its one put was refused before anything was appended
        group.close(self.store.commit_log)
        if self._sync_flush:
            self._unflushed.append(group)
        else:
            self._complete([group], flushed=True)

    def _seal_for_caller(self) -> None:
        """`_seal_inline` from a put's or a read's task. A failure to complete the group
        (dispatch: a consume-queue or index file that cannot be created) is the writer's, as
        when the writer completes a group itself: it is logged, and the writer raises it at
        its next batch (the actor crashes, its supervisor restarts the store, recovery
        dispatches again); the caller's own put or read goes on."""
        try:
            self._seal_inline()
        except Exception as exc:
            log.exception("store writer: completing a group of puts failed; the writer stops")
            if self._crash is None:
                self._crash = exc
            try:
                self._send.send_nowait(_SEAL_INLINE)  # wake the writer to raise it
            except trio.WouldBlock:
                pass  # the mailbox is full: the writer runs anyway


def _answer_inline(
    group: CommitGroup, callback: Callable[[PutMessageResult], object], stored: PutMessageResult
) -> None:
    """Answer a callback put appended inline: at once with ASYNC_FLUSH (as an awaited inline
    put is, so answers keep the call order), after the flush that covers it with SYNC_FLUSH."""
    if group.flushed is None:
        callback(stored)
    else:
        group.callbacks.append((callback, stored))
