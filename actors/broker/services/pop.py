"""Pop consumption (RocketMQ 5's pop, its PopMessageProcessor, AckMessageProcessor,
ChangeInvisibleTimeProcessor and PopReviveService in one actor).

A pop hands out messages of a (group, topic, queue) from the group's pop offset and makes them
invisible for a while: it stores a *checkpoint* (the queue, the first offset, the pop time, the
invisible time and the offsets handed out) as a message in the cluster's revive topic
``rmq_sys_REVIVE_LOG_<cluster>`` and only then moves the pop offset (a consumer offset of the
group) and answers. An ack, a batch ack and a change of invisible time store an *ack* there
too (the change also stores a new checkpoint of the one message first). Every checkpoint and
ack is therefore in the commit log: flushed per flushDiskType, replicated to a slave as every
other message, and read back after a restart.

Revive: once a checkpoint's invisible time has ended, each of its offsets not acked is stored
again in the pop retry topic ``%RETRY%<group>_<topic>`` with its reconsume times one higher,
or, once it has been handed out retryMaxTimes + 1 times, in ``%DLQ%<group>``; then an ack of
that offset is stored, so a restart does not revive it again. A crash between the two revives
it twice (a duplicate, never a loss). This differs from RocketMQ in one way, said here once:
RocketMQ delays each checkpoint through its timer until the revive time and lets a revive
service consume the revive topic; here the actor reads each checkpoint as it stores it, keeps
the in-flight ones in memory and watches their revive times itself, and on start reads the
revive topic back from the revive offset (the offset of ``CID_RMQ_SYS_REVIVE_GROUP`` on it:
the first checkpoint not yet settled). Pop offsets are taken as the higher of the group's
consumer offset and the end of every checkpoint read back, so a crash before the offsets
table was written does not hand out a popped message again while it is in flight.

A pop reads the pop retry topic first with probability `POP_FROM_RETRY_PERCENT` % and the
topic first otherwise, and fills what is left from the other (RocketMQ's rule). Receipt
handles are RocketMQ's extra info (`extra_info`), put in each message's ``POP_CK`` property.

Only a master pops and revives: a slave has the revive log (replicated) and would start
reviving from it once it is started as a master. On a SYNC_MASTER every put of the service
goes through `HighAvailability.put_message` and is answered once a slave has it, as a send.

A FIFO queue's delivery counts are stored (an ``oc`` record) each time a FIFO pop's invisible
time ends, and the revive offset stays at or before the latest record of a queue that still
has counts, so a restart continues them.

Operators' figures: per (group, topic) counters of messages popped, acked, revived and
dead-lettered (`group_stats`, with the messages in flight read off the checkpoints).
"""

from __future__ import annotations

import heapq
import json
import logging
import random
from collections.abc import Callable, Set
from typing import Any

import attrs
import trio

from actors.broker.config import BrokerConfig
from actors.broker.ha import HighAvailability
from actors.broker.services.pop_state import (
    ACK_TAG,
    CK_TAG,
    FIRST_POP_TIME,
    INIT_MODE_MAX,
    ORDER_COUNT_TAG,
    ORDER_REVIVE_QUEUE_ID,
    POP_CK,
    POP_FROM_RETRY_PERCENT,
    REVIVE_BATCH,
    REVIVE_INTERVAL,
    REVIVE_QUEUE_ID,
    Checkpoint,
    CheckpointKey,
    PopGroupCounters,
    PopGroupStats,
    PopRefused,
    ReceiptHandle,
    collect_group_stats,
    extra_info,
    retry_flag,
    with_handle,
)
from actors.broker.tables.groups import SubscriptionGroupManager
from actors.broker.tables.offsets import CommitOffset, ConsumerOffsetManager
from actors.broker.tables.topics import (
    PERM_RW,
    CreateSystemTopic,
    CreateTopicInSendBack,
    TopicManager,
    now_ms,
)
from protocol.codes import ResponseCode
from protocol.message import (
    MessageConst,
    MessageExt,
    MessageFormatError,
    decode_record,
    iter_records,
)
from protocol.names import (
    RETRY_GROUP_TOPIC_PREFIX,
    REVIVE_GROUP,
    dlq_topic,
    pop_retry_topic,
    revive_topic,
)
from storage import (
    GetMessageStatus,
    MessageExtBrokerInner,
    MessageStore,
    PutMessageResult,
    PutMessageStatus,
)
from supervisors.actor import Actor, ActorError, ActorStatistics, Request

