"""RocketMQ 5's pop codes: POP_MESSAGE, ACK_MESSAGE, BATCH_ACK_MESSAGE,
CHANGE_MESSAGE_INVISIBLETIME, NOTIFICATION and QUERY_ASSIGNMENT.

The checks (broker and topic permissions, queue id, group, filter, invisible time, receipt
handle) run here and refuse with RocketMQ's response code, storing nothing; what changes pop
state goes to the pop service (`actors.broker.services.pop`), one command at a time. A pop
that finds nothing with ``pollTime`` > 0, and a NOTIFICATION, wait on the pull-hold service's
wake-ups (the store's arrival callback) for the topic's queues and its retry topic's, under
the same bound (maxHeldPulls): past it a pop answers POLLING_FULL, and one that waited in vain
POLLING_TIMEOUT, as RocketMQ's pop long polling does.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Set
from functools import partial
from typing import Any

import attrs
import trio

from actors.broker.config import BrokerConfig
from actors.broker.services.pop import Ack, ChangeInvisibleTime, Pop, PopAnswer, PopService
from actors.broker.services.pop_state import (
    MAX_POP_NUMS,
    ORDER_REVIVE_QUEUE_ID,
    REVIVE_QUEUE_ID,
    PopRefused,
    ReceiptHandle,
    check_invisible_time,
)
from actors.broker.services.pull_hold import PullHoldService
from actors.broker.tables.clients import parse_subscription, tag_codes
from actors.broker.tables.groups import SubscriptionGroupManager
from actors.broker.tables.topics import TopicManager
from protocol.bodies import PERM_READ, TopicConfig
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.connection import Connection
from protocol.filter import SQL92, FilterParseError, compile_sql92
from protocol.headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    NotificationRequestHeader,
    NotificationResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
    decode_header,
    encode_header,
)
from protocol.message import record_properties
from protocol.names import pop_retry_topic
from storage import MessageStore, PutMessageStatus

#: A pop or notification waits at most this long (ms) whatever its pollTime says.
MAX_POLL_TIME = 60_000


@attrs.frozen
class PopParts:
    """What the pop handlers use."""

    config: BrokerConfig
    store: MessageStore
    topics: TopicManager
    groups: SubscriptionGroupManager
    pull_hold: PullHoldService
    pop: PopService


class PopHandlers:
    """Serves the pop codes of one broker."""

    def __init__(self, parts: PopParts) -> None:
        self.parts = parts

    @property
    def _timeout(self) -> float:
        """How long a request waits for the pop service: its puts may wait for a slave for
        up to slaveTimeout on a SYNC_MASTER (one pop stores a checkpoint per queue)."""
        return 3.0 + 4 * self.parts.config.slave_timeout / 1000

    # -- POP_MESSAGE --------------------------------------------------------------------------

    async def pop_message(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """POP_MESSAGE: messages and their receipt handles, waiting up to pollTime for one."""
        header = decode_header(PopMessageRequestHeader, request.ext_fields)
        topic_config = self._check_pop(header.topic, header.queue_id, header.consumer_group)
        if header.max_msg_nums > MAX_POP_NUMS or header.max_msg_nums <= 0:
            raise PopRefused(
                ResponseCode.INVALID_PARAMETER,
                f"maxMsgNums {header.max_msg_nums} is out of range: pop 1..{MAX_POP_NUMS}",
            )
        check_invisible_time(header.invisible_time)
        tags, record_filter = self._filter(header)

        def pop() -> Pop:  # a request's reply slot is good for one call: one per try
            return Pop(
                header.consumer_group, header.topic, header.queue_id,
                topic_config.read_queue_nums, header.max_msg_nums, header.invisible_time,
                header.init_mode, tags, record_filter,
                header.order, header.attempt_id or "",
            )  # fmt: skip

        watched = self._watched(header.consumer_group, header.topic, header.queue_id,
                                topic_config)  # fmt: skip
        seen = self._max_offsets(watched)
        answer = await self.parts.pop.call(pop(), timeout=self._timeout)
        poll_ms = min(max(header.poll_time, 0), MAX_POLL_TIME)
        if answer.records or poll_ms <= 0:
            return self._pop_response(request, answer)
        hold = self.parts.pull_hold
        if not hold.try_acquire():
            return self._pop_response(request, answer, poll_full=True)
        deadline = trio.current_time() + poll_ms / 1000
        try:
            # The pop itself stays out of the deadline's reach: a pop cancelled while the
            # actor hands out messages would hide them for their invisible time.
            while (
                not (answer.records or hold.closing)
                and (left := deadline - trio.current_time()) > 0
            ):
                await self._wait_arrival(watched, seen, left)
                watched = self._watched(header.consumer_group, header.topic, header.queue_id,
                                        topic_config)  # fmt: skip
                seen = self._max_offsets(watched)
                answer = await self.parts.pop.call(pop(), timeout=self._timeout)
        finally:
            hold.release()
        return self._pop_response(request, answer)

    def _pop_response(
        self, request: RemotingCommand, answer: PopAnswer, *, poll_full: bool = False
    ) -> RemotingCommand:
        header = PopMessageResponseHeader(
            pop_time=answer.pop_time, invisible_time=answer.invisible_time,
            revive_qid=answer.revive_qid, rest_num=answer.rest_num,
            start_offset_info=answer.start_offset_info or None,
            msg_offset_info=answer.msg_offset_info or None,
        )  # fmt: skip
        if answer.records:
            return request.response(
                ResponseCode.SUCCESS, "FOUND", encode_header(header), b"".join(answer.records)
            )
        if poll_full:
            return request.response(ResponseCode.POLLING_FULL, "too many pops and pulls held",
                                    encode_header(header))  # fmt: skip
        # RocketMQ answers an empty pop, waited for or not, POLLING_TIMEOUT.
        return request.response(
            ResponseCode.POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE", encode_header(header)
        )

    def _check_pop(self, topic: str, queue_id: int, group: str) -> TopicConfig:
        """The topic's config, or PopRefused with RocketMQ's code."""
        config = self.parts.config
        if config.is_slave:
            raise PopRefused(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                f"broker {config.broker_name} is a slave; pop from its master",
            )
        if not config.broker_permission & PERM_READ:
            raise PopRefused(
                ResponseCode.NO_PERMISSION, f"the broker[{config.broker_ip1}] pop is forbidden"
            )
        topic_config = self._topic(topic)
        if not topic_config.perm & PERM_READ:
            raise PopRefused(ResponseCode.NO_PERMISSION,
                             f"the topic[{topic}] peeking message is forbidden")  # fmt: skip
        if queue_id >= topic_config.read_queue_nums or queue_id < -1:
            raise PopRefused(
                ResponseCode.INVALID_PARAMETER,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                f"topicConfig.readQueueNums:[{topic_config.read_queue_nums}]",
            )
        group_config = self.parts.groups.find_subscription_group_config(group)
        if group_config is None:
            raise PopRefused(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{group}] does not exist (autoCreateSubscriptionGroup is "
                "off); create it first",
            )
        if not group_config.consume_enable:
            raise PopRefused(ResponseCode.NO_PERMISSION,
                             f"subscription group no permission, {group}")  # fmt: skip
        return topic_config

    def _topic(self, topic: str) -> TopicConfig:
        topic_config = self.parts.topics.select(topic)
        if topic_config is None:
            raise PopRefused(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{topic}] not exist, apply first please!",
            )
        return topic_config

    def _filter(
        self, header: PopMessageRequestHeader
    ) -> tuple[Set[int] | None, Callable[[memoryview], bool] | None]:
        expression = header.exp
        if not expression:
            return None, None
        if (header.exp_type or "TAG").upper() != SQL92:
            return tag_codes(parse_subscription(header.topic, expression)), None
        if not self.parts.config.enable_property_filter:
            raise PopRefused(
                ResponseCode.SYSTEM_ERROR,
                "The broker does not support consumer to filter message by SQL92 "
                "(enablePropertyFilter is off)",
            )
        try:
            selector = compile_sql92(expression)
        except FilterParseError as exc:
            raise PopRefused(
                ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                f"parse the consumer's subscription failed: {exc}",
            ) from None

        def matches(record: memoryview) -> bool:
            return selector.matches(record_properties(record))

        return None, matches

    def _watched(
        self, group: str, topic: str, queue_id: int, topic_config: TopicConfig
    ) -> list[tuple[str, int]]:
        """The queues a pop of ``topic`` reads: the topic's (or one) and its retry topic's."""
        queues = range(topic_config.read_queue_nums) if queue_id < 0 else (queue_id,)
        retry = pop_retry_topic(group, topic)
        retry_config = self.parts.topics.select(retry)
        retry_queues = retry_config.read_queue_nums if retry_config is not None else 1
        return [(topic, q) for q in queues] + [(retry, q) for q in range(retry_queues)]

    def _max_offsets(self, watched: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {key: self.parts.store.get_max_offset_in_queue(*key) for key in watched}

    async def _wait_arrival(
        self, watched: list[tuple[str, int]], seen: dict[tuple[str, int], int], timeout: float
    ) -> None:
        """Return once a message is stored in a watched queue past ``seen``, or after
        ``timeout`` s."""
        hold, store = self.parts.pull_hold, self.parts.store

        async def watch(key: tuple[str, int], cancel: trio.CancelScope) -> None:
            # Checked and registered with no checkpoint between: no arrival slips through.
            if store.get_max_offset_in_queue(*key) > seen[key] or await hold.wait(
                key[0], key[1], seen[key], timeout
            ):
                cancel.cancel()

        async with trio.open_nursery() as nursery:
            for key in watched:
                nursery.start_soon(watch, key, nursery.cancel_scope)

    # -- ACK_MESSAGE, BATCH_ACK_MESSAGE -------------------------------------------------------

    async def ack_message(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """ACK_MESSAGE: the message named by the receipt handle is done with."""
        header = decode_header(AckMessageRequestHeader, request.ext_fields)
        self._check_queue(header.topic, header.queue_id)
        handle = ReceiptHandle.parse(header.extra_info)
        ack = Ack(header.consumer_group, header.topic, handle, header.offset)
        status = await self.parts.pop.call(ack, timeout=self._timeout)
        self._wake_fifo_waiters(header.consumer_group, header.topic, handle)
        return _ack_answer(request, [status])

    async def batch_ack_message(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """BATCH_ACK_MESSAGE: every offset of every entry's bit set acked; answers NO_MESSAGE
        (with each refusal named) when some were not in flight, the others acked still."""
        acks = _batch_acks(request.body)
        refused: list[str] = []
        statuses: list[PutMessageStatus] = []
        for group, topic, handle, offsets in acks:
            for offset in offsets:
                try:
                    ack = Ack(group, topic, handle, offset)
                    statuses.append(await self.parts.pop.call(ack, timeout=self._timeout))
                except PopRefused as exc:
                    refused.append(f"{topic}:{handle.queue_id}@{offset}: {exc.remark}")
            self._wake_fifo_waiters(group, topic, handle)
        if refused:
            return request.response(ResponseCode.NO_MESSAGE, "; ".join(refused))
        return _ack_answer(request, statuses)

    def _wake_fifo_waiters(self, group: str, topic: str, handle: ReceiptHandle) -> None:
        """An ack of a FIFO pop may free its queue: wake the pops and NOTIFICATIONs held on
        it (they look again; held pulls of the queue do too, and find what they found)."""
        if handle.revive_qid == ORDER_REVIVE_QUEUE_ID:
            real = handle.real_topic(group, topic)
            self.parts.pull_hold.notify_message_arriving(real, handle.queue_id, -1)

    def _check_queue(self, topic: str, queue_id: int) -> None:
        topic_config = self._topic(topic)
        if queue_id < 0 or queue_id >= max(topic_config.read_queue_nums, 1):
            raise PopRefused(
                ResponseCode.MESSAGE_ILLEGAL,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                f"topicConfig.readQueueNums:[{topic_config.read_queue_nums}]",
            )

    # -- CHANGE_MESSAGE_INVISIBLETIME ---------------------------------------------------------

    async def change_invisible_time(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """CHANGE_MESSAGE_INVISIBLETIME: invisible for invisibleTime ms from now, under a new
        receipt handle (the answer's popTime and invisibleTime); the old one acks no more."""
        header = decode_header(ChangeInvisibleTimeRequestHeader, request.ext_fields)
        self._check_queue(header.topic, header.queue_id)
        check_invisible_time(header.invisible_time)
        handle = ReceiptHandle.parse(header.extra_info)
        pop_time, invisible_time = await self.parts.pop.call(
            ChangeInvisibleTime(
                header.consumer_group, header.topic, handle, header.offset, header.invisible_time
            ),
            timeout=self._timeout,
        )
        answer = ChangeInvisibleTimeResponseHeader(
            pop_time=pop_time, invisible_time=invisible_time, revive_qid=REVIVE_QUEUE_ID
        )
        return request.response(ResponseCode.SUCCESS, None, encode_header(answer))

    # -- NOTIFICATION -------------------------------------------------------------------------

    async def notification(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """NOTIFICATION: answers hasMsg=true once a pop would find a message, or false after
        pollTime."""
        header = decode_header(NotificationRequestHeader, request.ext_fields)
        topic_config = self._check_pop(header.topic, header.queue_id, header.consumer_group)
        pop, group, topic = self.parts.pop, header.consumer_group, header.topic
        queues = topic_config.read_queue_nums
        watched = self._watched(group, topic, header.queue_id, topic_config)
        seen = self._max_offsets(watched)
        has_msg = pop.has_message(group, topic, header.queue_id, queues, header.order)
        polling_full = False
        poll_ms = min(max(header.poll_time, 0), MAX_POLL_TIME)
        if not has_msg and poll_ms > 0:
            hold = self.parts.pull_hold
            if hold.try_acquire():
                deadline = trio.current_time() + poll_ms / 1000
                try:
                    while (
                        not (has_msg or hold.closing)
                        and (left := deadline - trio.current_time()) > 0
                    ):
                        await self._wait_arrival(watched, seen, left)
                        watched = self._watched(group, topic, header.queue_id, topic_config)
                        seen = self._max_offsets(watched)
                        has_msg = pop.has_message(
                            group, topic, header.queue_id, queues, header.order
                        )
                finally:
                    hold.release()
            else:
                polling_full = True
        answer = NotificationResponseHeader(has_msg=has_msg, polling_full=polling_full)
        return request.response(ResponseCode.SUCCESS, None, encode_header(answer))

    # -- QUERY_ASSIGNMENT ---------------------------------------------------------------------

    def query_assignment(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        """QUERY_ASSIGNMENT: for pop, every readable queue of the topic on this broker."""
        try:
            body = json.loads(bytes(request.body or b"{}"))
            topic = body["topic"]
            if not isinstance(topic, str):
                raise TypeError("topic is not a string")
        except (ValueError, KeyError, TypeError) as exc:
            raise PopRefused(
                ResponseCode.INVALID_PARAMETER,
                f"QUERY_ASSIGNMENT body must be JSON with a topic: {exc}",
            ) from None
        topic_config = self._topic(topic)
        broker = self.parts.config.broker_name
        assignments = [
            {"messageQueue": {"topic": topic, "brokerName": broker, "queueId": q},
             "mode": "POP", "attachments": None}
            for q in range(topic_config.read_queue_nums)
        ] if topic_config.perm & PERM_READ else []  # fmt: skip
        return request.response(
            ResponseCode.SUCCESS, None, None,
            json.dumps({"messageQueueAssignments": assignments}).encode(),
        )  # fmt: skip


def _field(entry: dict[str, Any], short: str, long: str) -> Any:
    # fastjson writes BatchAck's short names; its alternate (long) names are read too.
    value = entry.get(short, entry.get(long))
    if value is None:
        raise KeyError(long)
    return value


def _batch_acks(
    body: bytes | bytearray | memoryview | None,
) -> list[tuple[str, str, ReceiptHandle, list[int]]]:
    """(group, topic, handle, offsets) of each BatchAck of a BatchAckMessageRequestBody."""
    try:
        doc: Any = json.loads(bytes(body or b""))
        broker = str(doc.get("brokerName") or "")
        out = []
        for entry in doc["acks"]:
            field = partial(_field, entry)
            start = int(field("so", "startOffset"))
            bits = field("b", "bitSet")
            raw = base64.b64decode(bits) if isinstance(bits, str) else bytes(bits)
            # java.util.BitSet.toByteArray: little-endian, bit i of byte j = index 8j + i.
            offsets = [start + 8 * j + i for j, byte in enumerate(raw) for i in range(8)
                       if byte >> i & 1]  # fmt: skip
            handle = ReceiptHandle(
                start, int(field("pt", "popTime")), int(field("it", "invisibleTime")),
                int(entry.get("rq", entry.get("reviveQueueId", REVIVE_QUEUE_ID))),
                str(entry.get("r", entry.get("retry", "0"))), broker, int(field("q", "queueId")),
            )  # fmt: skip
            out.append((str(field("c", "consumerGroup")), str(field("t", "topic")), handle,
                        offsets))  # fmt: skip
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
        raise PopRefused(
            ResponseCode.INVALID_PARAMETER,
            f"malformed BatchAckMessageRequestBody ({type(exc).__name__}: {exc})",
        ) from None
    if not out:
        raise PopRefused(ResponseCode.NO_MESSAGE, "the batch ack names no message")
    return out


#: Acks stored on the master whose answer still says what a send's would (SYNC_FLUSH,
#: SYNC_MASTER): the ack holds, only its flush or its copy on a slave is not confirmed.
_ACK_NOT_CONFIRMED = {
    PutMessageStatus.FLUSH_DISK_TIMEOUT: (ResponseCode.FLUSH_DISK_TIMEOUT, "flushed to disk"),
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: (
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        "confirmed by a slave within slaveTimeout",
    ),
    PutMessageStatus.SLAVE_NOT_AVAILABLE: (
        ResponseCode.SLAVE_NOT_AVAILABLE,
        "copied: no slave is in sync",
    ),
}


def _ack_answer(request: RemotingCommand, statuses: list[PutMessageStatus]) -> RemotingCommand:
    """SUCCESS, or the first status of an ack held on the master but not confirmed."""
    for status in statuses:
        if status in _ACK_NOT_CONFIRMED:
            code, what = _ACK_NOT_CONFIRMED[status]
            return request.response(
                code, f"acked on the master, but not {what}; do not ack it again"
            )
    return request.response(ResponseCode.SUCCESS)
