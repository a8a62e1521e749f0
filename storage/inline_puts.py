"""Puts appended in their callers' tasks: the store writer's open inline group.

A put (`StoreWriter.put`, or a callback put: `StoreWriter.put_nowait` and its message and
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

`InlinePuts` is a part the store writer (`storage.store_writer.StoreWriter`) owns and calls:
it decides whether a put may be appended inline and keeps the open group until it is sealed.
What it needs of the writer in return is the small `InlineWriter` protocol below: queue a
put, seal or flush a group, count a refused put.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

import trio

from storage._encode import encode_batch, encode_message
from storage.commit_log import CommitLog, EncodedPut
from storage.group_commit import CommitGroup, append_message, append_put
from storage.inline_batch import append_batch
from storage.results import MessageBatch, MessageExtBrokerInner, PutMessageResult
from supervisors.actor import ActorStatus

log = logging.getLogger("boltmq.broker.store")


class InlineWriter(Protocol):
    """What the inline path needs of the store writer that owns it."""

    @property
    def status(self) -> ActorStatus:
        """The writer's status: inline puts are taken while it is running."""
        ...

    def queue_nowait(self, put: EncodedPut, callback: Callable[[PutMessageResult], object]) -> None:
        """Queue ``put`` for the next group commit; ``callback`` gets its result."""
        ...

    def request_seal(self) -> bool:
        """Ask the writer to complete the open group soon (ASYNC_FLUSH); False when its
        mailbox is full."""
        ...

    def sealed(self, group: CommitGroup) -> None:
        """A closed inline group: complete it (ASYNC_FLUSH) or queue it for the flush (SYNC)."""
        ...

    def wake_group_commit(self) -> None:
        """SYNC_FLUSH: a group was opened and wants a flush."""
        ...

    def appended_batch(self) -> None:
        """A batch was just appended inline (the writer may start its flush now)."""
        ...

    def count_put_failure(self) -> None:
        """A put was refused before anything was appended (it cannot be encoded)."""
        ...