log = logging.getLogger("boltmq.broker.pop")


# -- commands -----------------------------------------------------------------------------------


@attrs.frozen
class PopAnswer:
    """What a pop hands out: re-encoded records (with POP_CK) and the answer's header fields."""

    records: list[bytes]
    pop_time: int
    invisible_time: int
    rest_num: int
    start_offset_info: str
    msg_offset_info: str
    revive_qid: int = REVIVE_QUEUE_ID


@attrs.frozen
class Pop(Request[PopAnswer]):
    """POP_MESSAGE, checked by the handler."""

    group: str
    topic: str
    queue_id: int  # -1: every readable queue
    read_queue_nums: int
    max_msg_nums: int
    invisible_time: int
    init_mode: int
    tag_codes: Set[int] | None = None
    record_filter: Callable[[memoryview], bool] | None = None
    order: bool = False
    attempt_id: str = ""


@attrs.frozen
class Ack(Request[PutMessageStatus]):
    """ACK_MESSAGE, or one offset of a BATCH_ACK_MESSAGE; answers its put's status: PUT_OK,
    or (acked all the same) FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE on a SYNC_MASTER whose
    slave did not confirm it, FLUSH_DISK_TIMEOUT under SYNC_FLUSH."""

    group: str
    topic: str
    handle: ReceiptHandle
    offset: int


@attrs.frozen
class ChangeInvisibleTime(Request[tuple[int, int]]):
    """CHANGE_MESSAGE_INVISIBLETIME: answers the new (pop time, invisible time)."""

    group: str
    topic: str
    handle: ReceiptHandle
    offset: int
    invisible_time: int


@attrs.frozen
class Revive:
    """Bring back what is due (a cast, from the revive ticker)."""


PopCommand = Pop | Ack | ChangeInvisibleTime | Revive


@attrs.frozen(kw_only=True)
class PopStatistics(ActorStatistics):
    """The pop service's counters."""

    in_flight_checkpoints: int
    popped: int
    acked: int
    revived: int
    dead_lettered: int


