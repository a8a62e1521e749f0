"""Consuming for the push consumer: the listener runs on pulled messages, concurrently or orderly.

`ConsumeMessageService` (RocketMQ's ConsumeMessageConcurrentlyService and
ConsumeMessageOrderlyService) is the part of `PushConsumer` that hands what the pull tasks
put into a `ProcessQueue` to the listener and settles the outcome:

- Concurrently: batches of ``consume_message_batch_max_size`` messages are queued for a pool
  of ``consume_thread_max`` consume tasks. RECONSUME_LATER (or an exception) sends the
  messages back (CONSUMER_SEND_MSG_BACK; the broker re-delivers through ``%RETRY%<group>``,
  then ``%DLQ%<group>`` after ``max_reconsume_times``); a failed send-back is consumed again
  here 5 s later. The committed offset is the smallest offset still cached (max + 1 when empty).
- Orderly: a queue is consumed only while this client holds its broker lock (LOCK_BATCH_MQ,
  renewed every 20 s), one batch at a time in offset order. SUSPEND_CURRENT_QUEUE_A_MOMENT
  re-runs the same messages after ``suspend_current_queue_time``; past
  ``max_reconsume_times`` a message goes to the DLQ and the queue moves on.
- A sync listener runs in a worker thread, an async one in the event loop.
  CONSUME_MESSAGE_DIRECTLY from a broker runs it on one message (`consume_directly`).

It also keeps the counters (`statistics()`, running info) and the in-flight count that
closing waits on.
"""

from __future__ import annotations

import enum
import inspect
import logging
import time
import traceback
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from client.process_queue import ProcessQueue, now_ms
from client.rebalance import RebalancePush
from protocol.bodies import ConsumeMessageDirectlyResult, MessageModel, MessageQueue
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.headers import ConsumerSendMsgBackRequestHeader, encode_header
from protocol.message import MessageConst, MessageExt, MessageSysFlag, decompress_body

log = logging.getLogger("boltmq.client")

_CONSUME_LATER_DELAY = 5.0
_LOCK_RETRY_DELAY = 3.0  # an orderly queue whose lock was refused waits as a failed pull does


class ConsumeConcurrentlyStatus(enum.Enum):
    """What a concurrent listener returns."""

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(enum.Enum):
    """What an orderly listener returns."""

    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


_SUCCESS = (ConsumeConcurrentlyStatus.CONSUME_SUCCESS, ConsumeOrderlyStatus.SUCCESS)

Listener = Callable[[list[MessageExt]], Any]
"""A sync or async callable taking a batch of messages and returning a consume status."""