class InlinePuts:
    """The store writer's inline put path: when a put may be appended in its caller's task,
    and the open group such puts collect in until it is sealed."""

    def __init__(
        self,
        writer: InlineWriter,
        commit_log: CommitLog,
        *,
        sync_flush: bool,
        clock: Callable[[], int],
        msg_id_prefix: str,
        index_enabled: bool,
    ) -> None:
        self._writer = writer
        self._commit_log = commit_log
        self._sync_flush = sync_flush
        self._clock = clock
        #: Hex of the store host in the MsgIds (the writer renews it at each start).
        self.msg_id_prefix = msg_id_prefix
        self._index_enabled = index_enabled
        #: Puts appended in their callers' tasks and not yet completed (see the module doc).
        self.group: CommitGroup | None = None
        #: Puts and requests sent to the writer's mailbox and not yet appended (the writer
        #: counts them): while any, puts queue behind them instead of appending inline.
        self.backlog = 0
        # A SealInline is in the mailbox (ASYNC_FLUSH): it seals whatever group is open then.
        self._seal_sent = False
        # A failure to complete inline puts outside the writer's task (`_seal_for_caller`).
        self._crash: Exception | None = None

    # -- callback puts (the send path; the writer checked that it runs) --------------------

    def put_nowait(self, put: EncodedPut, callback: Callable[[PutMessageResult], object]) -> None:
        """Append ``put`` now when nothing is queued, else queue it for the next group commit;
        ``callback`` gets its result as an awaited put would: with ASYNC_FLUSH at once when
        appended now, else (and always with SYNC_FLUSH) when its group commit is answered."""
        group = None if self.backlog else self._inline_group()
        if group is not None:
            stored = append_put(
                self._commit_log, put, group, self.msg_id_prefix, self._index_enabled
            )
            _answer_inline(group, callback, stored)
            return
        self._writer.queue_nowait(put, callback)

    def put_message_nowait(
        self,
        msg: MessageExtBrokerInner,
        store_host: tuple[str, int],
        max_message_size: int,
        callback: Callable[[PutMessageResult], object],
    ) -> None:
        """`put_nowait` of one message, encoded here: when nothing is queued, straight into
        the commit log where it can be (`storage.group_commit.append_message`)."""
        group = None if self.backlog else self._inline_group()
        if group is not None:
            stored = append_message(
                self._commit_log,
                msg,
                store_host,
                max_message_size,
                group,
                self.msg_id_prefix,
                self._index_enabled,
            )
            if stored is not None:
                _answer_inline(group, callback, stored)
                return
        encoded = encode_message(msg, store_host, max_message_size)
        if isinstance(encoded, PutMessageResult):
            self._writer.count_put_failure()
            callback(encoded)
        elif group is not None:
            # Nothing was awaited since `_inline_group`: the group is still open for this put.
            stored = append_put(
                self._commit_log, encoded, group, self.msg_id_prefix, self._index_enabled
            )
            _answer_inline(group, callback, stored)
        else:
            self._writer.queue_nowait(encoded, callback)

    def put_batch_nowait(
        self,
        batch: MessageBatch,
        store_host: tuple[str, int],
        max_message_size: int,
        callback: Callable[[PutMessageResult], object],
    ) -> None:
        """`put_nowait` of a batch, encoded here: when nothing is queued, straight into the
        commit log where it can be (`storage.inline_batch.append_batch`)."""
        group = None if self.backlog else self._inline_group()
        if group is not None:
            stored = append_batch(
                self._commit_log,
                batch,
                store_host,
                max_message_size,
                group,
                self.msg_id_prefix,
                self._index_enabled,
            )
            if stored is not None:
                _answer_inline(group, callback, stored)
                self._writer.appended_batch()
                return
        encoded = encode_batch(batch, store_host, max_message_size)
        if isinstance(encoded, PutMessageResult):
            self._writer.count_put_failure()
            callback(encoded)
        elif group is not None:
            # Nothing was awaited since `_inline_group`: the group is still open for this put.
            stored = append_put(
                self._commit_log, encoded, group, self.msg_id_prefix, self._index_enabled
            )
            _answer_inline(group, callback, stored)
            self._writer.appended_batch()
        else:
            self._writer.queue_nowait(encoded, callback)

    # -- awaited puts (`StoreWriter.put` and `put_message`) -------------------------------

    async def enter(self) -> CommitGroup | None:
        """The inline group to append a put into, after the put's checkpoint; None when
        something is queued (the put queues behind it) or the writer stopped meanwhile."""
        if self.backlog:
            return None
        # The cancel point comes before the append: a put cancelled here stores nothing.
        # An ASYNC_FLUSH put yields here too (a put is a schedule point); a SYNC_FLUSH put
        # yields when it waits for the flush.
        if self._sync_flush:
            await trio.lowlevel.checkpoint_if_cancelled()
        else:
            await trio.lowlevel.checkpoint()
            if self._writer.status is not ActorStatus.RUNNING:
                return None
        if self.backlog:
            return None
        return self._inline_group()

    @staticmethod
    async def answer(group: CommitGroup, stored: PutMessageResult) -> PutMessageResult:
        """An awaited inline put's answer: at once, or (SYNC_FLUSH) once the group commit's
        flush covers the record."""
        if group.flushed is not None:
            await group.flushed.wait()
        return stored

    # -- sealing --------------------------------------------------------------------------

    def settle(self) -> None:
        """Complete the puts appended inline so far, so that reads see them (ASYNC_FLUSH;
        with SYNC_FLUSH they become visible once flushed, as before)."""
        if self.group is not None and not self._sync_flush:
            self._seal_for_caller()

    def seal(self) -> None:
        """Close the open inline group: complete it (ASYNC) or queue it for the flush (SYNC).
        Runs before anything else is appended, so its queue offsets are still its own."""
        group = self.group
        if group is None:
            return
        self.group = None
        if not group.inline:
            return  # its one put was refused before anything was appended
        group.close(self._commit_log)
        self._writer.sealed(group)

    def seal_received(self) -> None:
        """The writer took the `SealInline` this path sent: the next group sends another."""
        self._seal_sent = False

    def take_crash(self) -> Exception | None:
        """The failure of completing a group in a caller's task, once (the writer raises it)."""
        crash, self._crash = self._crash, None
        return crash

    def _inline_group(self) -> CommitGroup | None:
        """The open inline group (opened, and its completion arranged, by its first put);
        None when the writer cannot be told (mailbox full: the put queues instead).

        A group holds the puts of one store time (millisecond): when the clock moved, the
        open group is sealed first, so each record's consume-queue and index entries carry
        its own store time, as with the groups the writer cuts."""
        group = self.group
        now = self._clock()
        if group is not None:
            if group.store_timestamp == now:
                return group
            self._seal_for_caller()
        group = CommitGroup(now)
        if self._sync_flush:
            group.flushed = trio.Event()
            self._writer.wake_group_commit()
        elif not self._seal_sent:
            if not self._writer.request_seal():
                return None
            self._seal_sent = True
        self.group = group
        return group

    def _seal_for_caller(self) -> None:
        """`seal` from a put's or a read's task. A failure to complete the group (dispatch:
        a consume-queue or index file that cannot be created) is the writer's, as when the
        writer completes a group itself: it is logged, and the writer raises it at its next
        batch (the actor crashes, its supervisor restarts the store, recovery dispatches
        again); the caller's own put or read goes on."""
        try:
            self.seal()
        except Exception as exc:
            log.exception("store writer: completing a group of puts failed; the writer stops")
            if self._crash is None:
                self._crash = exc
            # Wake the writer to raise it (when its mailbox is full, the writer runs anyway).
            self._writer.request_seal()


def _answer_inline(
    group: CommitGroup, callback: Callable[[PutMessageResult], object], stored: PutMessageResult
) -> None:
    """Answer a callback put appended inline: at once with ASYNC_FLUSH (as an awaited inline
    put is, so answers keep the call order), after the flush that covers it with SYNC_FLUSH."""
    if group.flushed is None:
        callback(stored)
    else:
        group.callbacks.append((callback, stored))
