"""The producer: sync, oneway, batch and ordered sends with retries on another broker.

    async with Producer("pg", namesrv_addr="127.0.0.1:9876") as producer:
        result = await producer.send(Message("Orders", b"...", tags="TagA", keys="o-1"))

Every message gets a client id (UNIQ_KEY); bodies of 4 KiB or more are zlib-compressed (level
5, sysflag bit 0x1) as the Java and C++ clients do; requests use SEND_MESSAGE_V2's short
header keys. A failed sync send is retried ``retry_times_when_send_failed`` times (default 2)
on a queue of another broker when the topic has one. Unknown topics are sent with TBW102's
route so the broker auto-creates them (sheet 8.4).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

import anyio

from actors.client.instance import DEFAULT_TOPIC, ClientInstance, publish_queues
from actors.client.message import Message, MQClientError, SendResult, SendStatus
from protocol.bodies import MessageQueue, TopicRouteData
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.headers import (
    MSG_REGION,
    TRACE_ON,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    decode_header,
    encode_send_header_v2,
)
from protocol.message import (
    MAX_TOPIC_BYTES,
    BatchElement,
    MessageConst,
    MessageSysFlag,
    compress_body,
    create_uniq_id,
    encode_batch,
    properties_to_string,
    tag_hash_code,
)

MessageQueueSelector = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]
"""Picks the queue of an ordered send from the topic's writable queues."""

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
    ) -> None:
        if instance is None and namesrv_addr is None:
            raise ValueError("give namesrv_addr (or a ClientInstance to share)")
        self.group = group
        self._own_instance = instance is None
        self.instance = instance or ClientInstance(namesrv_addr or "")
        self.send_msg_timeout = send_msg_timeout
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.compress_msg_body_over_howmuch = compress_msg_body_over_howmuch
        self.compress_level = compress_level
        self.default_topic_queue_nums = default_topic_queue_nums
        self.max_message_size = max_message_size
        self._publish: dict[str, tuple[TopicRouteData | None, list[MessageQueue]]] = {}
        self._counter = itertools.count()

    async def __aenter__(self) -> Producer:
        if self._own_instance:
            await self.instance.__aenter__()
        self.instance.producer_groups.add(self.group)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
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
        self._check(message)
        body, sys_flag = self._body(message)
        props = message.wire_properties()
        uniq_id = create_uniq_id()
        props[MessageConst.UNIQ_KEY] = uniq_id
        attempts = 1 if queue is not None else 1 + self.retry_times_when_send_failed
        last_broker: str | None = None
        errors: list[str] = []
        for _ in range(attempts):
            target = queue or await self._select(message.topic, last_broker)
            try:
                return await self._send_to(
                    RequestCode.SEND_MESSAGE_V2, target, message, body, sys_flag,
                    properties_to_string(props), uniq_id, timeout,
                )  # fmt: skip
            except RemotingError as exc:
                if isinstance(exc, MQClientError) and exc.code not in _RETRY_CODES:
                    raise
                errors.append(f"{target.broker_name}/{target.queue_id}: {exc}")
                last_broker = target.broker_name
                await self._refresh_after_error(message.topic)
        raise MQClientError(
            ResponseCode.SYSTEM_ERROR,
            f"send to {message.topic} failed {attempts} time(s): " + "; ".join(errors),
        )

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
        props[MessageConst.UNIQ_KEY] = create_uniq_id()
        target = queue or await self._select(message.topic, None)
        header = self._header(message.topic, target, sys_flag, message.flag,
                              properties_to_string(props), batch=False)  # fmt: skip
        request = RemotingCommand.request(
            RequestCode.SEND_MESSAGE_V2, encode_send_header_v2(header), body, oneway=True
        )
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
        elements: list[BatchElement] = []
        ids: list[str] = []
        for message in messages:
            self._check(message)
            if message.topic != topic:
                raise ValueError("all messages of a batch must have the same topic")
            if message.delay_level > 0:
                raise ValueError("a batch cannot carry delayed messages")
            props = message.wire_properties()
            uniq_id = create_uniq_id()
            props[MessageConst.UNIQ_KEY] = uniq_id
            ids.append(uniq_id)
            elements.append(BatchElement(message.flag, message.body, properties_to_string(props)))
        body = encode_batch(elements)
        if len(body) > self.max_message_size:
            raise ValueError(f"batch of {len(body)} bytes exceeds {self.max_message_size}")
        attempts = 1 if queue is not None else 1 + self.retry_times_when_send_failed
        last_broker: str | None = None
        errors: list[str] = []
        for _ in range(attempts):
            target = queue or await self._select(topic, last_broker)
            try:
                return await self._send_to(
                    RequestCode.SEND_BATCH_MESSAGE, target, None, body, 0, "", ",".join(ids),
                    timeout, batch=True,
                )  # fmt: skip
            except RemotingError as exc:
                if isinstance(exc, MQClientError) and exc.code not in _RETRY_CODES:
                    raise
                errors.append(f"{target.broker_name}/{target.queue_id}: {exc}")
                last_broker = target.broker_name
                await self._refresh_after_error(topic)
        raise MQClientError(
            ResponseCode.SYSTEM_ERROR,
            f"batch send to {topic} failed {attempts} time(s): " + "; ".join(errors),
        )

    async def queues(self, topic: str) -> list[MessageQueue]:
        """The writable queues of ``topic`` this producer sends to."""
        return list(await self._publish_queues(topic))

    # -- internals ----------------------------------------------------------------------------

    def _check(self, message: Message) -> None:
        topic = message.topic
        if not topic or len(topic.encode()) > MAX_TOPIC_BYTES:
            raise ValueError(f"topic {topic!r} must be 1..{MAX_TOPIC_BYTES} bytes")
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
    ) -> SendMessageRequestHeader:
        return SendMessageRequestHeader(
            producer_group=self.group,
            topic=topic,
            default_topic=DEFAULT_TOPIC,
            default_topic_queue_nums=self.default_topic_queue_nums,
            queue_id=queue.queue_id,
            sys_flag=sys_flag,
            born_timestamp=time.time_ns() // 1_000_000,
            flag=flag,
            properties=props or None,
            reconsume_times=0,
            unit_mode=False,
            batch=batch,
        )

    async def _send_to(
        self,
        code: int,
        queue: MessageQueue,
        message: Message | None,
        body: bytes,
        sys_flag: int,
        props: str,
        msg_id: str,
        timeout: float | None,
        *,
        batch: bool = False,
    ) -> SendResult:
        flag = 0 if message is None else message.flag
        header = self._header(queue.topic, queue, sys_flag, flag, props, batch=batch)
        request = RemotingCommand.request(code, encode_send_header_v2(header), body)
        address = await self.instance.find_master(queue)
        response = await self.instance.invoke_broker(
            address, request, timeout or self.send_msg_timeout
        )
        status = _SEND_STATUS.get(response.code)  # type: ignore[call-overload]
        if status is None:
            raise MQClientError(
                response.code, f"broker {queue.broker_name} refused the send: {response.remark}"
            )
        answer = decode_header(SendMessageResponseHeader, response.ext_fields)
        return SendResult(
            status=status,
            msg_id=msg_id,
            offset_msg_id=answer.msg_id,
            queue=MessageQueue(
                topic=queue.topic, broker_name=queue.broker_name, queue_id=answer.queue_id
            ),
            queue_offset=answer.queue_offset,
            region_id=response.field(MSG_REGION),
            trace_on=response.field(TRACE_ON, "true") != "false",
        )

    async def _publish_queues(self, topic: str) -> list[MessageQueue]:
        cached = self._publish.get(topic)
        route = self.instance.routes.get(topic)
        if route is not None and (cached is None or cached[0] is not route):
            # The instance refreshed the route (every 30 s or after an error): rebuild.
            queues = publish_queues(topic, route)
            if queues:
                self._publish[topic] = (route, queues)
                return queues
        if cached is None or route is None:
            return await self._load_publish_queues(topic)
        return cached[1]

    async def _load_publish_queues(self, topic: str) -> list[MessageQueue]:
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
        self._publish[topic] = (self.instance.routes.get(topic), queues)
        return queues

    async def _refresh_after_error(self, topic: str) -> None:
        try:
            await self._load_publish_queues(topic)
        except RemotingError:
            pass  # the next attempt reports what is wrong

    async def _select(self, topic: str, avoid_broker: str | None) -> MessageQueue:
        queues = await self._publish_queues(topic)
        start = next(self._counter)
        if avoid_broker is not None:
            for step in range(len(queues)):
                candidate = queues[(start + step) % len(queues)]
                if candidate.broker_name != avoid_broker:
                    return candidate
        return queues[start % len(queues)]
