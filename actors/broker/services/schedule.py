"""Delayed and timed delivery (RocketMQ's ScheduleMessageService, plus a timer for
``__STARTDELIVERTIME``).

A send whose ``DELAY`` property names a level > 0 is stored in ``SCHEDULE_TOPIC_XXXX``, queue
level - 1, with its real topic and queue in ``REAL_TOPIC`` / ``REAL_QID`` and the delivery time
as the consume-queue tags code (sheet 5.4, 8.5). Each queue holds one delay, so it is ordered
by delivery time: the service walks it from its offset in ``delayOffset.json``, re-puts every
message that is due to its real topic and queue (``DELAY`` removed, ``REAL_*`` kept, tags code
from ``TAGS``) and advances the offset only once the store has the re-put message.

A send whose ``__STARTDELIVERTIME`` (epoch ms) is ahead goes to ``rmq_sys_wheel_timer`` instead,
into queue k where 2^(k-1) s <= time left < 2^k s, or queue 0 when under a second is left. A
queue-k message is looked at again 2^(k-1) s after it was stored; by then less than that is left,
so it is re-put to a lower queue; queue 0 delivers at the start time. So a message hops at most
19 times in 3 days, every queue but 0 is ordered by look-again time (queue 0 holds nothing more
than a second ahead), and the same offset-after-store rule holds (offsets in
``timerOffset.json``). Due times come from each record (store time + delay, or the start time),
not from the tags code, so they hold after a crash rebuilt the consume queues.

A message due while the broker was down is delivered after the restart, once: offsets are
written when they change and when the service stops, and the service stops before the store.

Only a master delivers. On a SYNC_MASTER each re-put waits for a slave like a send, and a
queue's recorded offset never passes a message whose re-put copy no slave has acknowledged
(FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE): delivery goes on from an in-memory position and
the offset catches up once a slave has the bytes, so a master lost before that delivers those
messages again after a restart (duplicates, never a loss). A slave runs no delivery at all; its
offsets are the master's, copied by the config sync (`actors.broker.ha.sync`).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable

import attrs
import trio

from actors.broker.config import BrokerConfig, parse_delay_levels
from actors.broker.ha import HighAvailability
from actors.broker.tables.delay_offsets import DelayOffsetTable
from actors.broker.tables.topics import PERM_RW, CreateSystemTopic, TopicManager, now_ms
from protocol.codes import ResponseCode
from protocol.command import RemotingError
from protocol.message import MessageConst, MessageExt, MessageFormatError, MessageSysFlag
from protocol.message import decode_record as decode_message
from protocol.names import (
    DLQ_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from storage import (
    GetMessageStatus,
    MessageExtBrokerInner,
    MessageStore,
    PutMessageResult,
    PutMessageStatus,
)

log = logging.getLogger("boltmq.broker.schedule")

#: The timer's topic (RocketMQ 5's name for its timer wheel topic).
#: Timer queues: queue k > 0 waits 2^(k-1) s, so 19 queues span 2^18 s (just over 3 days).
TIMER_QUEUE_NUMS = 19
#: Seconds after start of the first pass (RocketMQ's FIRST_DELAY_TIME).
FIRST_DELAY = 1.0
#: Re-check interval of a queue with nothing due (RocketMQ's DELAY_FOR_A_WHILE).
CHECK_INTERVAL_MS = 100
#: Wait before retrying a queue whose re-put the store refused.
RETRY_AFTER_FAILURE_MS = 1000
#: Messages read and re-put per round of one queue.
BATCH = 32

_DELAY = MessageConst.DELAY
_START_DELIVER_TIME = MessageConst.START_DELIVER_TIME
_NOT_DELAYED_TOPICS = frozenset(
    {SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC}
)
_PREPARED_OR_ROLLBACK = (MessageSysFlag.TRANSACTION_PREPARED, MessageSysFlag.TRANSACTION_ROLLBACK)
#: Put statuses that will never succeed for this message: drop it rather than block the queue.
_UNSTORABLE = (PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED)
#: Stored on this SYNC_MASTER, but no slave acknowledged the bytes (yet).
_NOT_ON_SLAVE = (PutMessageStatus.FLUSH_SLAVE_TIMEOUT, PutMessageStatus.SLAVE_NOT_AVAILABLE)


def timer_queue_for(remaining_ms: int) -> int:
    """The timer queue of a message due in ``remaining_ms``: 0 under a second, else k with
    2^(k-1) s <= remaining < 2^k s (the top queue also takes anything farther)."""
    return min((remaining_ms // 1000).bit_length(), TIMER_QUEUE_NUMS - 1)


def timer_wake_time(queue_id: int, store_timestamp: int, start_deliver_time: int) -> int:
    """When a message in timer queue ``queue_id`` is looked at again: hop or deliver."""
    if queue_id == 0:
        return start_deliver_time
    return min(start_deliver_time, store_timestamp + (500 << queue_id))  # 2^(k-1) s


@attrs.frozen
class ScheduleStatistics:
    """The schedule service at one moment."""

    delay_levels: int
    delivered: int  # re-put to their real topic
    timer_hops: int  # re-put one timer queue lower
    dropped: int  # could never be stored (logged)
    # Messages not yet re-put, per delay level (1-based) and per timer queue.
    pending_by_level: dict[int, int]
    pending_timer: int


@attrs.define
class _Queue:
    """One queue the service walks: a delay level or a timer queue."""

    topic: str
    queue_id: int
    table: DelayOffsetTable
    key: int
    delay_ms: int  # the level's delay; -1 for a timer queue
    head: tuple[int, int] = (-1, 0)  # (queue offset, due time) of the first message not due
    # Where delivery goes on; ahead of the table's offset only while re-puts await a slave.
    position: int = -1
    # (commit-log end of re-puts, queue offset of the first of them) not yet on a slave.
    unconfirmed: collections.deque[tuple[int, int]] = attrs.field(factory=collections.deque)


class ScheduleMessageService:
    """Redirects delayed sends and delivers them when due; see the module docstring."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        store: MessageStore,
        topics: TopicManager,
        ha: HighAvailability,
        delay_offsets: DelayOffsetTable,
        timer_offsets: DelayOffsetTable,
    ) -> None:
        self.store = store
        self.topics = topics
        #: Re-puts go through it (a SYNC_MASTER's wait for a slave), and its slave offset.
        self.ha = ha
        # Read at each turn, not kept: a controller-mode broker changes role at run time.
        self.config = config
        self.delay_levels = parse_delay_levels(config.message_delay_level)
        self.max_delay_level = len(self.delay_levels)
        self.timer_max_delay_ms = config.timer_max_delay_sec * 1000
        #: Loaded and written by this service; a slave's config sync replaces their content.
        self.delay_offsets = delay_offsets
        self.timer_offsets = timer_offsets
        self._queues = [
            _Queue(SCHEDULE_TOPIC, level - 1, self.delay_offsets, level, delay)
            for level, delay in enumerate(self.delay_levels, start=1)
        ] + [_Queue(TIMER_TOPIC, k, self.timer_offsets, k, -1) for k in range(TIMER_QUEUE_NUMS)]
        self.counters = {"delivered": 0, "timer_hops": 0, "dropped": 0}
        self._loaded = False
        self._stopping = False
        self._wake = trio.Event()
        self._stopped = trio.Event()

    # -- the send path -----------------------------------------------------------------------

    def redirect_send(
        self,
        topic: str,
        queue_id: int,
        properties: dict[str, str],
        sys_flag: int,
        batch: bool = False,
    ) -> tuple[str, int, int | None]:
        """Topic, queue and tags code to store a send under (the schedule or timer topic for a
        delayed one, ``properties`` then gaining REAL_TOPIC / REAL_QID); tags code None = the
        store's own (from TAGS, or the due time in the schedule topic).

        Raises `RemotingError` (MESSAGE_ILLEGAL) for a bad DELAY or __STARTDELIVERTIME.
        """
        if _DELAY not in properties and _START_DELIVER_TIME not in properties:
            return topic, queue_id, None  # the common case: two lookups
        return self._redirect(topic, queue_id, properties, sys_flag, batch)

    def redirect(self, msg: MessageExtBrokerInner) -> MessageExtBrokerInner:
        """`redirect_send` applied to a message about to be put (send-back, other put paths)."""
        msg.topic, msg.queue_id, tags_code = self.redirect_send(
            msg.topic, msg.queue_id, msg.properties, msg.sys_flag
        )
        if tags_code is not None:
            msg.tags_code = tags_code
        return msg

    def _redirect(
        self, topic: str, queue_id: int, properties: dict[str, str], sys_flag: int, batch: bool
    ) -> tuple[str, int, int | None]:
        if (
            MessageSysFlag.transaction_value(sys_flag) in _PREPARED_OR_ROLLBACK
            or topic in _NOT_DELAYED_TOPICS
        ):
            return topic, queue_id, None
        if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            properties.pop(MessageConst.DELAY, None)  # dead letters land at once
            return topic, queue_id, None
        now = now_ms()
        start = _int_property(properties, MessageConst.START_DELIVER_TIME, "an epoch time in ms")
        if start is not None and start > now:
            if start - now > self.timer_max_delay_ms:
                raise RemotingError(
                    ResponseCode.MESSAGE_ILLEGAL,
                    f"__STARTDELIVERTIME {start} is {(start - now) // 1000} s ahead; this broker "
                    f"holds messages at most timerMaxDelaySec={self.timer_max_delay_ms // 1000} s",
                )
            _refuse_batch(batch, MessageConst.START_DELIVER_TIME)
            _set_real(properties, topic, queue_id)
            return TIMER_TOPIC, timer_queue_for(start - now), start
        level = _int_property(properties, MessageConst.DELAY, "a delay level number")
        if level is None or level <= 0:
            return topic, queue_id, None
        _refuse_batch(batch, MessageConst.DELAY)
        if level > self.max_delay_level:
            level = self.max_delay_level
            properties[MessageConst.DELAY] = str(level)
        _set_real(properties, topic, queue_id)
        # The store sets the tags code (store time + the level's delay) when it appends, as
        # RocketMQ does when it dispatches, so a slave and a recovery derive the same entry.
        return SCHEDULE_TOPIC, level - 1, None

    # -- life ------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Deliver due messages until `aclose` (or cancellation); offsets written at the end."""
        if not self._loaded:
            # Only once: after a restart of this child the offsets in memory are the newest.
            await trio.to_thread.run_sync(self._load)
        if not self.config.is_slave:  # a slave's topics are the master's (config sync)
            await self.topics.call(CreateSystemTopic(TIMER_TOPIC, TIMER_QUEUE_NUMS, PERM_RW))
        self._stopping = False
        self._wake = trio.Event()
        self._stopped = trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.delay_offsets.run)
                nursery.start_soon(self.timer_offsets.run)
                task_status.started()
                try:
                    while not self._stopping:
                        if self.config.is_slave:
                            # RocketMQ starts the delivery only off a slave: the master
                            # re-puts and the slave receives the copies by replication.
                            await self._pause(3600)
                        else:
                            await self.topics.call(
                                CreateSystemTopic(TIMER_TOPIC, TIMER_QUEUE_NUMS, PERM_RW)
                            )
                            await self._deliver_loop()
                finally:
                    nursery.cancel_scope.cancel()  # the tables write their files as they stop
        finally:
            self._stopped.set()

    def role_changed(self) -> None:
        """The broker became master or slave (controller mode): start or stop delivering."""
        self._wake.set()

    async def aclose(self) -> None:
        """Stop between rounds, so no re-put is in flight without its offset recorded."""
        self._stopping = True
        self._wake.set()
        await self._stopped.wait()

    def _load(self) -> None:
        self.delay_offsets.load()
        self.timer_offsets.load()
        self._loaded = True

    def statistics(self) -> ScheduleStatistics:
        """Counters and what is still waiting."""
        pending: dict[int, int] = {}
        timer = 0
        store = self.store
        for queue in self._queues:
            waiting = store.get_max_offset_in_queue(queue.topic, queue.queue_id) - max(
                queue.table.offset_table.get(queue.key, 0),
                store.get_min_offset_in_queue(queue.topic, queue.queue_id),
            )
            if queue.delay_ms >= 0:
                pending[queue.key] = max(waiting, 0)
            else:
                timer += max(waiting, 0)
        return ScheduleStatistics(
            delay_levels=self.max_delay_level,
            delivered=self.counters["delivered"],
            timer_hops=self.counters["timer_hops"],
            dropped=self.counters["dropped"],
            pending_by_level=pending,
            pending_timer=timer,
        )

    # -- delivery --------------------------------------------------------------------------

    async def _deliver_loop(self) -> None:
        await self._pause(FIRST_DELAY)
        while not self._stopping and not self.config.is_slave:
            next_check = now_ms() + CHECK_INTERVAL_MS
            for queue in self._queues:
                if self._stopping:
                    return
                due = await self._deliver_queue(queue)
                if due is not None:
                    next_check = min(next_check, due)
            await self._pause(max(next_check - now_ms(), 0) / 1000)

    async def _pause(self, seconds: float) -> None:
        with trio.move_on_after(seconds):
            await self._wake.wait()
        if not self._stopping:
            self._wake = trio.Event()

    async def _deliver_queue(self, queue: _Queue) -> int | None:
        """Re-put what is due in one queue; the due time of its first message not due."""
        store = self.store
        table = queue.table
        if queue.unconfirmed:
            self._confirm(queue)
        offset = table.offset_table.get(queue.key, 0)
        if queue.unconfirmed:
            offset = max(offset, queue.position)
        if queue.head[0] == offset and queue.head[1] > now_ms():
            return queue.head[1]  # the head is known and not due: nothing to read
        low = store.get_min_offset_in_queue(queue.topic, queue.queue_id)
        high = store.get_max_offset_in_queue(queue.topic, queue.queue_id)
        if not low <= offset <= high:
            # Files removed by retention, or a store newer than the table: resume at its edge.
            log.warning("%s queue %d: offset %d outside [%d, %d], moved",
                        queue.topic, queue.queue_id, offset, low, high)  # fmt: skip
            offset = min(max(offset, low), high)
            self._advance(queue, offset)
        while offset < high and not self._stopping:
            result = store.get_message("", queue.topic, queue.queue_id, offset, BATCH)
            if result.status is not GetMessageStatus.FOUND:
                if result.next_begin_offset > offset:
                    offset = result.next_begin_offset  # a hole left by a removed file
                    self._advance(queue, offset)
                    continue
                return None
            now = now_ms()
            due: list[tuple[int, MessageExtBrokerInner | None]] = []
            not_due: tuple[int, int] | None = None
            try:
                for buffer, queue_offset in zip(result.buffers, result.queue_offsets, strict=True):
                    try:
                        message = decode_message(buffer)
                    except MessageFormatError as exc:
                        log.error("%s queue %d offset %d: unreadable, skipped: %s",
                                  queue.topic, queue.queue_id, queue_offset, exc)  # fmt: skip
                        due.append((queue_offset, None))
                        continue
                    when = self._due_time(queue, message)
                    if when > now:
                        not_due = (queue_offset, when)
                        break
                    due.append((queue_offset, self._next_hop(message, now)))
                next_offset = result.next_begin_offset if not_due is None else not_due[0]
            finally:
                result.release()
            stored_up_to, not_on_slave = await self._put_due(due, next_offset)
            if not_on_slave is not None:
                queue.unconfirmed.append(not_on_slave)
            self._advance(queue, stored_up_to)
            if stored_up_to < next_offset:
                return now_ms() + RETRY_AFTER_FAILURE_MS
            offset = stored_up_to
            if not_due is not None:
                queue.head = not_due
                return not_due[1]
        return None

    def _due_time(self, queue: _Queue, message: MessageExt) -> int:
        if queue.delay_ms >= 0:
            return message.store_timestamp + queue.delay_ms
        start = _start_deliver_time(message)
        return timer_wake_time(queue.queue_id, message.store_timestamp, start)

    async def _put_due(
        self, due: list[tuple[int, MessageExtBrokerInner | None]], next_offset: int
    ) -> tuple[int, tuple[int, int] | None]:
        """Put the due messages in order; the queue offset up to which all are stored, and
        (commit-log end, first queue offset) of the stored re-puts no slave acknowledged.

        None stands for a message that can never be stored: it is counted, logged and passed.
        """
        if not due:
            return next_offset, None
        ha = self.ha
        results: list[PutMessageResult | None] = [None] * len(due)
        outstanding = len(due)
        all_back = trio.Event()

        def answer(index: int) -> Callable[[PutMessageResult], None]:
            def callback(result: PutMessageResult) -> None:
                nonlocal outstanding
                results[index] = result
                outstanding -= 1
                if outstanding == 0:
                    all_back.set()

            return callback

        for index, (_, inner) in enumerate(due):
            if inner is None:
                answer(index)(_UNSTORABLE_RESULT)
            else:
                ha.put_message(inner, answer(index))
        # Shielded: a re-put in flight must be recorded, or it is delivered again after a restart.
        # A SYNC_MASTER answers within slaveTimeout (3 s by default).
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            await all_back.wait()
        not_on_slave: tuple[int, int] | None = None
        for (queue_offset, inner), result in zip(due, results, strict=True):
            if result is not None and result.ok:
                assert inner is not None
                self.counters["timer_hops" if inner.topic == TIMER_TOPIC else "delivered"] += 1
                if result.status in _NOT_ON_SLAVE:
                    end = result.wrote_offset + result.wrote_bytes
                    first = queue_offset if not_on_slave is None else not_on_slave[1]
                    not_on_slave = (end, first)
            elif result is not None and result.status in _UNSTORABLE:
                self.counters["dropped"] += 1
                if inner is not None:
                    reason = result.remark or result.status
                    log.error("message for %s at queue offset %d cannot be re-put (%s)",
                              inner.topic, queue_offset, reason)  # fmt: skip
            else:
                log.warning("re-put of the message at queue offset %d failed (%s); retrying",
                            queue_offset, result.status if result else "no answer")  # fmt: skip
                return queue_offset, not_on_slave
        return next_offset, not_on_slave

    def _next_hop(self, message: MessageExt, now: int) -> MessageExtBrokerInner | None:
        """The message to put for a due one: its real topic, or a lower timer queue."""
        properties = dict(message.properties)
        if message.topic == TIMER_TOPIC:
            left = _start_deliver_time(message) - now
            if left > 0:
                return self._inner(message, TIMER_TOPIC, timer_queue_for(left), properties)
        properties.pop(MessageConst.DELAY, None)
        real_topic = properties.get(MessageConst.REAL_TOPIC)
        try:
            real_queue = int(properties.get(MessageConst.REAL_QID, "0"))
        except ValueError:
            real_queue = -1
        if not real_topic or real_queue < 0:
            log.error("%s offset %d has no REAL_TOPIC / REAL_QID; dropped",
                      message.topic, message.queue_offset)  # fmt: skip
            return None
        return self._inner(message, real_topic, real_queue, properties)

    @staticmethod
    def _inner(
        message: MessageExt, topic: str, queue_id: int, properties: dict[str, str]
    ) -> MessageExtBrokerInner:
        return MessageExtBrokerInner.from_stored(
            message, topic=topic, queue_id=queue_id, properties=properties,
            tags_code=_start_deliver_time(message) if topic == TIMER_TOPIC else None,
        )  # fmt: skip

    def _advance(self, queue: _Queue, offset: int) -> None:
        queue.position = offset
        if queue.unconfirmed:
            # Recorded only up to the first re-put no slave has yet.
            offset = min(offset, queue.unconfirmed[0][1])
        if queue.table.offset_table.get(queue.key) != offset:
            queue.table.offset_table[queue.key] = offset
            queue.table.mark_dirty()

    def _confirm(self, queue: _Queue) -> None:
        """Let the recorded offset pass the re-puts a slave has acknowledged since."""
        service = self.ha.service
        acked = service.push_to_slave_max_offset if service is not None else 0
        unconfirmed = queue.unconfirmed
        while unconfirmed and unconfirmed[0][0] <= acked:
            unconfirmed.popleft()
        self._advance(queue, queue.position)


# -- helpers -------------------------------------------------------------------------------

_UNSTORABLE_RESULT = PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark="unreadable")


def _int_property(properties: dict[str, str], key: str, what: str) -> int | None:
    text = properties.get(key)
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise RemotingError(
            ResponseCode.MESSAGE_ILLEGAL, f"property {key}={text!r} is not {what}"
        ) from None


def _refuse_batch(batch: bool, key: str) -> None:
    if batch:
        raise RemotingError(
            ResponseCode.MESSAGE_ILLEGAL,
            f"a batch cannot be delayed ({key}); send delayed messages one by one",
        )


def _set_real(properties: dict[str, str], topic: str, queue_id: int) -> None:
    properties[MessageConst.REAL_TOPIC] = topic
    properties[MessageConst.REAL_QID] = str(queue_id)


def _start_deliver_time(message: MessageExt) -> int:
    try:
        return int(message.properties.get(MessageConst.START_DELIVER_TIME, "0"))
    except ValueError:
        return 0
