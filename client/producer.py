"""The producer: sync, async, oneway, batch and ordered sends with retries on another broker.

    async with Producer("pg", namesrv_addr="127.0.0.1:9876") as producer:
        result = await producer.send(Message("Orders", b"...", tags="TagA", keys="o-1"))
        handle = await producer.send_async(Message("Orders", b"..."), callback=on_sent)
        result = await handle                     # or let the callback take it

Every message gets a client id (UNIQ_KEY); bodies of 4 KiB or more are zlib-compressed (level
5, sysflag bit 0x1) as the Java and C++ clients do; requests use SEND_MESSAGE_V2's short
header keys. A failed sync or async send is retried ``retry_times_when_send_failed`` times
(default 2) on a queue of another broker when the topic has one, after a prompt (rate-limited)
re-read of the topic's route, so a master elected elsewhere is used as soon as it registers; with
``send_latency_fault_enable`` slow and failing brokers are avoided for a while (fault.py).
Unknown topics are sent with TBW102's route so the broker auto-creates them (sheet 8.4); those
queues serve until the next route poll, so every broker offering TBW102 gets sends and creates
the topic, not only the first one to register it.
The transactional producer builds on this class (transaction.py).
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import attrs

from client.fault import MQFaultStrategy
from client.instance import DEFAULT_TOPIC, ClientInstance, publish_queues
from client.message import Message, MQClientError, SendResult, SendStatus
from client.options import ConnectionOptions, connection_options
from client.pending import Pending
from client.request_reply import RequestCallback, RequestHandle, is_reply
from protocol.bodies import MessageQueue, TopicRouteData
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.headers import (
    MSG_REGION,
    TRACE_ON,
    decode_send_response,
    send_v2_fields,
)
from protocol.message import (
    MAX_TOPIC_BYTES,
    MessageConst,
    MessageExt,
    MessageSysFlag,
    compress_body,
    create_uniq_id,
    encode_batch_tuples,
    properties_to_string,
    tag_hash_code,
)

log = logging.getLogger("boltmq.client")

MessageQueueSelector = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]
"""Picks the queue of an ordered send from the topic's writable queues."""
SendCallback = Callable[[SendResult | None, BaseException | None], object]
"""Called once per async send with ``(result, None)`` or ``(None, error)``."""

_SEND_STATUS = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}
# Broker refusals worth another try elsewhere (the Java producer's retry list).
_RETRY_CODES = frozenset({
    ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SYSTEM_ERROR,
    ResponseCode.SYSTEM_BUSY, ResponseCode.NO_PERMISSION, ResponseCode.NO_BUYER_ID,
    ResponseCode.NOT_IN_CURRENT_UNIT,
})  # fmt: skip


def select_by_hash(queues: Sequence[MessageQueue], message: Message, arg: Any) -> MessageQueue:
    """RocketMQ's SelectMessageQueueByHash: Java hashCode of the sharding key, modulo."""
    key = str(arg)
    return queues[abs(tag_hash_code(key)) % len(queues)]


@attrs.frozen
class ProducerStatistics:
    """Counters of one producer: sends that succeeded, attempts that failed, async sends."""

    sends_ok: int
    failed_attempts: int
    retries: int
    async_started: int
    async_in_flight: int


class SendHandle(Pending[SendResult]):
    """An async send under way: ``await handle`` gives its `SendResult` or raises its error."""

    __slots__ = ()


