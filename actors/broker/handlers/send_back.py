"""CONSUMER_SEND_MSG_BACK (code 36): a consumer hands back a message it failed to consume.

Sheet 3.14. The message, found by its commit-log offset, is stored again in ``%RETRY%<group>``
with delay level ``3 + reconsumeTimes`` (or the level asked for) and ``reconsumeTimes + 1``, so
the schedule service (`actors.broker.services.schedule`) brings it back to the group later; past
the group's retryMaxTimes, or when the level asked for is negative, it goes to ``%DLQ%<group>``
at once. Every refusal stores nothing.
"""

from __future__ import annotations

import random
from time import perf_counter

import attrs

from actors.broker.config import BrokerConfig
from actors.broker.ha import HighAvailability
from actors.broker.services.request_stats import RequestStats
from actors.broker.services.schedule import ScheduleMessageService
from actors.broker.tables.groups import SubscriptionGroupManager
from actors.broker.tables.topics import (
    PERM_RW,
    CreateTopicInSendBack,
    TopicManager,
    TopicMissing,
    create_then_serve,
)
from protocol.bodies import PERM_WRITE
from protocol.codes import ResponseCode
from protocol.command import ConnectionClosedError, RemotingCommand
from protocol.connection import Connection
from protocol.headers import ConsumerSendMsgBackRequestHeader, decode_header
from protocol.message import MessageConst, MessageFormatError, decode_record
from protocol.names import DLQ_GROUP_TOPIC_PREFIX, dlq_topic, retry_topic
from storage import MessageExtBrokerInner, MessageStore, PutMessageResult, PutMessageStatus

#: Requests from clients at least this version carry a maxReconsumeTimes to honour (V3_4_9).
MAX_RECONSUME_TIMES_VERSION = 121
#: The retry delay level for a first failure when the consumer leaves it to the broker.
RETRY_BASE_DELAY_LEVEL = 3


@attrs.frozen
class SendBackParts:
    """What the send-back handler uses to store a retry or a dead letter."""

    config: BrokerConfig
    store: MessageStore
    topics: TopicManager
    groups: SubscriptionGroupManager
    request_stats: RequestStats
    ha: HighAvailability
    schedule: ScheduleMessageService


class SendBackHandler:
    """Serves CONSUMER_SEND_MSG_BACK for one broker."""

    def __init__(self, parts: SendBackParts) -> None:
        self.parts = parts

    def __call__(self, connection: Connection, request: RemotingCommand) -> RemotingCommand | None:
        """Check, then store the retry or dead letter; answered when the store has it.

        Plain (not async) like the send handler: the store writer's callback answers.
        """
        stats = self.parts.request_stats  # latency (when metrics are on) and dead letters
        started = perf_counter() if stats.timing else 0.0
        header = decode_header(ConsumerSendMsgBackRequestHeader, request.ext_fields)
        try:
            checked = self._check(request, header)
        except TopicMissing as missing:  # the group's first retry or dead letter
            return create_then_serve(self.parts.topics, missing, connection, request, self)
        if isinstance(checked, RemotingCommand):
            if started:
                stats.on_rpc(request.code, checked.code, started)
            return checked
        msg = checked

        def done(result: PutMessageResult) -> None:
            if result.status is PutMessageStatus.PUT_OK and msg.topic.startswith(
                DLQ_GROUP_TOPIC_PREFIX
            ):  # a dead letter: counted for the metrics (actors.broker.services.request_stats)
                origin = msg.properties.get(MessageConst.RETRY_TOPIC, "")
                stats.on_dlq(header.group, origin)
            if request.is_oneway or connection.closed:
                return
            if result.status is PutMessageStatus.PUT_OK:
                answer = request.response(ResponseCode.SUCCESS)
            else:
                # RocketMQ answers every other status, the SYNC_MASTER ones included, with
                # SYSTEM_ERROR and the status name; the client then resends the message itself.
                answer = request.response(
                    ResponseCode.SYSTEM_ERROR, result.remark or str(result.status)
                )
            if started:
                stats.on_rpc(request.code, answer.code, started)
            try:
                connection.send(answer)
            except ConnectionClosedError:
                pass  # the consumer went away; it will send the message back again

        # On a SYNC_MASTER answered once a slave has the message (actors.broker.ha).
        self.parts.ha.put_message(msg, done)
        return None

    def _check(
        self, request: RemotingCommand, header: ConsumerSendMsgBackRequestHeader
    ) -> MessageExtBrokerInner | RemotingCommand:
        """The message to store, or the refusal to answer with."""
        parts = self.parts
        config = parts.config
        group = header.group
        group_config = parts.groups.find_subscription_group_config(group)
        if group_config is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group {group} does not exist on broker {config.broker_name} "
                "(autoCreateSubscriptionGroup is off); create it first",
            )
        if config.is_slave:
            return request.response(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                f"broker {config.broker_name} is a slave; send the message back to its master",
            )
        if not config.broker_permission & PERM_WRITE:
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"the broker {config.broker_addr} forbids writes (brokerPermission "
                f"{config.broker_permission})",
            )
        if group_config.retry_queue_nums <= 0:
            return request.response(ResponseCode.SUCCESS)  # the group wants no retries
        record = parts.store.look_message_by_offset(header.offset) if header.offset >= 0 else None
        try:
            message = decode_record(record) if record is not None else None
        except MessageFormatError:
            message = None
        if message is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"no message at commit-log offset {header.offset} on broker "
                f"{config.broker_name}; it was never stored here or its file has been removed",
            )
        properties = dict(message.properties)
        properties.setdefault(MessageConst.RETRY_TOPIC, message.topic)
        properties[MessageConst.WAIT] = "false"
        if not properties.get(MessageConst.ORIGIN_MESSAGE_ID):
            properties[MessageConst.ORIGIN_MESSAGE_ID] = message.offset_msg_id
        max_times = group_config.retry_max_times
        if (
            request.version >= MAX_RECONSUME_TIMES_VERSION
            and header.max_reconsume_times is not None
            and header.max_reconsume_times >= 0
        ):
            max_times = header.max_reconsume_times
        delay_level = header.delay_level
        if message.reconsume_times >= max_times or delay_level < 0:
            topic = dlq_topic(group)
            topic_config = parts.topics.select(topic)
            if topic_config is None:
                raise TopicMissing(CreateTopicInSendBack(topic, 1, PERM_RW))
            queue_id = 0
            properties.pop(MessageConst.DELAY, None)
        else:
            topic = retry_topic(group)
            queues = group_config.retry_queue_nums
            topic_config = parts.topics.select(topic)
            if topic_config is None:
                raise TopicMissing(CreateTopicInSendBack(topic, queues, PERM_RW))
            queue_id = random.randrange(queues)
            if delay_level == 0:
                delay_level = RETRY_BASE_DELAY_LEVEL + message.reconsume_times
            properties[MessageConst.DELAY] = str(delay_level)
        if not topic_config.perm & PERM_WRITE:
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"topic {topic} does not allow writes (perm {topic_config.perm})",
            )
        # As RocketMQ's send-back, the retry does not carry the prepared-transaction offset.
        msg = MessageExtBrokerInner.from_stored(
            message, topic=topic, queue_id=queue_id, properties=properties,
            reconsume_times=message.reconsume_times + 1, prepared_transaction_offset=0,
        )  # fmt: skip
        return parts.schedule.redirect(msg)
