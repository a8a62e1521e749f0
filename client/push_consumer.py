"""The push consumer (RocketMQ's DefaultMQPushConsumer): the client pulls, a listener consumes.

    def on_messages(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        for message in messages:
            print(message.msg_id, message.body)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("cg", on_messages, namesrv_addr="127.0.0.1:9876")
    consumer.subscribe("Orders", "TagA || TagB")
    async with consumer:
        await anyio.sleep_forever()

How it works:

- Rebalance (every 20 s, and at once when a broker sends NOTIFY_CONSUMER_IDS_CHANGED): per
  subscribed topic (plus ``%RETRY%<group>`` in clustering), the readable queues are shared over
  the group's consumer ids (GET_CONSUMER_LIST_BY_GROUP) with `allocate_averagely`; a
  broadcasting consumer takes every queue. A dropped queue stops pulling and commits its
  offset (an orderly one is also unlocked at the broker); a new queue starts from the group's
  stored offset or, without one, from ``consume_from_where``.
- Each queue has a pull task: long-polling PULL_MESSAGE (held up to 15 s by the broker), tag
  re-check on the client, messages into the queue's `ProcessQueue`. It pauses 50 ms instead of
  pulling while the queue caches more than ``pull_threshold_for_queue`` messages or
  ``pull_threshold_size_for_queue`` bytes, or (concurrently) spans more than
  ``consume_concurrently_max_span`` offsets.
- Concurrently: batches of ``consume_message_batch_max_size`` messages are queued for a pool
  of ``consume_thread_max`` consume tasks. RECONSUME_LATER (or an exception) sends the
  messages back (CONSUMER_SEND_MSG_BACK; the broker re-delivers through ``%RETRY%<group>``,
  then ``%DLQ%<group>`` after ``max_reconsume_times``); a failed send-back is consumed again
  here 5 s later. The committed offset is the smallest offset still cached (max + 1 when empty).
- Orderly: a queue is consumed only while this client holds its broker lock (LOCK_BATCH_MQ,
  renewed every 20 s), one batch at a time in offset order. SUSPEND_CURRENT_QUEUE_A_MOMENT
  re-runs the same messages after ``suspend_current_queue_time``; past
  ``max_reconsume_times`` a message goes to the DLQ and the queue moves on.
- A sync listener runs in a worker thread, an async one in the event loop. Offsets are
  committed every 5 s and on close.
"""

from __future__ import annotations

import contextlib
import enum
import inspect
import logging
import math
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from client.instance import MASTER_ID, ClientInstance, local_ip
from client.message import MQClientError
from client.offset_store import LocalFileOffsetStore, OffsetStore, RemoteOffsetStore
from client.pull_consumer import parse_tags
from client.rebalance import RETRY_PREFIX, ProcessQueue, RebalancePush, now_ms
from protocol.bodies import (
    ConsumeFromWhere,
    ConsumeMessageDirectlyResult,
    ConsumerData,
    ConsumerRunningInfo,
    ConsumeStatus,
    ConsumeType,
    MessageModel,
    MessageQueue,
    SubscriptionData,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    PullSysFlag,
    decode_header,
    encode_header,
)
from protocol.message import (
    MessageConst,
    MessageExt,
    MessageSysFlag,
    decode_records,
    decompress_body,
    tag_hash_code,
)

log = logging.getLogger("boltmq.client")

_BROKER_SUSPEND = 15.0  # how long a pull may be held at the broker
_FLOW_CONTROL_DELAY = 0.05
_PULL_DELAY_ON_ERROR = 3.0
_CONSUME_LATER_DELAY = 5.0
_LOCK_INTERVAL = 20.0
_PULL_ANSWERS = frozenset({
    ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
    ResponseCode.PULL_OFFSET_MOVED,
})  # fmt: skip


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


@attrs.frozen
class PushConsumerStatistics:
    """A snapshot of a push consumer's counters."""

    queues: int
    cached_messages: int
    pulls: int
    consumed_ok: int
    consumed_failed: int
    sent_back: int
    in_flight: int
    flow_control_pauses: int