class Producer:
    """A producer group member; use as ``async with Producer(group, namesrv_addr=...)``."""

    def __init__(
        self,
        group: str,
        *,
        namesrv_addr: str | Sequence[str] | None = None,
        instance: ClientInstance | None = None,
        send_msg_timeout: float = 3.0,
        retry_times_when_send_failed: int = 2,
        compress_msg_body_over_howmuch: int = 4096,
        compress_level: int = 5,
        default_topic_queue_nums: int = 4,
        max_message_size: int = 4 * 1024 * 1024,
        send_latency_fault_enable: bool = False,
        max_async_in_flight: int = 10000,
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
        if max_async_in_flight < 1:
            raise ValueError(f"max_async_in_flight must be at least 1, not {max_async_in_flight}")
        self.group = group
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
            options=options,
        )
        self.send_msg_timeout = send_msg_timeout
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.compress_msg_body_over_howmuch = compress_msg_body_over_howmuch
        self.compress_level = compress_level
        self.default_topic_queue_nums = default_topic_queue_nums
        self.max_message_size = max_message_size
        self.max_async_in_flight = max_async_in_flight
        #: Queue choice and broker avoidance (RocketMQ's MQFaultStrategy); see fault.py.
        self.fault_strategy = MQFaultStrategy(enabled=send_latency_fault_enable)
        #: Per topic: the route its queues come from, the writable queues, and when to ask the
        #: registry again. A topic no registry knows yet has no route: its queues are TBW102's.
        self._publish: dict[str, tuple[TopicRouteData | None, list[MessageQueue], float]] = {}
        #: Topics this producer has sent requests to (its heartbeat has reached their brokers).
        self._requested_topics: set[str] = set()
        self._load_locks: dict[str, anyio.Lock] = {}
        #: Topic -> when a topic without a route may next fall back to TBW102 after an error.
        self._fallback_at: dict[str, float] = {}
        self._counter = itertools.count()
        self._task_group: anyio.abc.TaskGroup | None = None
        self._async_room: anyio.Semaphore | None = None
        self._async_pending: set[SendHandle] = set()
        self._counters = dict.fromkeys(("sends_ok", "failed_attempts", "retries",
                                        "async_started"), 0)  # fmt: skip

    @property
    def send_latency_fault_enable(self) -> bool:
        """Whether slow or failing brokers are avoided when choosing a queue (off by default)."""
        return self.fault_strategy.enabled

    @send_latency_fault_enable.setter
    def send_latency_fault_enable(self, value: bool) -> None:
        self.fault_strategy.enabled = value

    async def __aenter__(self) -> Producer:
        if self._own_instance:
            await self.instance.__aenter__()
        self._async_room = anyio.Semaphore(self.max_async_in_flight)
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        self.instance.producer_groups.add(self.group)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._task_group is not None:
                if exc is not None:
                    # Leaving on an error: pending async sends are cancelled (each handle and
                    # callback gets an MQClientError saying so). A normal exit waits for them.
                    self._task_group.cancel_scope.cancel()
                task_group, self._task_group = self._task_group, None
                # The body's own exception is not handed to the task group (it would come
                # back wrapped in an ExceptionGroup); async sends never raise into it.
                await task_group.__aexit__(None, None, None)
        finally:
            self.instance.producer_groups.discard(self.group)
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.send_msg_timeout):
                await self.instance.unregister(self.group, None)
            if self._own_instance:
                await self.instance.__aexit__(exc_type, exc, tb)

    # -- public sends -------------------------------------------------------------------------

    async def send(
        self,
        message: Message,
        *,
        queue: MessageQueue | None = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send and wait for the broker's answer; retried on another broker after a failure."""
        result, _ = await self._send_message(message, client_id(message), 0, queue, timeout)
        return result

    async def request(self, message: Message, timeout: float = 3.0) -> MessageExt:
        """Send ``message`` as a request and return its reply (request-reply, RocketMQ 4.6+).

        A responder consuming the topic answers with `create_reply_message(request, body)`
        and an ordinary send; the broker pushes that reply to this client. Raises
        `RequestTimeout` when no reply comes within ``timeout`` seconds (the send included),
        or the send's error."""
        deadline = anyio.current_time() + timeout
        replies = self.instance.replies
        request, correlation_id = replies.prepare(message, timeout)
        if request.topic not in self._requested_topics:
            # The brokers push replies to clients they have a heartbeat from: the topic's
            # brokers must have this producer's before the first reply comes.
            await self._publish_queues(request.topic)
            await self.instance.send_heartbeat_to_all_brokers()
            self._requested_topics.add(request.topic)
        waiter = replies.expect(correlation_id)
        try:
            await self.send(request, timeout=max(0.001, deadline - anyio.current_time()))
        except BaseException:
            replies.forget(correlation_id)
            raise
        return await replies.wait(correlation_id, waiter, deadline)

    async def request_async(
        self,
        message: Message,
        callback: RequestCallback | None = None,
        *,
        timeout: float = 3.0,
    ) -> RequestHandle:
        """Start `request` in the producer's task group and return its `RequestHandle` at once
        (RocketMQ's request with a RequestCallback): ``await handle`` gives the reply, and
        ``callback(reply, error)``, a plain function, is called once when it ends."""
        if self._task_group is None:
            raise RuntimeError("request_async needs the producer open: 'async with Producer(...)'")
        handle = RequestHandle(message)
        self._task_group.start_soon(self._run_request, handle, callback, timeout)
        return handle

    async def _run_request(
        self, handle: RequestHandle, callback: RequestCallback | None, timeout: float
    ) -> None:
        reply: MessageExt | None = None
        error: BaseException | None = None
        try:
            reply = await self.request(handle.message, timeout)
        except Exception as exc:
            error = exc
        except anyio.get_cancelled_exc_class():
            error = MQClientError(
                ResponseCode.SYSTEM_ERROR,
                f"request to {handle.message.topic} cancelled: the producer {self.group} closed "
                "before its reply came",
            )
            raise
        finally:
            handle._finish(reply, error)
            if callback is not None:
                try:
                    callback(reply, error)
                except Exception:
                    log.exception("request callback %r of producer %s failed", callback, self.group)

    async def send_async(
        self,
        message: Message,
        callback: SendCallback | None = None,
        *,
        queue: MessageQueue | None = None,
        timeout: float | None = None,
    ) -> SendHandle:
        """Start a send in the producer's task group and return its `SendHandle` at once.

        ``await handle`` gives the `SendResult` (or raises); ``callback(result, error)``, a
        plain function, is called once when the send ends, with retries done as for `send`.
        A bad message raises here. Waits only when ``max_async_in_flight`` sends are pending.
        """
        self._check(message)
        if self._task_group is None or self._async_room is None:
            raise RuntimeError("send_async needs the producer open: 'async with Producer(...)'")
        await self._async_room.acquire()
        handle = SendHandle(message)
        self._async_pending.add(handle)
        self._counters["async_started"] += 1
        self._task_group.start_soon(self._run_async_send, handle, callback, queue, timeout)
        return handle

    async def send_orderly(
        self,
        message: Message,
        sharding_key: Any,
        *,
        selector: MessageQueueSelector = select_by_hash,
        timeout: float | None = None,
    ) -> SendResult:
        """Send to the queue ``selector`` picks for ``sharding_key`` (same key, same queue)."""
        queues = await self._publish_queues(message.topic)
        target = selector(queues, message, sharding_key)
        return await self.send(message, queue=target, timeout=timeout)

    async def send_oneway(self, message: Message, *, queue: MessageQueue | None = None) -> None:
        """Send without waiting for an answer (no result, no retry)."""
        self._check(message)
        body, sys_flag = self._body(message)
        props = message.wire_properties()
        props[MessageConst.UNIQ_KEY] = client_id(message)
        target = queue or await self._select(message.topic, None)
        fields = self._header(message.topic, target, sys_flag, message.flag,
                              properties_to_string(props), batch=False)  # fmt: skip
        request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, body, oneway=True)
        address = await self.instance.find_master(target)
        await self.instance.remoting.invoke_oneway(address, request)

    async def send_batch(
        self,
        messages: Sequence[Message],
        *,
        queue: MessageQueue | None = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send messages of one topic as one SEND_BATCH_MESSAGE (no delay, not compressed)."""
        if not messages:
            raise ValueError("send_batch needs at least one message")
        topic = messages[0].topic
        self._check(messages[0])
        elements: list[tuple[int, bytes, str]] = []
        ids: list[str] = []
        for message in messages:
            if message.topic != topic:
                raise ValueError("all messages of a batch must have the same topic")
            self._check_body(message)
            if message.delay_level > 0:
                raise ValueError("a batch cannot carry delayed messages")
            uniq_id = client_id(message)
            ids.append(uniq_id)
            elements.append((message.flag, message.body, properties_with_id(message, uniq_id)))
        body = encode_batch_tuples(elements)
        if len(body) > self.max_message_size:
            raise ValueError(f"batch of {len(body)} bytes exceeds {self.max_message_size}")
        result, _ = await self._send_with_retries(
            RequestCode.SEND_BATCH_MESSAGE, topic, 0, body, 0, "", ",".join(ids), queue,
            timeout, batch=True,
        )  # fmt: skip
        return result

    async def queues(self, topic: str) -> list[MessageQueue]:
        """The writable queues of ``topic`` this producer sends to."""
        return list(await self._publish_queues(topic))

    def statistics(self) -> ProducerStatistics:
        """A snapshot of this producer's counters."""
        return ProducerStatistics(**self._counters, async_in_flight=len(self._async_pending))

    # -- internals ----------------------------------------------------------------------------

    async def _run_async_send(
        self,
        handle: SendHandle,
        callback: SendCallback | None,
        queue: MessageQueue | None,
        timeout: float | None,
    ) -> None:
        result: SendResult | None = None
        error: BaseException | None = None
        try:
            result = await self.send(handle.message, queue=queue, timeout=timeout)
        except Exception as exc:
            error = exc
        except anyio.get_cancelled_exc_class():
            error = MQClientError(
                ResponseCode.SYSTEM_ERROR,
                f"send to {handle.message.topic} cancelled: the producer {self.group} closed "
                "before it finished",
            )
            raise
        finally:
            # Runs on cancellation too, so no handle is left unanswered.
            assert self._async_room is not None
            self._async_room.release()
            self._async_pending.discard(handle)
            handle._finish(result, error)
            if callback is not None:
                try:
                    callback(result, error)
                except Exception:
                    log.exception(
                        "send callback %r of producer %s failed (the send itself %s)",
                        callback, self.group, "failed" if error else "succeeded",
                    )  # fmt: skip

    async def _send_message(
        self,
        message: Message,
        uniq_id: str,
        extra_sys_flag: int,
        queue: MessageQueue | None,
        timeout: float | None,
    ) -> tuple[SendResult, str | None]:
        """One message with client id ``uniq_id``: (result, the broker's transactionId)."""
        self._check(message)
        body, sys_flag = self._body(message)
        # A reply (create_reply_message) goes to the broker's reply handler, which pushes it to
        # its requester.
        code = RequestCode.SEND_MESSAGE_V2
        if is_reply(message):
            code = RequestCode.SEND_REPLY_MESSAGE_V2
        return await self._send_with_retries(
            code, message.topic, message.flag, body,
            sys_flag | extra_sys_flag, properties_with_id(message, uniq_id), uniq_id, queue,
            timeout,
        )  # fmt: skip

    async def _send_with_retries(
        self,
        code: int,
        topic: str,
        flag: int,
        body: bytes,
        sys_flag: int,
        props: str,
        msg_id: str,
        queue: MessageQueue | None,
        timeout: float | None,
        *,
        batch: bool = False,
    ) -> tuple[SendResult, str | None]:
        attempts = 1 if queue is not None else 1 + self.retry_times_when_send_failed
        last_broker: str | None = None
        errors: list[str] = []
        last_error: RemotingError | None = None
        fault = self.fault_strategy
        for attempt in range(attempts):
            if attempt:
                self._counters["retries"] += 1
            target = queue or await self._select(topic, last_broker)
            started = time.monotonic()
            try:
                answer = await self._send_to(
                    code, target, flag, body, sys_flag, props, msg_id, timeout, batch=batch
                )
            except RemotingError as exc:
                self._counters["failed_attempts"] += 1
                elapsed_ms = (time.monotonic() - started) * 1000
                if isinstance(exc, MQClientError) and exc.code not in _RETRY_CODES:
                    # The message's own fault (too big, illegal, ...): the broker is fine.
                    fault.update(target.broker_name, elapsed_ms, isolation=False)
                    raise
                fault.update(target.broker_name, elapsed_ms, isolation=True)
                errors.append(f"{target.broker_name}/{target.queue_id}: {exc}")
                last_broker, last_error = target.broker_name, exc
                await self._refresh_after_error(topic)
                continue
            fault.update(target.broker_name, (time.monotonic() - started) * 1000, isolation=False)
            self._counters["sends_ok"] += 1
            return answer
        # Like Java's producer, the last broker refusal's code survives the retries (a caller
        # can tell NO_PERMISSION from a broker that did not answer).
        refused = last_error.code if isinstance(last_error, MQClientError) else None
        raise MQClientError(
            ResponseCode.SYSTEM_ERROR if refused is None else refused,
            f"{'batch ' if batch else ''}send to {topic} failed {attempts} time(s): "
            + "; ".join(errors),
        ) from last_error

    def _check(self, message: Message) -> None:
        topic = message.topic
        if not topic or len(topic.encode()) > MAX_TOPIC_BYTES:
            raise ValueError(f"topic {topic!r} must be 1..{MAX_TOPIC_BYTES} bytes")
        self._check_body(message)

    def _check_body(self, message: Message) -> None:
        if not message.body:
            raise ValueError("message body is empty")
        if len(message.body) > self.max_message_size:
            raise ValueError(
                f"message body of {len(message.body)} bytes exceeds {self.max_message_size}"
            )

    def _body(self, message: Message) -> tuple[bytes, int]:
        body = message.body
        if len(body) >= self.compress_msg_body_over_howmuch:
            return compress_body(body, self.compress_level), MessageSysFlag.COMPRESSED
        return body, 0

    def _header(
        self, topic: str, queue: MessageQueue, sys_flag: int, flag: int, props: str, *, batch: bool
    ) -> dict[str, str]:
        """SEND_MESSAGE_V2's ext fields (one-letter keys) for one send to ``queue``."""
        return send_v2_fields(
            self.group, topic, DEFAULT_TOPIC, self.default_topic_queue_nums, queue.queue_id,
            sys_flag, time.time_ns() // 1_000_000, flag, props or None, batch=batch,
        )  # fmt: skip

    async def _send_to(
        self,
        code: int,
        queue: MessageQueue,
        flag: int,
        body: bytes,
        sys_flag: int,
        props: str,
        msg_id: str,
        timeout: float | None,
        *,
        batch: bool = False,
    ) -> tuple[SendResult, str | None]:
        fields = self._header(queue.topic, queue, sys_flag, flag, props, batch=batch)
        request = RemotingCommand.request(code, fields, body)
        address = self.instance.master_address(queue.broker_name) or (
            await self.instance.find_master(queue)
        )
        response = await self.instance.invoke_broker(
            address, request, timeout or self.send_msg_timeout
        )
        status = _SEND_STATUS.get(response.code)  # type: ignore[call-overload]
        if status is None:
            raise MQClientError(
                response.code, f"broker {queue.broker_name} refused the send: {response.remark}"
            )
        answer = decode_send_response(response.ext_fields)
        if answer.queue_id != queue.queue_id:
            # A queue is frozen: the one sent to serves unless the broker stored elsewhere.
            queue = MessageQueue(
                topic=queue.topic, broker_name=queue.broker_name, queue_id=answer.queue_id
            )
        result = SendResult(
            status=status,
            msg_id=msg_id,
            offset_msg_id=answer.msg_id,
            queue=queue,
            queue_offset=answer.queue_offset,
            region_id=response.field(MSG_REGION),
            trace_on=response.field(TRACE_ON, "true") != "false",
        )
        return result, answer.transaction_id

    async def _publish_queues(self, topic: str) -> list[MessageQueue]:
        cached = self._publish.get(topic)
        route = self.instance.routes.get(topic)
        if route is not None and (cached is None or cached[0] is not route):
            # The instance refreshed the route (every 30 s or after an error): rebuild.
            queues = publish_queues(topic, route)
            if queues:
                self._publish[topic] = (route, queues, math.inf)
                return queues
        if route is None and cached is not None and time.monotonic() < cached[2]:
            return cached[1]  # TBW102's queues, until the registry is asked again
        if cached is None or route is None:
            return await self._load_publish_queues(topic)
        return cached[1]

    async def _load_publish_queues(self, topic: str) -> list[MessageQueue]:
        seen = self._publish.get(topic)
        lock = self._load_locks.get(topic)
        if lock is None:
            lock = self._load_locks[topic] = anyio.Lock()
        async with lock:
            current = self._publish.get(topic)
            if current is not None and current is not seen:
                # Another sender loaded the queues while this one waited: one lookup serves
                # all. A second lookup of a new topic could find the route the first broker
                # to store a message registered, naming that broker alone.
                return current[1]
            return await self._load_publish_queues_now(topic)

    async def _load_publish_queues_now(self, topic: str) -> list[MessageQueue]:
        route = await self.instance.update_route(topic)
        if route is not None:
            queues = publish_queues(topic, route)
        else:
            # Unknown topic: send with TBW102's brokers; the broker creates the topic.
            template = await self.instance.update_route(DEFAULT_TOPIC)
            if template is None:
                raise MQClientError(
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"topic {topic} has no route and no broker offers {DEFAULT_TOPIC}",
                )
            queues = publish_queues(topic, template, cap=self.default_topic_queue_nums)
        if not queues:
            raise MQClientError(
                ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} has no writable queue"
            )
        if route is None:
            # Keep TBW102's queues until the next route poll, as the Java producer keeps them
            # until its periodic refresh. The first broker to store a message of the new topic
            # registers it at once; taking the registry's route then would name that broker
            # alone, the others would never get a send, so never create the topic, and every
            # later send would go to that one broker.
            renew_at = time.monotonic() + self.instance.poll_name_server_interval
            self._publish[topic] = (None, queues, renew_at)
        else:
            self._publish[topic] = (route, queues, math.inf)
        return queues

    async def _refresh_after_error(self, topic: str) -> None:
        # A connection refused, a timeout or SERVICE_NOT_AVAILABLE may mean the group's master
        # died or lost its role (controller mode elects another, which registers as broker
        # id 0): the route is re-read at once, shared with concurrent senders and at most once
        # per route_refresh_min_interval, so the retry (and the next sends) go to the new master
        # about as soon as it registers. The regular poll stays as it is.
        try:
            route = await self.instance.refresh_route_soon(topic)
            now = time.monotonic()
            if route is None and now >= self._fallback_at.get(topic, 0.0):
                # The topic has no route (its only group has no master now): TBW102's queues,
                # whose brokers may hold it too, as a first send of a new topic does.
                self._fallback_at[topic] = now + self.instance.route_refresh_min_interval
                await self._load_publish_queues(topic)
        except RemotingError:
            pass  # the next attempt reports what is wrong

    async def _select(self, topic: str, avoid_broker: str | None) -> MessageQueue:
        cached = self._publish.get(topic)
        route = None if cached is None else cached[0]
        if route is not None and route is self.instance.routes.get(topic):
            queues = cached[1]  # type: ignore[index]  # the usual case, no other coroutine
        else:
            queues = await self._publish_queues(topic)
        return self.fault_strategy.select(queues, next(self._counter), avoid_broker)


_PLAIN_PROPERTIES = {
    True: f"{MessageConst.WAIT}\x01true\x02{MessageConst.UNIQ_KEY}\x01",
    False: f"{MessageConst.WAIT}\x01false\x02{MessageConst.UNIQ_KEY}\x01",
}


def properties_with_id(message: Message, uniq_id: str) -> str:
    """The properties string a send carries: the message's wire properties plus UNIQ_KEY."""
    if (
        not message.properties
        and not message.tags
        and not message.keys
        and message.delay_level <= 0
        and message.deliver_time_ms is None
    ):
        # A plain message: only WAIT and UNIQ_KEY, in that order (no dict, no join).
        return _PLAIN_PROPERTIES[bool(message.wait_store_msg_ok)] + uniq_id
    props = message.wire_properties()
    props[MessageConst.UNIQ_KEY] = uniq_id
    return properties_to_string(props)


def client_id(message: Message) -> str:
    """The message's client id (UNIQ_KEY): the one it carries (a copy keeps its original's,
    as RocketMQ's producers keep a set id), else a new one."""
    return message.properties.get(MessageConst.UNIQ_KEY) or create_uniq_id()
