"""The push consumer (RocketMQ's DefaultMQPushConsumer): the client pulls, a listener consumes.

    def on_messages(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        for message in messages:
            print(message.msg_id, message.body)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("cg", on_messages, namesrv_addr="127.0.0.1:9876")
    consumer.subscribe("Orders", "TagA || TagB")
    async with consumer:
        await anyio.sleep_forever()

How it works: `PushConsumer` holds the settings, subscriptions and state, runs the periodic
services and answers for heartbeats and running info. It derives from three parts, each a
class in a module of its own that builds on the one before (bottom up):

- Rebalance (rebalance.py; every 20 s, and at once when a broker sends
  NOTIFY_CONSUMER_IDS_CHANGED): per subscribed topic (plus ``%RETRY%<group>`` in clustering),
  the readable queues are shared over the group's consumer ids (GET_CONSUMER_LIST_BY_GROUP)
  with `allocate_averagely`; a broadcasting consumer takes every queue. A dropped queue stops
  pulling and commits its offset (an orderly one is also unlocked at the broker); a new queue
  starts from the group's stored offset or, without one, from ``consume_from_where``.
- Consuming (consume_service.py): the listener runs on the queue's cached messages,
  concurrently in a pool of ``consume_thread_max`` tasks, or orderly under the broker lock;
  failures go back to the broker (retry topic, then DLQ) or are retried here.
- Pulling (pull_service.py): each queue has a pull task, long-polling PULL_MESSAGE into the
  queue's `ProcessQueue` (process_queue.py), paused while the queue caches too much.

Offsets are committed every 5 s and on close; orderly locks are renewed every 20 s.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import anyio
import anyio.abc
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from client.consume_service import ConsumeConcurrentlyStatus, ConsumeOrderlyStatus, Listener
from client.instance import ClientInstance, local_ip
from client.message import MQClientError
from client.offset_store import LocalFileOffsetStore, OffsetStore, RemoteOffsetStore
from client.options import ConnectionOptions, connection_options
from client.process_queue import ProcessQueue, now_ms
from client.pull_consumer import parse_tags
from client.pull_service import PullMessageService
from client.rebalance import RETRY_PREFIX
from client.selector import MessageSelector, selector_of
from client.subscription import Subscription
from protocol.bodies import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumerRunningInfo,
    ConsumeStatus,
    ConsumeType,
    MessageModel,
    MessageQueue,
    SubscriptionData,
)
from protocol.codes import ResponseCode
from protocol.command import RemotingError
from protocol.filter import TAG
from protocol.message import MessageExt, tag_hash_code

__all__ = [
    "ConsumeConcurrentlyStatus",
    "ConsumeOrderlyStatus",
    "Listener",
    "PushConsumer",
    "PushConsumerStatistics",
]

log = logging.getLogger("boltmq.client")

_LOCK_INTERVAL = 20.0


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


class PushConsumer(PullMessageService):
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
        tls_ca_file: str | None = None,
        tls: bool | None = None,
        tls_cert_file: str = "",
        tls_key_file: str = "",
        access_key: str | None = None,
        secret_key: str | None = None,
        security_token: str | None = None,
        options: ConnectionOptions | None = None,
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
        # The seven keywords are the record's fields spelled out (client.options).
        options = connection_options(
            options,
            ConnectionOptions(
                tls=tls,
                tls_ca_file=tls_ca_file,
                tls_cert_file=tls_cert_file,
                tls_key_file=tls_key_file,
                access_key=access_key,
                secret_key=secret_key,
                security_token=security_token,
            ),
        )
        self._own_instance = instance is None
        self.instance = instance or ClientInstance(
            namesrv_addr or "",
            instance_name=instance_name,
            timeout=timeout,
            options=options,
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
        #: Topic -> expression type of a subscription not by tag (SQL92); absent = TAG.
        self.expression_types: dict[str, str] = {}
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

    def subscribe(
        self, topic: str, expression: str | MessageSelector = "*"
    ) -> Subscription[None]:
        """Consume ``topic``'s messages whose tag matches ``expression`` (``*``, ``A || B``),
        or that a `MessageSelector` (``MessageSelector.by_sql("a > 5")``) takes.

        Applied at once; the rebalance takes the topic's queues. The result may be awaited
        (as `PullConsumer.subscribe`'s is): for a SQL92 selector on a running consumer that
        asks a broker to check it (CHECK_CLIENT_CONFIG), else it does nothing more. A
        consumer starting checks every SQL92 selector so, as Java's does.
        """
        selector = selector_of(expression)
        if not topic:
            raise ValueError("subscribe needs a topic name")
        if topic.startswith(RETRY_PREFIX) and topic != self._retry_topic:
            raise ValueError(
                f"cannot subscribe to {topic!r}: another group's retry topic "
                f"({self._retry_topic} is subscribed automatically in clustering)"
            )
        # SQL92 is filtered by the broker alone: no tags to check again here (as in Java).
        tags = parse_tags(selector.expression) if selector.is_tag else None
        self.subscriptions[topic] = (selector.expression, tags, now_ms())
        if selector.is_tag:
            self.expression_types.pop(topic, None)
        else:
            self.expression_types[topic] = selector.expression_type
        if self.message_model == MessageModel.CLUSTERING:
            # As Java does: the group's retry topic comes with any subscription.
            self.subscriptions.setdefault(self._retry_topic, ("*", None, now_ms()))
        self._wake_rebalance(heartbeat=True)
        if selector.is_tag:
            return Subscription(topic, selector.expression, _applied)
        return Subscription(topic, selector.expression, lambda: self._check_running(topic))

    async def _check_running(self, topic: str) -> None:
        if self._outer is not None:
            try:
                await self._check_in_broker(topic)
            except MQClientError:
                self.unsubscribe(topic)  # refused: not pulled with an expression that fails
                raise

    async def _check_in_broker(self, topic: str) -> None:
        for data in self._subscription_data():
            if data.topic == topic:
                await self.instance.check_client_in_broker(self.group, data)

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic`` (its queues are dropped at the next rebalance)."""
        self.subscriptions.pop(topic, None)
        self.expression_types.pop(topic, None)
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
            for topic in list(self.expression_types):
                # A broker must take each SQL92 selector before the consumer starts.
                await self._check_in_broker(topic)
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
        # group is not exited inside the shield below: cancel scopes must nest.) A cancellation
        # from outside still persists offsets and closes the instance.
        try:
            await self._outer.__aexit__(None, None, None)
        finally:
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
                expression_type=self.expression_types.get(topic, TAG),
            )
            for topic, (expression, tags, version) in sorted(self.subscriptions.items())
        ]

    def consumer_ids_changed(self) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED from a broker: rebalance at once."""
        self._wake_rebalance()

    def reset_offset(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET from a broker: restart the queues at the new offsets.

        The broker has committed them already. Each queue held here stops pulling and its
        local offset becomes the new one, so no commit undoes the reset; the rebalance woken
        now drops the queue and starts it again from the broker's offset, as RocketMQ's
        resetOffset does.
        """
        for queue, offset in offsets.items():
            pq = self._process_queues.get(queue)
            if pq is not None:
                pq.dropped = True
                if pq.pull_scope is not None:
                    pq.pull_scope.cancel()
                pq.arrived.set()
            self.offset_store.update(queue, offset)
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


async def _applied() -> None:
    """What awaiting a push consumer's `Subscription` does: nothing, it is applied already."""