class PopService(Actor[PopCommand]):
    """Owns the in-flight checkpoints and the pop offsets; see the module docstring.

    A restart rebuilds both from the revive topic and the offsets table (`on_start`), so it
    loses nothing but the mailbox: a pop, ack or change queued then fails (ActorCrashed) and
    the client asks again.
    """

    quiet_drops = (Revive,)  # a revive pass lost at a stop is asked for again at the start

    def __init__(
        self,
        config: BrokerConfig,
        *,
        store: MessageStore,
        topics: TopicManager,
        offsets: ConsumerOffsetManager,
        groups: SubscriptionGroupManager,
        ha: HighAvailability | None = None,
    ) -> None:
        super().__init__("pop")
        self.config = config
        self.store = store
        #: Puts go through it, so on a SYNC_MASTER they wait for a slave as sends do.
        self.ha = ha
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.revive_topic = revive_topic(config.broker_cluster_name)
        self.checkpoints: dict[CheckpointKey, Checkpoint] = {}
        self.pop_offsets: dict[tuple[str, str, int], int] = {}
        #: A FIFO queue's last pop: (group, topic, queue id) -> its checkpoint's key.
        self.order_locks: dict[tuple[str, str, int], CheckpointKey] = {}
        #: FIFO deliveries so far of a message (its queue and offset); kept in the revive
        #: log (an ``oc`` record after each expiry), so a restart continues the count.
        self.order_deliveries: dict[tuple[str, str, int, int], int] = {}
        #: A FIFO queue with counts -> the revive-log offset of its latest ``oc`` record,
        #: which the revive offset stays at or before, so a restart reads it.
        self.order_count_offsets: dict[tuple[str, str, int], int] = {}
        self._due: list[tuple[int, CheckpointKey]] = []
        #: Set once something is due at all: an idle broker's ticker then sleeps on it
        #: instead of waking ten times a second for nothing.
        self._something_due = trio.Event()
        self._revive_asked = False
        self.popped = self.acked = self.revived = self.dead_lettered = 0
        #: (group, topic) -> its counters; a few int adds per pop, ack and revive.
        self.group_counters: dict[tuple[str, str], PopGroupCounters] = {}

    # -- life ---------------------------------------------------------------------------------

    async def on_start(self) -> None:
        """Rebuild the in-flight checkpoints and pop offsets from the revive topic."""
        self.checkpoints.clear()
        self.pop_offsets.clear()
        self.order_locks.clear()
        self.order_deliveries.clear()
        self.order_count_offsets.clear()
        self._due.clear()
        self._revive_asked = False  # a crash dropped the queued pass
        if self.config.is_slave:
            return
        if self.topics.select(self.revive_topic) is None:
            await self.topics.call(CreateSystemTopic(self.revive_topic, 1, PERM_RW))
        await self._read_revive_log()

    async def run_revive_ticks(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Ask the actor every `REVIVE_INTERVAL` s to bring back what is due (a master only)."""
        task_status.started()
        if self.config.is_slave:
            await trio.sleep_forever()
        while True:
            if not self._due:
                await self._something_due.wait()
                self._something_due = trio.Event()
            await trio.sleep(REVIVE_INTERVAL)
            if self._due and self._due[0][0] <= now_ms() and not self._revive_asked:
                try:
                    self.cast_nowait(Revive())
                    self._revive_asked = True  # one pass queued at a time
                except ActorError:
                    pass  # busy or restarting: the next tick asks again

    async def handle(self, command: PopCommand) -> Any:
        """One pop, ack, change or revive pass."""
        match command:
            case Pop():
                return await self._pop(command)
            case Ack():
                return await self._ack(command)
            case ChangeInvisibleTime():
                return await self._change(command)
            case Revive():
                self._revive_asked = False
                await self._revive(now_ms())
        return None

    def statistics(self) -> PopStatistics:
        """Counters at one moment."""
        return PopStatistics(
            **self._statistics_fields(),
            in_flight_checkpoints=len(self.checkpoints),
            popped=self.popped,
            acked=self.acked,
            revived=self.revived,
            dead_lettered=self.dead_lettered,
        )

    def group_stats(self, group: str | None = None) -> list[PopGroupStats]:
        """Each (group, topic) that popped here (only ``group``'s when given), with its
        messages in flight; read inline by GET_CONSUME_STATS and the metrics scrape."""
        return collect_group_stats(self.checkpoints.values(), self.group_counters, group)

    def _counters(self, group: str, topic: str) -> PopGroupCounters:
        counters = self.group_counters.get((group, topic))
        if counters is None:
            counters = self.group_counters[(group, topic)] = PopGroupCounters()
        return counters

    def has_message(
        self, group: str, topic: str, queue_id: int, read_queue_nums: int, order: bool = False
    ) -> bool:
        """Whether a pop of the group's topic (queue -1: any) would find a message now
        (NOTIFICATION); messages a filter would leave out count as found. A FIFO pop
        (``order``) finds nothing in a queue held by its last pop, nor in the retry topic."""
        queues = range(read_queue_nums) if queue_id < 0 else (queue_id,)
        sources = [(topic, q) for q in queues]
        if order:
            now = now_ms()
            sources = [(t, q) for t, q in sources if not self._order_held_now(group, t, q, now)]
        else:
            retry = pop_retry_topic(group, topic)
            sources += [(retry, q) for q in range(self._retry_queues(retry))]
        for source, q in sources:
            offset = self.pop_offsets.get((group, source, q))
            if offset is None:
                offset = self.offsets.query_offset(group, source, q)
            if offset < 0:
                offset = self.store.get_min_offset_in_queue(source, q)
            if self.store.get_max_offset_in_queue(source, q) > offset:
                return True
        return False

    # -- pop ----------------------------------------------------------------------------------

    async def _pop(self, pop: Pop) -> PopAnswer:
        pop_time = now_ms()
        retry = pop_retry_topic(pop.group, pop.topic)
        queues = list(range(pop.read_queue_nums)) if pop.queue_id < 0 else [pop.queue_id]
        first = random.randrange(len(queues)) if queues else 0  # a topic may read none
        sources = [(pop.topic, q) for q in queues[first:] + queues[:first]]
        # A FIFO message comes back in its own queue, never through the retry topic.
        retry_queues = 0 if pop.order else self._retry_queues(retry)
        if retry_queues:
            # The retry topic takes every message back unfiltered: its tags are the topic's.
            retry_sources = [(retry, q) for q in range(retry_queues)]
            if random.randrange(100) < POP_FROM_RETRY_PERCENT:
                sources = retry_sources + sources
            else:
                sources += retry_sources
        records: list[bytes] = []
        start_info: list[str] = []
        msg_info: list[str] = []
        rest = 0
        for topic, queue_id in sources:
            wanted = pop.max_msg_nums - len(records)
            if wanted <= 0:
                rest += max(0, self.store.get_max_offset_in_queue(topic, queue_id)
                            - self._pop_offset(pop, topic, queue_id))  # fmt: skip
                continue
            ck, out, left = await self._pop_queue(pop, topic, queue_id, wanted, pop_time)
            rest += left
            if ck is None:
                continue
            records += out
            flag = retry_flag(topic)
            start_info.append(f"{flag} {queue_id} {ck.start_offset}")
            msg_info.append(f"{flag} {queue_id} " + ",".join(str(o) for o in ck.offsets))
        return PopAnswer(
            records, pop_time, pop.invisible_time, rest, ";".join(start_info), ";".join(msg_info),
            ORDER_REVIVE_QUEUE_ID if pop.order else REVIVE_QUEUE_ID,
        )  # fmt: skip

    def _retry_queues(self, retry: str) -> int:
        """The pop retry topic's queues; its messages are read even when a crash lost its
        config (created in a batch of the topics table), which is made again then."""
        retry_config = self.topics.select(retry)
        if retry_config is not None:
            return retry_config.read_queue_nums
        if self.store.get_max_offset_in_queue(retry, 0) <= 0:
            return 0
        self.topics.create_topic_in_send_back_nowait(retry, 1)
        return 1

    def _pop_offset(self, pop: Pop, topic: str, queue_id: int) -> int:
        key = (pop.group, topic, queue_id)
        offset = self.pop_offsets.get(key)
        if offset is not None:
            return offset
        offset = self.offsets.query_offset(pop.group, topic, queue_id)
        if offset < 0:
            store = self.store
            if pop.init_mode == INIT_MODE_MAX and not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                offset = store.get_max_offset_in_queue(topic, queue_id)
            else:
                offset = store.get_min_offset_in_queue(topic, queue_id)
        self.pop_offsets[key] = offset
        return offset

    def _set_pop_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.pop_offsets[(group, topic, queue_id)] = offset
        try:
            self.offsets.cast_nowait(CommitOffset(group, topic, queue_id, offset))
        except ActorError as exc:  # the checkpoints still hold it (see the module docstring)
            log.warning("pop offset %s@%s:%d=%d not recorded now: %s",
                        group, topic, queue_id, offset, exc)  # fmt: skip

    async def _pop_queue(
        self, pop: Pop, topic: str, queue_id: int, wanted: int, pop_time: int
    ) -> tuple[Checkpoint | None, list[bytes], int]:
        """(checkpoint, records, messages left) of one queue's share of a pop."""
        store = self.store
        if pop.order:
            held = self._order_held(pop, topic, queue_id, pop_time)
            if held is not None:
                return held
        offset = self._pop_offset(pop, topic, queue_id)
        is_retry = topic != pop.topic
        result = store.get_message(
            pop.group, topic, queue_id, offset, wanted,
            None if is_retry else pop.tag_codes,
            record_filter=None if is_retry else pop.record_filter,
        )  # fmt: skip
        try:
            if result.status is not GetMessageStatus.FOUND:
                moved = result.next_begin_offset
                if moved != offset and moved >= 0:  # passed filtered-out messages or a gap
                    self._set_pop_offset(pop.group, topic, queue_id, moved)
                return None, [], max(0, result.max_offset - max(moved, offset))
            messages = [decode_record(buffer) for buffer in result.buffers]
        finally:
            result.release()
        ck = Checkpoint(
            pop.group, pop.topic, topic, queue_id, offset, pop_time, pop.invisible_time,
            {m.queue_offset: m.commit_log_offset for m in messages}, result.next_begin_offset,
            order=pop.order, attempt_id=pop.attempt_id,
        )  # fmt: skip
        if not await self._store_checkpoint(ck):
            return None, [], max(0, result.max_offset - offset)
        if pop.order:  # its offset moves as its messages are acked
            self.order_locks[ck.queue] = ck.key
        else:
            self._set_pop_offset(pop.group, topic, queue_id, result.next_begin_offset)
        self.popped += len(messages)
        self._counters(pop.group, pop.topic).ck_nums += len(messages)
        broker = self.config.broker_name
        records = [
            with_handle(m, pop.topic, extra_info(ck, broker, m.queue_offset), pop_time,
                         self._deliveries(ck, m.queue_offset) if pop.order else None)
            for m in messages
        ]  # fmt: skip
        return ck, records, max(0, result.max_offset - result.next_begin_offset)

    def _order_held(
        self, pop: Pop, topic: str, queue_id: int, now: int
    ) -> tuple[Checkpoint | None, list[bytes], int] | None:
        """A FIFO queue whose last pop is still in flight: nothing, or (same attemptId) the
        same messages again under the same handles; None when the queue is free."""
        key = self.order_locks.get((pop.group, topic, queue_id))
        ck = self.checkpoints.get(key) if key is not None else None
        if ck is None or ck.settled or ck.revive_time <= now:
            return None
        if not (pop.attempt_id and pop.attempt_id == ck.attempt_id):
            return None, [], 0
        records = []
        for offset, physical in ck.offsets.items():
            record = None if offset in ck.acked else self.store.look_message_by_offset(physical)
            if record is not None:
                message = decode_record(record)
                handle = extra_info(ck, self.config.broker_name, offset)
                records.append(with_handle(message, pop.topic, handle, ck.pop_time,
                                            self._deliveries(ck, offset)))  # fmt: skip
        return ck, records, 0

    def _order_held_now(self, group: str, topic: str, queue_id: int, now: int) -> bool:
        """Whether a FIFO queue's last pop is still in flight (not all acked, not due)."""
        key = self.order_locks.get((group, topic, queue_id))
        ck = self.checkpoints.get(key) if key is not None else None
        return ck is not None and not ck.settled and ck.revive_time > now

    def _deliveries(self, ck: Checkpoint, offset: int) -> int:
        # The reconsume times a FIFO message is shown with: its deliveries before this one.
        return self.order_deliveries.get((*ck.queue, offset), 0)

    # -- ack and change -----------------------------------------------------------------------

    def _in_flight(self, group: str, topic: str, handle: ReceiptHandle, offset: int) -> Checkpoint:
        real = handle.real_topic(group, topic)
        key = (group, real, handle.queue_id, handle.start_offset, handle.pop_time)
        ck = self.checkpoints.get(key)
        if ck is None or offset not in ck.offsets or offset in ck.acked:
            # A change's checkpoint starts at the message; a front that kept the first
            # field of the old handle (RocketMQ's proxy in local mode does) still names it.
            ck = self.checkpoints.get((group, real, handle.queue_id, offset, handle.pop_time))
        if ck is None or offset not in ck.offsets or offset in ck.acked:
            raise PopRefused(
                ResponseCode.NO_MESSAGE,
                f"no message in flight at {real}:{handle.queue_id}@{offset} for group {group} "
                "under this receipt handle: it was acked already, its invisible time was "
                "changed (use the new handle), or it came back after its invisible time",
            )
        return ck

    async def _ack(self, ack: Ack) -> PutMessageStatus:
        ck = self._in_flight(ack.group, ack.topic, ack.handle, ack.offset)
        status = await self._store_acks(ck, [ack.offset])
        self.acked += 1
        self._counters(ck.group, ck.origin_topic).ack_nums += 1
        if ck.order:
            self.order_deliveries.pop((*ck.queue, ack.offset), None)
            self._set_pop_offset(ck.group, ck.topic, ck.queue_id, ck.order_point)
            if ck.queue in self.order_count_offsets and not self._order_counts(ck.queue):
                del self.order_count_offsets[ck.queue]  # no count left to keep
                self._commit_revive_offset()
        return status

    async def _change(self, change: ChangeInvisibleTime) -> tuple[int, int]:
        old = self._in_flight(change.group, change.topic, change.handle, change.offset)
        if old.order:
            return await self._extend_order(old, change.invisible_time)
        pop_time = max(now_ms(), old.pop_time + 1)  # the new handle is never the old one
        while (change.group, old.topic, old.queue_id, change.offset, pop_time) in self.checkpoints:
            pop_time += 1  # one handle per checkpoint, even for two changes in a millisecond
        new = Checkpoint(
            old.group, old.origin_topic, old.topic, old.queue_id, change.offset, pop_time,
            change.invisible_time, {change.offset: old.offsets[change.offset]},
        )  # fmt: skip
        # The new checkpoint first: a crash between the two revives the message twice at
        # worst, never not at all.
        if not await self._store_checkpoint(new):
            raise PopRefused(ResponseCode.SYSTEM_ERROR, "the new checkpoint was not stored")
        await self._store_acks(old, [change.offset])
        return pop_time, change.invisible_time

    async def _extend_order(self, ck: Checkpoint, invisible_time: int) -> tuple[int, int]:
        """A FIFO pop's change: its queue stays held until ``invisible_time`` ms from now; the
        handles keep their pop time (the answer's), as the queue has one pop in flight."""
        extended = attrs.evolve(ck, invisible_time=now_ms() + invisible_time - ck.pop_time)
        extended.acked = ck.acked
        if not await self._store_checkpoint(extended):
            raise PopRefused(ResponseCode.SYSTEM_ERROR, "the checkpoint was not stored")
        extended.revive_offset = ck.revive_offset  # a restart reads from the first record
        return extended.pop_time, extended.invisible_time

    # -- revive -------------------------------------------------------------------------------

    async def _revive(self, now: int) -> None:
        # A bounded share per pass: pops and acks queued behind it wait for one share at
        # most, and the ticker asks again for the rest.
        budget = REVIVE_BATCH
        while self._due and self._due[0][0] <= now and budget > 0:
            budget -= 1
            _, key = heapq.heappop(self._due)
            ck = self.checkpoints.get(key)
            if ck is None or ck.revive_time > now:  # settled, or its time was extended
                continue
            waiting = [offset for offset in ck.offsets if offset not in ck.acked]
            if ck.order:
                await self._release_order(ck, waiting)
                continue
            for offset in waiting:
                if not await self._revive_one(ck, ck.offsets[offset]):
                    # Kept in flight (and the rest of the pass waits): tried again later.
                    heapq.heappush(self._due, (now + 1000, ck.key))
                    return
                try:
                    await self._store_acks(ck, [offset])
                except PopRefused as exc:  # revived again after a restart: a duplicate
                    log.warning("pop revive of %s:%d@%d not marked: %s",
                                ck.topic, ck.queue_id, offset, exc)  # fmt: skip

    async def _release_order(self, ck: Checkpoint, waiting: list[int]) -> None:
        """A FIFO pop's invisible time ended: its messages come back in their queue (the
        next pop hands them out from the first not acked); a head message handed out
        retryMaxTimes + 1 times goes to the DLQ instead, and the queue moves past it."""
        for offset in waiting:
            self.order_deliveries[(*ck.queue, offset)] = self._deliveries(ck, offset) + 1
        counters = self._counters(ck.group, ck.origin_topic)
        counters.revive_nums += len(waiting)  # back in their queue (less those dead-lettered)
        max_times = self._max_times(ck.group)
        for offset in sorted(waiting):
            # The head was handed out at least as often as any message after it.
            if self._deliveries(ck, offset) <= max_times:
                break
            if not await self._revive_one(ck, ck.offsets[offset], dead_letter=True):
                break  # the queue stays at it; the next expiry tries again
            try:
                await self._store_acks(ck, [offset])
            except PopRefused as exc:
                log.warning("FIFO dead letter %s:%d@%d not marked: %s",
                            ck.topic, ck.queue_id, offset, exc)  # fmt: skip
                break
            self.order_deliveries.pop((*ck.queue, offset), None)
            counters.revive_nums -= 1
        self._set_pop_offset(ck.group, ck.topic, ck.queue_id, ck.order_point)
        await self._store_order_counts(ck.queue)
        if self.checkpoints.pop(ck.key, None) is not None:
            self._commit_revive_offset()

    def _order_counts(self, queue: tuple[str, str, int]) -> dict[int, int]:
        """A FIFO queue's delivery counts: queue offset -> deliveries so far."""
        return {key[3]: n for key, n in self.order_deliveries.items() if key[:3] == queue}

    async def _store_order_counts(self, queue: tuple[str, str, int]) -> None:
        counts = self._order_counts(queue)
        if not counts:
            self.order_count_offsets.pop(queue, None)
            return
        body = json.dumps(
            {"c": queue[0], "t": queue[1], "q": queue[2], "d": sorted(counts.items())},
            separators=(",", ":"),
        ).encode()
        result = await self._put(self._revive_message(ORDER_COUNT_TAG, body))
        if not result.ok:  # kept in memory; a restart before the next expiry counts from less
            log.warning("FIFO delivery counts of %s:%d not stored: %s", queue[1], queue[2],
                        result.remark or result.status)  # fmt: skip
            return
        self.order_count_offsets[queue] = result.queue_offset

    async def _revive_one(
        self, ck: Checkpoint, commit_log_offset: int, *, dead_letter: bool = False
    ) -> bool:
        record = self.store.look_message_by_offset(commit_log_offset)
        try:
            message = decode_record(record) if record is not None else None
        except MessageFormatError:
            message = None
        if message is None:
            log.warning("pop revive: no message at commit-log offset %d (%s:%d); removed by "
                        "retention?", commit_log_offset, ck.topic, ck.queue_id)  # fmt: skip
            return True
        properties = dict(message.properties)
        properties.pop(POP_CK, None)
        properties.setdefault(MessageConst.RETRY_TOPIC, ck.origin_topic)
        properties.setdefault(MessageConst.ORIGIN_MESSAGE_ID, message.offset_msg_id)
        properties.setdefault(FIRST_POP_TIME, str(ck.pop_time))
        dead = dead_letter or message.reconsume_times >= self._max_times(ck.group)
        if dead:
            topic, queues = dlq_topic(ck.group), 1
            self.dead_lettered += 1
        else:
            topic, queues = pop_retry_topic(ck.group, ck.origin_topic), 1
        if self.topics.select(topic) is None:
            await self.topics.call(CreateTopicInSendBack(topic, queues, PERM_RW))
        # A FIFO message's deliveries are counted by the service, not in its record.
        times = message.reconsume_times
        if ck.order:  # shown with its deliveries before the last
            times = self._deliveries(ck, message.queue_offset) - 1
        msg = MessageExtBrokerInner.from_stored(
            message, topic=topic, queue_id=0, properties=properties,
            reconsume_times=times + 1, prepared_transaction_offset=0,
        )  # fmt: skip
        result = await self._put(msg)
        if not result.ok:
            log.warning("pop revive into %s failed: %s", topic, result.remark or result.status)
            return False
        self.revived += 1
        counters = self._counters(ck.group, ck.origin_topic)
        if dead:
            counters.dlq_put_nums += 1
        elif not ck.order:  # a FIFO release counted its messages already
            counters.revive_nums += 1
        return True

    def _max_times(self, group: str) -> int:
        # retryMaxTimes + 1 deliveries in all; a group since deleted keeps RocketMQ's default.
        group_config = self.groups.find_subscription_group_config(group)
        return 16 if group_config is None else group_config.retry_max_times

    # -- the revive log -----------------------------------------------------------------------

    async def _put(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        """Store ``msg``; on a SYNC_MASTER, answered once a slave has it (or with
        FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE: stored on the master all the same), as a
        send is answered."""
        ha = self.ha
        if ha is None or ha.service is None or not ha.service.sync_master:
            return await self.store.put_message(msg)
        answered: list[PutMessageResult] = []
        done = trio.Event()

        def callback(result: PutMessageResult) -> None:
            answered.append(result)
            done.set()

        ha.put_message(msg, callback)
        # Shielded: a put handed over is in the log whatever happens, so its answer must be
        # applied. The HA service answers within slaveTimeout; the deadline is a backstop.
        with (
            trio.CancelScope(shield=True),
            trio.move_on_after(2 * self.config.slave_timeout / 1000 + 5),
        ):
            await done.wait()
        if not answered:
            raise PopRefused(
                ResponseCode.SYSTEM_ERROR,
                "the pop service's put got no answer from replication; try again",
            )
        return answered[0]

    async def _store_checkpoint(self, ck: Checkpoint) -> bool:
        result = await self._put(self._revive_message(CK_TAG, ck.to_json()))
        # Stored on the master but not confirmed by a slave: handed out all the same, as
        # the checkpoint is in the log (a pop answer has no way to say "not replicated").
        if not result.ok:
            log.warning("pop checkpoint of %s:%d not stored: %s", ck.topic, ck.queue_id,
                        result.remark or result.status)  # fmt: skip
            return False
        ck.revive_offset = result.queue_offset
        self._add(ck)
        return True

    async def _store_acks(self, ck: Checkpoint, offsets: list[int]) -> PutMessageStatus:
        body = json.dumps(
            {"c": ck.group, "t": ck.topic, "q": ck.queue_id, "so": ck.start_offset,
             "pt": ck.pop_time, "o": offsets},
            separators=(",", ":"),
        ).encode()  # fmt: skip
        result = await self._put(self._revive_message(ACK_TAG, body))
        if not result.ok:
            raise PopRefused(
                ResponseCode.SYSTEM_ERROR,
                f"the ack was not stored ({result.remark or result.status}); ack again",
            )
        self._apply_acks(ck, offsets)
        return result.status

    def _revive_message(self, tag: str, body: bytes) -> MessageExtBrokerInner:
        return MessageExtBrokerInner(
            topic=self.revive_topic, body=body, queue_id=REVIVE_QUEUE_ID,
            properties={MessageConst.TAGS: tag}, born_timestamp=now_ms(),
        )  # fmt: skip

    def _add(self, ck: Checkpoint) -> None:
        self.checkpoints[ck.key] = ck
        heapq.heappush(self._due, (ck.revive_time, ck.key))
        self._something_due.set()

    def _apply_acks(self, ck: Checkpoint, offsets: list[int]) -> None:
        ck.acked.update(o for o in offsets if o in ck.offsets)
        if ck.settled:
            self.checkpoints.pop(ck.key, None)
            self._commit_revive_offset()

    def _commit_revive_offset(self) -> None:
        # The first checkpoint still in flight (or FIFO counts still needed): a restart
        # reads the revive log from there.
        held = [ck.revive_offset for ck in self.checkpoints.values()]
        held += self.order_count_offsets.values()
        if held:
            settled_to = min(held)
        else:
            settled_to = self.store.get_max_offset_in_queue(self.revive_topic, REVIVE_QUEUE_ID)
        try:
            self.offsets.cast_nowait(
                CommitOffset(REVIVE_GROUP, self.revive_topic, REVIVE_QUEUE_ID, settled_to)
            )
        except ActorError:
            pass  # read from an earlier point next start: more reading, nothing lost

    async def _read_revive_log(self) -> None:
        store, topic = self.store, self.revive_topic
        offset = max(
            self.offsets.query_offset(REVIVE_GROUP, topic, REVIVE_QUEUE_ID),
            store.get_min_offset_in_queue(topic, REVIVE_QUEUE_ID),
        )
        end = store.get_max_offset_in_queue(topic, REVIVE_QUEUE_ID)
        read = 0
        while offset < end:
            result = store.get_message(REVIVE_GROUP, topic, REVIVE_QUEUE_ID, offset, 32)
            try:
                if result.status is not GetMessageStatus.FOUND:
                    if result.next_begin_offset <= offset:
                        break
                    offset = result.next_begin_offset
                    continue
                for message in iter_records(b"".join(result.buffers)):
                    self._replay(message)
                    read += 1
                offset = result.next_begin_offset
            finally:
                result.release()
            await trio.lowlevel.checkpoint()
        for ck in list(self.checkpoints.values()):
            if ck.settled:
                del self.checkpoints[ck.key]
        for queue in list(self.order_count_offsets):
            if not self._order_counts(queue):
                del self.order_count_offsets[queue]
        for ck in self.checkpoints.values():
            heapq.heappush(self._due, (ck.revive_time, ck.key))
        if self._due:
            self._something_due.set()
        if read:
            log.info("pop: %d revive-log messages read, %d checkpoints in flight",
                     read, len(self.checkpoints))  # fmt: skip

    def _replay(self, message: MessageExt) -> None:
        try:
            if message.tags == CK_TAG:
                ck = Checkpoint.from_json(message.body)
                ck.revive_offset = message.queue_offset
                earlier = self.checkpoints.get(ck.key)
                if earlier is not None:  # a FIFO pop's extension: the first keeps its place
                    ck.acked, ck.revive_offset = earlier.acked, earlier.revive_offset
                self.checkpoints[ck.key] = ck
                if ck.order:
                    self.order_locks[ck.queue] = ck.key
                elif ck.next_offset >= 0:
                    queue = (ck.group, ck.topic, ck.queue_id)
                    known = self.pop_offsets.get(queue)
                    if known is None:
                        known = self.offsets.query_offset(ck.group, ck.topic, ck.queue_id)
                    self.pop_offsets[queue] = max(known, ck.next_offset)
            elif message.tags == ACK_TAG:
                d = json.loads(message.body)
                key = (d["c"], d["t"], int(d["q"]), int(d["so"]), int(d["pt"]))
                acked = self.checkpoints.get(key)
                if acked is not None:
                    acked.acked.update(int(o) for o in d["o"])
                    if acked.order:
                        known = self.offsets.query_offset(*acked.queue)
                        self.pop_offsets[acked.queue] = max(known, acked.order_point)
                        for offset in d["o"]:
                            self.order_deliveries.pop((*acked.queue, int(offset)), None)
            elif message.tags == ORDER_COUNT_TAG:
                d = json.loads(message.body)
                queue = (d["c"], d["t"], int(d["q"]))
                for counted in [k for k in self.order_deliveries if k[:3] == queue]:
                    del self.order_deliveries[counted]
                for offset, count in d["d"]:
                    self.order_deliveries[(*queue, int(offset))] = int(count)
                self.order_count_offsets[queue] = message.queue_offset
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("pop: revive-log message at %d unreadable (%s); skipped",
                        message.queue_offset, exc)  # fmt: skip
