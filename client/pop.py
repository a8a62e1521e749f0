"""RocketMQ 5's pop consumption, client side: `PopClient` speaks the broker's pop codes.

A pop hands out up to 32 messages of a group's topic and hides them from other pops for an
invisible time; each comes with a receipt handle (`ReceiptHandle`, the broker's
space-separated *extra info*) that acks it, changes its invisible time or sends it to the
dead-letter queue. A message not acked in time comes back with its delivery attempt one
higher; after the group's retryMaxTimes it goes to ``%DLQ%<group>``.

    async with ClientInstance("127.0.0.1:9876") as instance:
        pop = instance.pop_client()
        result = await pop.pop(broker_addr, "OrderConsumers", "Orders", poll_ms=20_000)
        for popped in result.messages:
            handle(popped.message)
            await pop.ack(popped, group="OrderConsumers", topic="Orders")

`client.simple_consumer.SimpleConsumer` is the high-level shape (RocketMQ 5's SimpleConsumer).
"""

from __future__ import annotations

import base64
import enum
import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from client.message import MQClientError
from protocol import names
from protocol.bodies import MessageQueue
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    ConsumerSendMsgBackRequestHeader,
    NotificationRequestHeader,
    NotificationResponseHeader,
    PopMessageRequestHeader,
    decode_header,
    encode_header,
)
from protocol.message import MessageConst, MessageExt, decode_records

if TYPE_CHECKING:
    from client.instance import ClientInstance

__all__ = [
    "INIT_MODE_MAX",
    "INIT_MODE_MIN",
    "MessageQueueAssignment",
    "PopClient",
    "PopResult",
    "PopStatus",
    "PoppedMessage",
    "ReceiptHandle",
]

#: The property a popped message carries its receipt handle in (RocketMQ's POP_CK).
POP_CK = "POP_CK"
#: ConsumeInitMode: a group's first pop of a queue starts at its first or at its next offset.
INIT_MODE_MIN = 0
INIT_MODE_MAX = 1
#: The revive queue id of a FIFO pop's handles (RocketMQ's POP_ORDER_REVIVE_QUEUE).
ORDER_REVIVE_QUEUE_ID = 999
# A receipt handle's topic-type field: the topic itself, its retry topic, the retry's v2 form.
_NORMAL, _RETRY, _RETRY_V2 = "0", "1", "2"


@attrs.frozen
class ReceiptHandle:
    """A popped message's receipt handle: ``startOffset popTime invisibleTime reviveQid
    topicType brokerName queueId offset`` and, in RocketMQ 5's proxy form, a ninth field,
    the message's commit-log offset."""

    start_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    topic_type: str
    broker_name: str
    queue_id: int
    offset: int
    commit_log_offset: int = -1

    @classmethod
    def parse(cls, text: str) -> ReceiptHandle:
        """The handle ``text`` spells; MQClientError(INVALID_PARAMETER) saying what is wrong."""
        fields = text.split(" ") if isinstance(text, str) else []
        if len(fields) not in (8, 9) or fields[4] not in (_NORMAL, _RETRY, _RETRY_V2):
            raise MQClientError(
                ResponseCode.INVALID_PARAMETER,
                f"malformed receipt handle {text!r}: expected 'startOffset popTime "
                "invisibleTime reviveQid topicType(0|1|2) brokerName queueId offset "
                "[commitLogOffset]'",
            )
        try:
            start, pop_time, invisible, revive_qid = (int(f) for f in fields[:4])
            queue_id, offset = int(fields[6]), int(fields[7])
            commit_log_offset = int(fields[8]) if len(fields) == 9 else -1
        except ValueError:
            raise MQClientError(
                ResponseCode.INVALID_PARAMETER,
                f"malformed receipt handle {text!r}: a number field is not a number",
            ) from None
        return cls(
            start,
            pop_time,
            invisible,
            revive_qid,
            fields[4],
            fields[5],
            queue_id,
            offset,
            commit_log_offset,
        )

    @property
    def extra_info(self) -> str:
        """The eight-field form brokers take (ACK_MESSAGE's and CHANGE_MESSAGE_INVISIBLETIME's
        extraInfo)."""
        return (
            f"{self.start_offset} {self.pop_time} {self.invisible_time} {self.revive_qid} "
            f"{self.topic_type} {self.broker_name} {self.queue_id} {self.offset}"
        )

    def encode(self) -> str:
        """The handle as text: the eight fields, and the commit-log offset when known."""
        if self.commit_log_offset < 0:
            return self.extra_info
        return f"{self.extra_info} {self.commit_log_offset}"

    @property
    def invisible_until_ms(self) -> int:
        """When the message becomes visible again unless acked (epoch ms)."""
        return self.pop_time + self.invisible_time

    @property
    def order(self) -> bool:
        """Whether a FIFO pop handed it out."""
        return self.revive_qid == ORDER_REVIVE_QUEUE_ID

    def real_topic(self, group: str, topic: str) -> str:
        """The topic the message was read from: ``topic`` or the group's pop retry topic."""
        if topic.startswith(names.RETRY_GROUP_TOPIC_PREFIX):
            return topic
        if self.topic_type == _RETRY:
            return names.pop_retry_topic(group, topic)
        if self.topic_type == _RETRY_V2:
            return names.pop_retry_topic_v2(group, topic)
        return topic