class ConsumeMessageService(RebalancePush):
    """Listener calls of a push consumer; `PushConsumer` supplies the state and starts the tasks."""

    listener: Listener
    consume_message_batch_max_size: int
    max_reconsume_times: int
    delay_level_when_next_consume: int
    suspend_current_queue_time: float
    _listener_is_async: bool
    _limiter: anyio.CapacityLimiter
    #: Concurrent mode: batches waiting for a consume worker.
    _requests: MemoryObjectSendStream[tuple[ProcessQueue, list[MessageExt]]]
    _request_stream: MemoryObjectReceiveStream[tuple[ProcessQueue, list[MessageExt]]]
    _stop_pulling: anyio.Event
    _idle: anyio.Event
    _in_flight: int
    _consume_tg: anyio.abc.TaskGroup | None
    _stats: dict[str, int]
    #: Topic -> [ok, failed, consume seconds, pulls, pull seconds] for running info.
    _topic_stats: dict[str, list[float]]

    # -- the listener -------------------------------------------------------------------------

    async def _call_listener(self, messages: list[MessageExt], limited: bool = True) -> Any:
        """The listener's raw answer (exceptions propagate).

        ``limited``: take a slot of the ``consume_thread_max`` limit (the concurrent workers
        are that many already and do not). A plain function runs in a worker thread.
        """
        stamp = str(now_ms())
        for message in messages:
            message.properties[MessageConst.CONSUME_START_TIMESTAMP] = stamp
        if self._listener_is_async:
            if not limited:
                return await self.listener(messages)
            async with self._limiter:
                return await self.listener(messages)
        result = await anyio.to_thread.run_sync(self.listener, messages, limiter=self._limiter)
        if inspect.isawaitable(result):
            result = await result
        return result

    # -- concurrently -------------------------------------------------------------------------

    def _submit(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        self._begin()
        self._requests.send_nowait((pq, messages))

    async def _consume_worker(self) -> None:
        async for pq, messages in self._request_stream:
            try:
                await self._consume_concurrently(pq, messages)
            finally:
                self._end()

    async def _consume_concurrently(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        if pq.dropped or self._stop_pulling.is_set():
            return  # not consumed, not committed: redelivered to whoever takes the queue
        started = time.perf_counter()
        try:
            status = await self._call_listener(messages, limited=False)
        except Exception:
            log.exception("%s: listener failed on %d messages of %s; consuming them later",
                          self.group, len(messages), pq.queue)  # fmt: skip
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        if status is None:
            log.warning("%s: listener returned None; return CONSUME_SUCCESS or RECONSUME_LATER "
                        "(None counts as RECONSUME_LATER)", self.group)  # fmt: skip
        ok = status == ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        self._count(pq.queue.topic, ok, len(messages), time.perf_counter() - started)
        if pq.dropped:
            return  # the queue went to another consumer meanwhile; it will redeliver
        failed: list[MessageExt] = []
        if not ok:
            if self.message_model == MessageModel.BROADCASTING:
                log.warning("%s: broadcast messages are not retried; dropped %s", self.group,
                            [m.msg_id for m in messages])  # fmt: skip
            else:
                delay_level = self.delay_level_when_next_consume
                for message in messages:
                    if not await self._send_back(pq.queue, message, delay_level):
                        message.reconsume_times += 1
                        failed.append(message)
        done = [m for m in messages if m not in failed] if failed else messages
        offset = pq.remove(done)
        if offset >= 0 and not pq.dropped:
            self.offset_store.update(pq.queue, offset, increase_only=True)
        if failed:
            assert self._consume_tg is not None
            self._consume_tg.start_soon(self._consume_later, pq, failed)

    async def _consume_later(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        await anyio.sleep(_CONSUME_LATER_DELAY)
        self._submit(pq, messages)

    # -- orderly ------------------------------------------------------------------------------

    async def _consume_orderly_loop(self, pq: ProcessQueue) -> None:
        while not pq.dropped and not self._stop_pulling.is_set():
            await pq.arrived.wait()
            if pq.dropped or self._stop_pulling.is_set():
                return
            if self._locks_queues and (not pq.locked or pq.lock_expired()):
                if pq.queue not in await self._lock([pq.queue]):
                    await anyio.sleep(_LOCK_RETRY_DELAY)
                continue
            suspend = False
            async with pq.consume_lock:
                if pq.dropped:
                    return
                messages = pq.take(self.consume_message_batch_max_size)
                if not messages:
                    continue
                started = time.perf_counter()
                self._begin()
                try:
                    status = await self._call_listener(messages)
                except Exception:
                    log.exception("%s: orderly listener failed on %s; suspending the queue",
                                  self.group, pq.queue)  # fmt: skip
                    status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                finally:
                    self._end()
                ok = status == ConsumeOrderlyStatus.SUCCESS
                self._count(pq.queue.topic, ok, len(messages), time.perf_counter() - started)
                if pq.dropped:
                    return  # not committed: the next owner consumes the batch again
                if not ok:
                    suspend = await self._check_reconsume_times(pq.queue, messages)
                if suspend:
                    pq.put_back(messages)
                else:
                    offset = pq.commit()
                    if offset >= 0:
                        self.offset_store.update(pq.queue, offset)
            if suspend:
                await anyio.sleep(self.suspend_current_queue_time)

    async def _check_reconsume_times(self, queue: MessageQueue, messages: list[MessageExt]) -> bool:
        # ConsumeMessageOrderlyService.checkReconsumeTimes: past the limit a message goes to
        # the DLQ (the queue then moves on); below it the batch is retried here.
        limit = self.max_reconsume_times if self.max_reconsume_times >= 0 else 2**31 - 1
        suspend = False
        for message in messages:
            if message.reconsume_times >= limit:
                message.properties[MessageConst.RECONSUME_TIME] = str(message.reconsume_times)
                if not await self._send_back(queue, message, -1):
                    suspend = True
                    message.reconsume_times += 1
            else:
                suspend = True
                message.reconsume_times += 1
        return suspend

    # -- send-back and counters ---------------------------------------------------------------

    async def _send_back(self, queue: MessageQueue, message: MessageExt, delay_level: int) -> bool:
        """CONSUMER_SEND_MSG_BACK to the master of ``queue``'s broker; False on failure."""
        max_times = self.max_reconsume_times if self.max_reconsume_times >= 0 else 16
        header = ConsumerSendMsgBackRequestHeader(
            offset=message.commit_log_offset, group=self.group, delay_level=delay_level,
            origin_msg_id=message.msg_id, origin_topic=message.topic,
            max_reconsume_times=max_times,
        )  # fmt: skip
        request = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, encode_header(header))
        try:
            address = await self.instance.find_master(queue)
            response = await self.instance.invoke_broker(address, request)
        except RemotingError as exc:
            log.warning("%s: send-back of %s failed: %s", self.group, message.msg_id, exc)
            return False
        if response.code != ResponseCode.SUCCESS:
            log.warning("%s: send-back of %s refused: %s", self.group, message.msg_id,
                        response.remark)  # fmt: skip
            return False
        self._stats["sent_back"] += 1
        return True

    def _begin(self) -> None:
        if self._in_flight == 0:
            self._idle = anyio.Event()
        self._in_flight += 1

    def _end(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._idle.set()

    def _topic(self, topic: str) -> list[float]:
        stats = self._topic_stats.get(topic)
        if stats is None:
            stats = self._topic_stats[topic] = [0.0, 0.0, 0.0, 0.0, 0.0]
        return stats

    def _count(self, topic: str, ok: bool, count: int, seconds: float) -> None:
        stats = self._topic(topic)
        stats[0 if ok else 1] += count
        stats[2] += seconds
        self._stats["ok" if ok else "failed"] += count

    # -- a broker's call ----------------------------------------------------------------------

    async def consume_directly(
        self, message: MessageExt, broker_name: str | None
    ) -> ConsumeMessageDirectlyResult:
        """CONSUME_MESSAGE_DIRECTLY: run the listener on ``message`` alone; report the result."""
        [message] = self._decode_direct(message)
        started = time.monotonic()
        remark = None
        try:
            status = await self._call_listener([message])
        except Exception as exc:
            result = "CR_THROW_EXCEPTION"
            remark = "".join(traceback.format_exception(exc))
        else:
            if status is None:
                result = "CR_RETURN_NULL"
            elif status in _SUCCESS:
                result = "CR_SUCCESS"
            else:
                result = "CR_LATER"
        return ConsumeMessageDirectlyResult(
            order=self.orderly, auto_commit=True, consume_result=result, remark=remark,
            spent_time_mills=int((time.monotonic() - started) * 1000),
        )  # fmt: skip

    def _decode_direct(self, message: MessageExt) -> list[MessageExt]:
        if message.sys_flag & MessageSysFlag.COMPRESSED:
            message.body = decompress_body(message.body)
            message.sys_flag &= ~MessageSysFlag.COMPRESSED
        if message.topic == self._retry_topic:
            message.topic = message.properties.get(MessageConst.RETRY_TOPIC) or message.topic
        return [message]