class PushConsumer(RebalancePush):
    """A push consumer of one group; ``subscribe`` then ``async with PushConsumer(...)``."""

    def __init__(
        self,
        group: str,
        listener: Listener,
        *,
        namesrv_addr: str | Sequence[str] | None = None,
        instance: ClientInstance | None = None,
        instance_name: str | None = None,
        orderly: bool = False,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp_ms: int | None = None,
        consume_thread_max: int = 20,
        consume_message_batch_max_size: int = 1,
        pull_batch_size: int = 32,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100 << 20,
        consume_concurrently_max_span: int = 2000,
        max_reconsume_times: int = -1,
        delay_level_when_next_consume: int = 0,
        suspend_current_queue_time: float = 1.0,
        rebalance_interval: float = 20.0,
        persist_consumer_offset_interval: float = 5.0,
        offset_store_dir: str | Path = "~/.boltmq_offsets",
        shutdown_timeout: float = 5.0,
        timeout: float = 3.0,
    ) -> None:
        if instance is None and namesrv_addr is None:
            raise ValueError("give namesrv_addr (or a ClientInstance to share)")
        if not callable(listener):
            raise TypeError(f"listener must be callable, got {listener!r}")
        if consume_thread_max < 1 or consume_message_batch_max_size < 1 or pull_batch_size < 1:
            raise ValueError("consume_thread_max, batch sizes must be at least 1")
        self.group = group
        self.listener = listener
        self._listener_is_async = inspect.iscoroutinefunction(listener) or (
            inspect.iscoroutinefunction(getattr(listener, "__call__", None))  # noqa: B004
        )
        self._own_instance = instance is None
        self.instance = instance or ClientInstance(
            namesrv_addr or "", instance_name=instance_name, timeout=timeout
        )
        self.orderly = orderly
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.consume_timestamp_ms = consume_timestamp_ms
        self.consume_thread_max = consume_thread_max
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.pull_batch_size = pull_batch_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue
        self.consume_concurrently_max_span = consume_concurrently_max_span
        self.max_reconsume_times = max_reconsume_times
        self.delay_level_when_next_consume = delay_level_when_next_consume
        self.suspend_current_queue_time = suspend_current_queue_time
        self.rebalance_interval = rebalance_interval
        self.persist_consumer_offset_interval = persist_consumer_offset_interval
        self.shutdown_timeout = shutdown_timeout
        self.timeout = timeout
        self.offset_store: OffsetStore
        if message_model == MessageModel.BROADCASTING:
            # Java keeps the name stable across restarts (ip@DEFAULT) so the file is found again.
            client_name = f"{local_ip()}@{instance_name or 'DEFAULT'}"
            self.offset_store = LocalFileOffsetStore(offset_store_dir, client_name, group)
        else:
            self.offset_store = RemoteOffsetStore(self.instance, group)
        #: Topic -> (expression, tags or None for all, subVersion).
        self.subscriptions: dict[str, tuple[str, frozenset[str] | None, int]] = {}
        self._process_queues: dict[MessageQueue, ProcessQueue] = {}
        self._limiter = anyio.CapacityLimiter(consume_thread_max)
        #: Concurrent mode: batches waiting for a consume worker (made at start).
        self._requests: MemoryObjectSendStream[tuple[ProcessQueue, list[MessageExt]]]
        self._request_stream: MemoryObjectReceiveStream[tuple[ProcessQueue, list[MessageExt]]]
        self._rebalance_lock = anyio.Lock()
        self._rebalance_wanted = anyio.Event()
        self._heartbeat_wanted = False
        self._incomplete = False
        self._retry_delay = 0.1
        self._stop_pulling = anyio.Event()
        self._idle = anyio.Event()
        self._in_flight = 0
        self._outer: anyio.abc.TaskGroup | None = None
        self._pull_tg: anyio.abc.TaskGroup | None = None
        self._consume_tg: anyio.abc.TaskGroup | None = None
        self._started_at = 0
        self._stats = {"pulls": 0, "ok": 0, "failed": 0, "sent_back": 0, "flow_control": 0}
        #: Topic -> [ok, failed, consume seconds, pulls, pull seconds] for running info.
        self._topic_stats: dict[str, list[float]] = {}

    # -- subscriptions ------------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Consume ``topic``'s messages whose tag matches ``expression`` (``*``, ``A || B``)."""
        if not topic:
            raise ValueError("subscribe needs a topic name")
        if topic.startswith(RETRY_PREFIX) and topic != self._retry_topic:
            raise ValueError(
                f"cannot subscribe to {topic!r}: another group's retry topic "
                f"({self._retry_topic} is subscribed automatically in clustering)"
            )
        self.subscriptions[topic] = (expression, parse_tags(expression), now_ms())
        if self.message_model == MessageModel.CLUSTERING:
            # As Java does: the group's retry topic comes with any subscription.
            self.subscriptions.setdefault(self._retry_topic, ("*", None, now_ms()))
        self._wake_rebalance(heartbeat=True)

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic`` (its queues are dropped at the next rebalance)."""
        self.subscriptions.pop(topic, None)
        self._wake_rebalance(heartbeat=True)

    def assignment(self) -> list[MessageQueue]:
        """The queues this consumer pulls now, sorted."""
        return sorted(
            (q for q, pq in self._process_queues.items() if not pq.dropped),
            key=lambda q: (q.topic, q.broker_name, q.queue_id),
        )

    def statistics(self) -> PushConsumerStatistics:
        """Counters since start."""
        return PushConsumerStatistics(
            queues=len(self._process_queues),
            cached_messages=sum(pq.count for pq in self._process_queues.values()),
            pulls=self._stats["pulls"],
            consumed_ok=self._stats["ok"],
            consumed_failed=self._stats["failed"],
            sent_back=self._stats["sent_back"],
            in_flight=self._in_flight,
            flow_control_pauses=self._stats["flow_control"],
        )

    async def rebalance(self) -> None:
        """Rebalance now (it also happens every ``rebalance_interval`` s and on notice)."""
        async with self._rebalance_lock:
            await self._rebalance()

    def _start_queue(self, pq: ProcessQueue) -> None:
        assert self._pull_tg is not None and self._consume_tg is not None
        self._pull_tg.start_soon(self._pull_loop, pq)
        if self.orderly:
            self._consume_tg.start_soon(self._consume_orderly_loop, pq)

    def _wake_rebalance(self, heartbeat: bool = False) -> None:
        self._heartbeat_wanted |= heartbeat
        self._rebalance_wanted.set()

    # -- life ---------------------------------------------------------------------------------

    async def __aenter__(self) -> PushConsumer:
        if not self.subscriptions:
            raise MQClientError(ResponseCode.SYSTEM_ERROR, "subscribe to a topic before start")
        if self._outer is not None:
            raise RuntimeError("a PushConsumer runs once: make a new one to start again")
        if self._own_instance:
            await self.instance.__aenter__()
        try:
            if self.group in self.instance.consumers:
                raise MQClientError(
                    ResponseCode.SYSTEM_ERROR,
                    f"consumer group {self.group} already runs on this client instance",
                )
            await self.offset_store.load()
            self.instance.consumers[self.group] = self._consumer_data
            self.instance.call_targets[self.group] = self
            self._started_at = now_ms()
            for topic in list(self.subscriptions):
                with contextlib.suppress(RemotingError):
                    await self.instance.update_route(topic)  # learn the brokers to heartbeat
            await self.instance.send_heartbeat_to_all_brokers()
            self._heartbeat_wanted = False
            self._rebalance_wanted = anyio.Event()  # _run rebalances first anyway
            self._outer = anyio.create_task_group()
            await self._outer.__aenter__()
            try:
                await self._outer.start(self._run)
            except BaseException:
                self._outer.cancel_scope.cancel()
                with contextlib.suppress(BaseException):
                    await self._outer.__aexit__(None, None, None)
                raise
        except BaseException:
            self._forget_registration()
            if self._own_instance:
                await self.instance.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._outer is not None
        self._stop_pulling.set()
        # _run stops the pulls, waits (bounded) for consumption in flight, then returns. (The
        # group is not exited inside the shield below: cancel scopes must nest.)
        await self._outer.__aexit__(None, None, None)
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(self.shutdown_timeout + 2 * self.timeout):
                queues = list(self._process_queues)
                await self.offset_store.persist(queues)
                if self._locks_queues:
                    await self._unlock(queues)
                self._forget_registration()
                await self.instance.unregister(None, self.group)
            self._process_queues.clear()
        if self._own_instance:
            await self.instance.__aexit__(exc_type, exc, tb)

    def _forget_registration(self) -> None:
        # Only our own: a refused second consumer of the group must not unhook the first.
        if self.instance.consumers.get(self.group) == self._consumer_data:
            del self.instance.consumers[self.group]
        if self.instance.call_targets.get(self.group) is self:
            del self.instance.call_targets[self.group]

    async def _run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        # Unbounded: the pull thresholds bound what is cached, so what is queued.
        self._requests, self._request_stream = anyio.create_memory_object_stream[
            tuple[ProcessQueue, list[MessageExt]]
        ](math.inf)
        async with anyio.create_task_group() as consume_tg:
            self._consume_tg = consume_tg
            async with anyio.create_task_group() as pull_tg:
                self._pull_tg = pull_tg
                async with self._rebalance_lock:
                    await self._rebalance()  # queues assigned before the caller goes on
                pull_tg.start_soon(self._rebalance_service)
                pull_tg.start_soon(self._persist_service)
                if self._locks_queues:
                    pull_tg.start_soon(self._lock_service)
                if not self.orderly:
                    # A fixed pool fed by a queue (Java's consume thread pool): cheaper than a
                    # task, and a wait on a limiter, per batch.
                    for _ in range(self.consume_thread_max):
                        consume_tg.start_soon(self._consume_worker)
                task_status.started()
                await self._stop_pulling.wait()
                pull_tg.cancel_scope.cancel()  # held pulls included
            for pq in self._process_queues.values():
                pq.arrived.set()  # orderly consume tasks look at the stop flag and leave
            with anyio.move_on_after(self.shutdown_timeout):
                while self._in_flight:
                    await self._idle.wait()
            if self._in_flight:
                log.warning("consumer group %s: %d listener calls still running after %.1f s; "
                            "their messages are redelivered", self.group, self._in_flight,
                            self.shutdown_timeout)  # fmt: skip
            consume_tg.cancel_scope.cancel()
        self._requests.close()
        self._request_stream.close()

    # -- services -----------------------------------------------------------------------------

    async def _rebalance_service(self) -> None:
        while True:
            wait = self.rebalance_interval
            if self._incomplete:
                # A topic the registry does not list yet (a new retry topic is registered by
                # the broker just after our heartbeat), or a queue still locked by its last
                # owner or without a start offset: look again soon, backing off.
                self._retry_delay = min(2 * self._retry_delay, wait)
                wait = self._retry_delay
            with anyio.move_on_after(wait):
                await self._rebalance_wanted.wait()
            self._rebalance_wanted = anyio.Event()
            try:
                if self._heartbeat_wanted:
                    self._heartbeat_wanted = False
                    for topic in list(self.subscriptions):
                        with contextlib.suppress(RemotingError):
                            await self.instance.update_route(topic)
                    await self.instance.send_heartbeat_to_all_brokers()
                async with self._rebalance_lock:
                    await self._rebalance()
            except Exception:
                log.exception("rebalance of consumer group %s failed", self.group)

    async def _persist_service(self) -> None:
        while True:
            await anyio.sleep(self.persist_consumer_offset_interval)
            try:
                await self.offset_store.persist(list(self._process_queues))
            except Exception:
                log.exception("offset commit of consumer group %s failed", self.group)

    async def _lock_service(self) -> None:
        while True:
            await anyio.sleep(_LOCK_INTERVAL)
            try:
                await self._lock(list(self._process_queues))
            except Exception:
                log.exception("lock renewal of consumer group %s failed", self.group)

    # -- pulling ------------------------------------------------------------------------------

    async def _pull_loop(self, pq: ProcessQueue) -> None:
        with anyio.CancelScope() as scope:
            pq.pull_scope = scope
            flow_controlled = 0
            while not pq.dropped:
                if (
                    pq.count > self.pull_threshold_for_queue
                    or pq.size > self.pull_threshold_size_for_queue
                    or (not self.orderly and pq.max_span() > self.consume_concurrently_max_span)
                ):
                    flow_controlled += 1
                    self._stats["flow_control"] += 1
                    if flow_controlled % 1000 == 1:
                        log.info("%s: flow control on %s: %d messages, %d bytes, span %d",
                                 self.group, pq.queue, pq.count, pq.size,
                                 pq.max_span())  # fmt: skip
                    await anyio.sleep(_FLOW_CONTROL_DELAY)
                    continue
                if self._locks_queues and (not pq.locked or pq.lock_expired()):
                    await anyio.sleep(_PULL_DELAY_ON_ERROR)  # the lock service renews it
                    continue
                try:
                    await self._pull_once(pq)
                except RemotingError as exc:
                    log.warning("%s: pull of %s failed: %s", self.group, pq.queue, exc)
                    await anyio.sleep(_PULL_DELAY_ON_ERROR)
                except Exception:
                    log.exception("%s: pull of %s failed", self.group, pq.queue)
                    await anyio.sleep(_PULL_DELAY_ON_ERROR)

    async def _pull_once(self, pq: ProcessQueue) -> None:
        queue = pq.queue
        subscription = self.subscriptions.get(queue.topic)
        if subscription is None:
            await anyio.sleep(_PULL_DELAY_ON_ERROR)  # unsubscribed: the rebalance drops it
            return
        expression, tags, sub_version = subscription
        address, broker_id = await self.instance.find_read_address(queue, pq.read_from)
        sys_flag = PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION
        commit_offset = 0
        if self.message_model == MessageModel.CLUSTERING and broker_id == MASTER_ID:
            # The pull carries our progress to the master (never to a slave, as in Java).
            stored = self.offset_store.read(queue)
            if stored is not None and stored > 0:
                sys_flag |= PullSysFlag.COMMIT_OFFSET
                commit_offset = stored
        offset = pq.next_offset
        header = PullMessageRequestHeader(
            consumer_group=self.group, topic=queue.topic, queue_id=queue.queue_id,
            queue_offset=offset, max_msg_nums=self.pull_batch_size, sys_flag=int(sys_flag),
            commit_offset=commit_offset, suspend_timeout_millis=int(_BROKER_SUSPEND * 1000),
            subscription=expression, sub_version=sub_version, expression_type="TAG",
        )  # fmt: skip
        request = RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header))
        started = time.perf_counter()
        pq.last_pull_timestamp = now_ms()
        response = await self.instance.invoke_for_queue(
            queue, request, _BROKER_SUSPEND + self.timeout, address
        )
        self._stats["pulls"] += 1
        topic_stats = self._topic(queue.topic)
        topic_stats[3] += 1
        topic_stats[4] += time.perf_counter() - started
        code = response.code
        if code not in _PULL_ANSWERS:
            raise MQClientError(code, f"pull of {queue} from {address}: {response.remark}")
        answer = decode_header(PullMessageResponseHeader, response.ext_fields)
        pq.read_from = answer.suggest_which_broker_id
        if pq.dropped:
            return
        next_offset = answer.next_begin_offset
        if code == ResponseCode.PULL_OFFSET_MOVED:
            log.warning("%s: offset %d of %s is illegal (queue holds %d..%d): moving to %d",
                        self.group, offset, queue, answer.min_offset, answer.max_offset,
                        next_offset)  # fmt: skip
            pq.next_offset = next_offset
            self.offset_store.update(queue, next_offset)
            await self.offset_store.persist([queue])
            return
        pq.next_offset = next_offset
        messages = self._decode(response.body, tags) if code == ResponseCode.SUCCESS else []
        if not messages:
            if pq.count == 0:
                # Nothing cached: what the broker skipped (filtered tags) counts as consumed.
                self.offset_store.update(queue, next_offset, increase_only=True)
            return
        pq.put(messages)
        if not self.orderly:
            batch = self.consume_message_batch_max_size
            if batch == 1:
                for message in messages:
                    self._submit(pq, [message])
            else:
                for start in range(0, len(messages), batch):
                    self._submit(pq, messages[start : start + batch])

    def _decode(
        self, body: bytes | bytearray | memoryview | None, tags: frozenset[str] | None
    ) -> list[MessageExt]:
        if not body:
            return []
        retry_topic = self._retry_topic
        messages = []
        for message in decode_records(body):
            if tags is not None and message.tags not in tags:
                continue  # the broker filters by tag hash; collisions are dropped here
            if message.sys_flag & MessageSysFlag.COMPRESSED:
                message.body = decompress_body(message.body)
                message.sys_flag &= ~MessageSysFlag.COMPRESSED
            if message.topic == retry_topic:
                # A redelivery: the listener sees the topic it subscribed to (as in Java).
                origin = message.properties.get(MessageConst.RETRY_TOPIC)
                if origin:
                    message.topic = origin
            messages.append(message)
        return messages

    # -- consuming ----------------------------------------------------------------------------

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

    async def _consume_orderly_loop(self, pq: ProcessQueue) -> None:
        while not pq.dropped and not self._stop_pulling.is_set():
            await pq.arrived.wait()
            if pq.dropped or self._stop_pulling.is_set():
                return
            if self._locks_queues and (not pq.locked or pq.lock_expired()):
                if pq.queue not in await self._lock([pq.queue]):
                    await anyio.sleep(_PULL_DELAY_ON_ERROR)
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

    # -- heartbeat and broker calls -----------------------------------------------------------

    def _consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group,
            consume_type=ConsumeType.CONSUME_PASSIVELY,
            message_model=self.message_model,
            consume_from_where=self.consume_from_where,
            subscription_data_set=self._subscription_data(),
        )

    def _subscription_data(self) -> list[SubscriptionData]:
        return [
            SubscriptionData(
                topic=topic,
                sub_string=expression,
                tags_set=sorted(tags or ()),
                code_set=[tag_hash_code(t) for t in sorted(tags or ())],
                sub_version=version,
            )
            for topic, (expression, tags, version) in sorted(self.subscriptions.items())
        ]

    def consumer_ids_changed(self) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED from a broker: rebalance at once."""
        self._wake_rebalance()

    def running_info(self, jstack: bool) -> ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO: settings, subscriptions, queues and rates (since start)."""
        properties = {
            "PROP_NAMESERVER_ADDR": ";".join(self.instance.registries),
            "PROP_CONSUME_TYPE": ConsumeType.CONSUME_PASSIVELY.name,
            "PROP_CONSUMEORDERLY": "true" if self.orderly else "false",
            "PROP_THREADPOOL_CORE_SIZE": str(self.consume_thread_max),
            "PROP_CONSUMER_START_TIMESTAMP": str(self._started_at),
            "PROP_CLIENT_VERSION": "V4_9_8",
            "consumerGroup": self.group,
            "messageModel": self.message_model.name,
            "consumeFromWhere": self.consume_from_where.name,
            "consumeThreadMax": str(self.consume_thread_max),
            "consumeMessageBatchMaxSize": str(self.consume_message_batch_max_size),
            "pullBatchSize": str(self.pull_batch_size),
            "pullThresholdForQueue": str(self.pull_threshold_for_queue),
            "consumeConcurrentlyMaxSpan": str(self.consume_concurrently_max_span),
            "maxReconsumeTimes": str(self.max_reconsume_times),
        }
        mq_table = {
            queue: pq.info(self.offset_store.read(queue) or 0)
            for queue, pq in self._process_queues.items()
        }
        elapsed = max((now_ms() - self._started_at) / 1000, 1e-3)
        status_table = {}
        for topic, (ok, failed, consume_s, pulls, pull_s) in self._topic_stats.items():
            consumed = ok + failed
            status_table[topic] = ConsumeStatus(
                pull_rt=pull_s * 1000 / pulls if pulls else 0.0, pull_tps=pulls / elapsed,
                consume_rt=consume_s * 1000 / consumed if consumed else 0.0,
                consume_ok_tps=ok / elapsed, consume_failed_tps=failed / elapsed,
                consume_failed_msgs=int(failed),
            )  # fmt: skip
        stack = None
        if jstack:
            stack = "".join(traceback.format_stack())  # this thread only: no JVM to dump
        return ConsumerRunningInfo(
            properties=properties, subscription_set=self._subscription_data(),
            mq_table=mq_table, status_table=status_table, jstack=stack,
        )  # fmt: skip

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