@attrs.frozen
class PoppedMessage:
    """One popped message, its receipt handle and where it came from."""

    message: MessageExt
    receipt_handle: str
    broker_name: str
    broker_addr: str
    queue_id: int
    queue_offset: int
    delivery_attempt: int
    invisible_until_ms: int

    @property
    def handle(self) -> ReceiptHandle:
        """The parsed receipt handle."""
        return ReceiptHandle.parse(self.receipt_handle)


class PopStatus(enum.Enum):
    """How a pop ended (RocketMQ's PopStatus)."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    POLLING_FULL = "POLLING_FULL"
    POLLING_NOT_FOUND = "POLLING_NOT_FOUND"


@attrs.frozen
class PopResult:
    """A pop's status, its messages and how many the popped queues still hold."""

    status: PopStatus
    messages: list[PoppedMessage]
    rest_num: int


@attrs.frozen
class MessageQueueAssignment:
    """One queue QUERY_ASSIGNMENT gives a client, and how to read it (``POP`` or ``PULL``)."""

    message_queue: MessageQueue
    mode: str
    attachments: dict[str, str] | None = None


class PopClient:
    """The pop codes against one broker at a time: pop, ack, batch ack, change of invisible
    time, notification, assignment, and the dead-letter forward RocketMQ 5's proxy does."""

    def __init__(self, instance: ClientInstance) -> None:
        self.instance = instance

    async def pop(
        self,
        broker_addr: str,
        group: str,
        topic: str,
        *,
        queue_id: int = -1,
        max_messages: int = 32,
        invisible_ms: int = 30_000,
        poll_ms: int = 0,
        expression_type: str = "TAG",
        expression: str = "*",
        order: bool = False,
        attempt_id: str | None = None,
        init_mode: int = INIT_MODE_MIN,
        timeout: float | None = None,
    ) -> PopResult:
        """POP_MESSAGE: up to ``max_messages`` (1..32) of the group's topic (queue -1: any),
        invisible for ``invisible_ms``; waits up to ``poll_ms`` for one when there is none.

        ``init_mode`` is where a group's first pop of a queue starts: `INIT_MODE_MIN` (the
        first message kept, the value RocketMQ's header defaults to) or `INIT_MODE_MAX`.
        ``timeout`` (s) bounds the request; by default the instance's plus ``poll_ms``.
        A refusal raises MQClientError with the broker's code and remark.
        """
        header = PopMessageRequestHeader(
            consumer_group=group, topic=topic, queue_id=queue_id, max_msg_nums=max_messages,
            invisible_time=invisible_ms, poll_time=poll_ms, born_time=_now_ms(),
            init_mode=init_mode, exp_type=expression_type, exp=expression, order=order,
            attempt_id=attempt_id,
        )  # fmt: skip
        request = RemotingCommand.request(RequestCode.POP_MESSAGE, encode_header(header))
        if timeout is None:
            timeout = self.instance.timeout + max(poll_ms, 0) / 1000
        response = await self.instance.invoke_broker(broker_addr, request, timeout)
        rest = _int(response.ext_fields, "restNum")
        if response.code == ResponseCode.POLLING_FULL:
            return PopResult(PopStatus.POLLING_FULL, [], rest)
        if response.code in (ResponseCode.POLLING_TIMEOUT, ResponseCode.PULL_NOT_FOUND):
            return PopResult(PopStatus.POLLING_NOT_FOUND, [], rest)
        if response.code != ResponseCode.SUCCESS:
            raise MQClientError(
                response.code, f"pop {group}@{topic} at {broker_addr}: {response.remark}"
            )
        messages = [
            _popped(message, broker_addr, topic) for message in decode_records(response.body or b"")
        ]
        if not messages:
            return PopResult(PopStatus.NO_NEW_MSG, [], rest)
        return PopResult(PopStatus.FOUND, messages, rest)

    async def ack(
        self,
        msg_or_handle: PoppedMessage | str,
        *,
        group: str,
        topic: str,
        broker_addr: str | None = None,
    ) -> None:
        """ACK_MESSAGE: the message is done with. MQClientError with the broker's code when
        it refuses (NO_MESSAGE for a handle acked already, changed, or revived)."""
        handle, address = await self._target(msg_or_handle, topic, broker_addr)
        header = AckMessageRequestHeader(
            consumer_group=group, topic=topic, queue_id=handle.queue_id,
            extra_info=handle.extra_info, offset=handle.offset,
        )  # fmt: skip
        request = RemotingCommand.request(RequestCode.ACK_MESSAGE, encode_header(header))
        response = await self.instance.invoke_broker(address, request)
        if response.code != ResponseCode.SUCCESS:
            raise MQClientError(
                response.code,
                f"ack of {topic}:{handle.queue_id}@{handle.offset}: {response.remark}",
            )

    async def batch_ack(self, messages: Sequence[PoppedMessage], *, group: str) -> None:
        """BATCH_ACK_MESSAGE: ack many at once, one request per broker; MQClientError naming
        the ones refused (the others are acked still)."""
        by_broker: dict[str, dict[tuple[Any, ...], list[int]]] = {}
        names_of: dict[str, str] = {}
        for popped in messages:
            handle = popped.handle
            names_of[popped.broker_addr] = handle.broker_name
            key = (popped.message.topic, handle.topic_type, handle.queue_id, handle.start_offset,
                   handle.pop_time, handle.invisible_time, handle.revive_qid)  # fmt: skip
            by_broker.setdefault(popped.broker_addr, {}).setdefault(key, []).append(handle.offset)
        refused: list[str] = []
        for address, checkpoints in by_broker.items():
            acks = []
            for key, offsets in checkpoints.items():
                topic, kind, queue_id, start, pop_time, invisible, revive = key
                bits = 0
                for offset in offsets:
                    bits |= 1 << (offset - start)
                # java.util.BitSet's bytes: little-endian, bit i of byte j is index 8j + i.
                raw = bits.to_bytes(max(1, (bits.bit_length() + 7) // 8), "little")
                acks.append({
                    "c": group, "t": topic, "r": kind, "so": start, "q": queue_id,
                    "rq": revive, "pt": pop_time, "it": invisible,
                    "b": base64.b64encode(raw).decode(),
                })  # fmt: skip
            body = json.dumps({"brokerName": names_of[address], "acks": acks}).encode()
            request = RemotingCommand.request(RequestCode.BATCH_ACK_MESSAGE, None, body)
            response = await self.instance.invoke_broker(address, request)
            if response.code != ResponseCode.SUCCESS:
                refused.append(f"{address}: {response.remark}")
        if refused:
            raise MQClientError(ResponseCode.NO_MESSAGE, "batch ack: " + "; ".join(refused))

    async def change_invisible(
        self,
        msg_or_handle: PoppedMessage | str,
        invisible_ms: int,
        *,
        group: str,
        topic: str,
        broker_addr: str | None = None,
    ) -> str:
        """CHANGE_MESSAGE_INVISIBLETIME: invisible ``invisible_ms`` from now; the new receipt
        handle (the old one acks no more). MQClientError with the broker's code on refusal."""
        handle, address = await self._target(msg_or_handle, topic, broker_addr)
        header = ChangeInvisibleTimeRequestHeader(
            consumer_group=group,
            topic=topic,
            queue_id=handle.queue_id,
            extra_info=handle.extra_info,
            offset=handle.offset,
            invisible_time=invisible_ms,
        )
        request = RemotingCommand.request(
            RequestCode.CHANGE_MESSAGE_INVISIBLETIME, encode_header(header)
        )
        response = await self.instance.invoke_broker(address, request)
        if response.code != ResponseCode.SUCCESS:
            raise MQClientError(
                response.code,
                f"change of invisible time of {topic}:"
                f"{handle.queue_id}@{handle.offset}: {response.remark}",
            )
        answer = decode_header(ChangeInvisibleTimeResponseHeader, response.ext_fields)
        # A change makes a checkpoint of the one message, which the new handle names by its
        # offset; a FIFO pop's checkpoint is extended in place and keeps its first offset.
        start = handle.start_offset if handle.order else handle.offset
        new = attrs.evolve(handle, start_offset=start, pop_time=answer.pop_time,
                           invisible_time=answer.invisible_time)  # fmt: skip
        return new.encode()

    async def notification(
        self,
        broker_addr: str,
        group: str,
        topic: str,
        *,
        queue_id: int = -1,
        poll_ms: int,
        order: bool = False,
    ) -> bool:
        """NOTIFICATION: True once a pop of the group's topic would find a message, False
        after ``poll_ms`` without one."""
        header = NotificationRequestHeader(
            consumer_group=group, topic=topic, queue_id=queue_id, poll_time=poll_ms,
            born_time=_now_ms(), order=order,
        )  # fmt: skip
        request = RemotingCommand.request(RequestCode.NOTIFICATION, encode_header(header))
        timeout = self.instance.timeout + max(poll_ms, 0) / 1000
        response = await self.instance.invoke_broker(broker_addr, request, timeout)
        if response.code != ResponseCode.SUCCESS:
            raise MQClientError(
                response.code, f"notification {group}@{topic} at {broker_addr}: {response.remark}"
            )
        return decode_header(NotificationResponseHeader, response.ext_fields).has_msg

    async def query_assignment(
        self,
        broker_addr: str,
        topic: str,
        group: str,
        client_id: str,
        *,
        strategy: str = "AVG",
        mode: str = "POP",
    ) -> list[MessageQueueAssignment]:
        """QUERY_ASSIGNMENT: the queues of ``topic`` the broker gives this client."""
        body = {"topic": topic, "consumerGroup": group, "clientId": client_id,
                "strategyName": strategy, "messageModel": "CLUSTERING"}  # fmt: skip
        if mode != "POP":
            body["mode"] = mode
        request = RemotingCommand.request(
            RequestCode.QUERY_ASSIGNMENT, None, json.dumps(body).encode()
        )
        response = await self.instance.invoke_broker(broker_addr, request)
        if response.code != ResponseCode.SUCCESS:
            raise MQClientError(
                response.code,
                f"assignment of {topic} for {group} at {broker_addr}: {response.remark}",
            )
        try:
            doc = json.loads(bytes(response.body or b"{}"))
            return [
                MessageQueueAssignment(
                    MessageQueue(
                        topic=a["messageQueue"]["topic"],
                        broker_name=a["messageQueue"]["brokerName"],
                        queue_id=int(a["messageQueue"]["queueId"]),
                    ),
                    str(a.get("mode") or "POP"),
                    a.get("attachments"),
                )
                for a in doc.get("messageQueueAssignments") or []
            ]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise MQClientError(
                ResponseCode.SYSTEM_ERROR, f"unreadable QUERY_ASSIGNMENT answer: {exc!r}"
            ) from None

    async def forward_to_dead_letter(
        self, msg: PoppedMessage, group: str, *, topic: str | None = None
    ) -> None:
        """Send the message to ``%DLQ%<group>`` at once and ack it, as RocketMQ 5's proxy does
        for ForwardMessageToDeadLetterQueue: CONSUMER_SEND_MSG_BACK with delay level -1
        and no retries left, to the message's broker. MQClientError on refusal (the message
        is then not acked and comes back after its invisible time)."""
        await self.forward_handle_to_dead_letter(
            msg, group=group, topic=topic or msg.message.topic, message_id=msg.message.msg_id,
            commit_log_offset=msg.message.commit_log_offset,
        )  # fmt: skip

    async def forward_handle_to_dead_letter(
        self,
        msg_or_handle: PoppedMessage | str,
        *,
        group: str,
        topic: str,
        message_id: str,
        commit_log_offset: int | None = None,
        broker_addr: str | None = None,
    ) -> None:
        """`forward_to_dead_letter` by receipt handle: the commit-log offset is the handle's
        ninth field (RocketMQ 5's proxy form) unless given; MQClientError(INVALID_PARAMETER)
        when neither says it."""
        handle, address = await self._target(msg_or_handle, topic, broker_addr)
        offset = handle.commit_log_offset if commit_log_offset is None else commit_log_offset
        if offset < 0:
            raise MQClientError(
                ResponseCode.INVALID_PARAMETER,
                "the receipt handle carries no commit-log offset (a ninth field): the message "
                "cannot be found to forward",
            )
        header = ConsumerSendMsgBackRequestHeader(
            offset=offset, group=group, delay_level=-1, origin_msg_id=message_id,
            origin_topic=handle.real_topic(group, topic), max_reconsume_times=0,
        )  # fmt: skip
        request = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, encode_header(header))
        response = await self.instance.invoke_broker(address, request)
        if response.code != ResponseCode.SUCCESS:
            raise MQClientError(
                response.code, f"dead-letter forward of {message_id}: {response.remark}"
            )
        await self.ack(handle.encode(), group=group, topic=topic, broker_addr=address)

    async def _target(
        self, msg_or_handle: PoppedMessage | str, topic: str, broker_addr: str | None
    ) -> tuple[ReceiptHandle, str]:
        """The handle and the broker address it goes to (the master of its broker name)."""
        if isinstance(msg_or_handle, PoppedMessage):
            handle = msg_or_handle.handle
            broker_addr = broker_addr or msg_or_handle.broker_addr
        else:
            handle = ReceiptHandle.parse(msg_or_handle)
        if broker_addr is None:
            queue = MessageQueue(topic=topic, broker_name=handle.broker_name,
                                 queue_id=handle.queue_id)  # fmt: skip
            broker_addr = await self.instance.find_master(queue)
        return handle, broker_addr


def _popped(message: MessageExt, broker_addr: str, topic: str) -> PoppedMessage:
    text = message.properties.get(POP_CK)
    if not text:
        raise MQClientError(
            ResponseCode.SYSTEM_ERROR, f"popped message {message.msg_id} has no {POP_CK} property"
        )
    handle = ReceiptHandle.parse(text)
    if message.topic.startswith(names.RETRY_GROUP_TOPIC_PREFIX):
        # A broker that shows a retry under its retry topic: the user sees the topic.
        message.topic = message.properties.get(MessageConst.RETRY_TOPIC) or topic
    return PoppedMessage(
        message=message, receipt_handle=text, broker_name=handle.broker_name,
        broker_addr=broker_addr, queue_id=handle.queue_id, queue_offset=handle.offset,
        delivery_attempt=message.reconsume_times + 1,
        invisible_until_ms=handle.invisible_until_ms,
    )  # fmt: skip


def _int(fields: dict[str, str] | None, name: str) -> int:
    try:
        return int((fields or {}).get(name, 0))
    except ValueError:
        return 0


def _now_ms() -> int:
    return int(time.time() * 1000)
