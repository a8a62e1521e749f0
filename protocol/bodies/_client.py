"""Bodies a client exchanges with a broker: heartbeat, consumer ids, orderly locks,
connections (sheet 4.5-4.7), and a push consumer's answers to GET_CONSUMER_RUNNING_INFO and
CONSUME_MESSAGE_DIRECTLY.
"""

from __future__ import annotations

import enum
from typing import ClassVar

import attrs

from protocol.bodies._codec import Body, MessageQueue, register_enum
from protocol.codes import LanguageCode


class ConsumeType(enum.IntEnum):
    """How a consumer consumes: pull (actively) or push (passively)."""

    CONSUME_ACTIVELY = 0
    CONSUME_PASSIVELY = 1
    #: RocketMQ 5's pop consumers (the gRPC proxy heartbeats its clients' groups with it).
    CONSUME_POP = 2


class MessageModel(enum.IntEnum):
    """Consumer group message model."""

    BROADCASTING = 0
    CLUSTERING = 1


class ConsumeFromWhere(enum.IntEnum):
    """Where a new consumer group starts."""

    CONSUME_FROM_LAST_OFFSET = 0
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = 1
    CONSUME_FROM_MIN_OFFSET = 2
    CONSUME_FROM_MAX_OFFSET = 3
    CONSUME_FROM_FIRST_OFFSET = 4
    CONSUME_FROM_TIMESTAMP = 5


for _enum in (ConsumeType, MessageModel, ConsumeFromWhere, LanguageCode):
    register_enum(_enum)


# -- heartbeat and consumer ids ---------------------------------------------------------------


@attrs.frozen(kw_only=True)
class SubscriptionData(Body):
    """One subscription of a consumer group; ``sub_version`` may arrive as a string (C++)."""

    topic: str
    sub_string: str = "*"
    class_filter_mode: bool = False
    tags_set: list[str] = attrs.Factory(list)
    code_set: list[int] = attrs.Factory(list)
    sub_version: int = 0
    expression_type: str = "TAG"


@attrs.frozen(kw_only=True)
class ConsumerData(Body):
    """A consumer group in a heartbeat."""

    group_name: str
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    subscription_data_set: list[SubscriptionData] = attrs.Factory(list)
    unit_mode: bool = False


@attrs.frozen(kw_only=True)
class ProducerData(Body):
    """A producer group in a heartbeat."""

    group_name: str


@attrs.frozen(kw_only=True)
class HeartbeatData(Body):
    """HEART_BEAT body."""

    client_id: str = attrs.field(metadata={"wire": "clientID"})
    producer_data_set: list[ProducerData] = attrs.Factory(list)
    consumer_data_set: list[ConsumerData] = attrs.Factory(list)


@attrs.frozen(kw_only=True)
class CheckClientRequestBody(Body):
    """CHECK_CLIENT_CONFIG body: a consumer's subscription for the broker to check before
    the consumer starts (the Java client sends one per SQL92 subscription)."""

    client_id: str = ""
    group: str = ""
    subscription_data: SubscriptionData | None = None


@attrs.frozen(kw_only=True)
class GetConsumerListByGroupResponseBody(Body):
    """GET_CONSUMER_LIST_BY_GROUP body: the client ids of a group's live consumers."""

    consumer_id_list: list[str] = attrs.Factory(list)


# -- orderly locks ----------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class LockBatchRequestBody(Body):
    """LOCK_BATCH_MQ body."""

    consumer_group: str
    client_id: str
    only_this_broker: bool = False
    mq_set: list[MessageQueue] = attrs.Factory(list)


@attrs.frozen(kw_only=True)
class UnlockBatchRequestBody(Body):
    """UNLOCK_BATCH_MQ body."""

    consumer_group: str
    client_id: str
    only_this_broker: bool = False
    mq_set: list[MessageQueue] = attrs.Factory(list)


@attrs.frozen(kw_only=True)
class LockBatchResponseBody(Body):
    """LOCK_BATCH_MQ answer: the queues now locked by the asking client."""

    lock_ok_mq_set: list[MessageQueue] = attrs.field(factory=list, metadata={"wire": "lockOKMQSet"})


# -- connections ------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Connection(Body):
    """One client connection as admin tools see it."""

    client_id: str = ""
    client_addr: str = ""
    language: LanguageCode = LanguageCode.JAVA
    version: int = 0


@attrs.frozen(kw_only=True)
class ConsumerConnection(Body):
    """GET_CONSUMER_CONNECTION_LIST body."""

    connection_set: list[Connection] = attrs.Factory(list)
    subscription_table: dict[str, SubscriptionData] = attrs.Factory(dict)
    consume_type: ConsumeType | None = None
    message_model: MessageModel | None = None
    consume_from_where: ConsumeFromWhere | None = None


@attrs.frozen(kw_only=True)
class ProducerConnection(Body):
    """GET_PRODUCER_CONNECTION_LIST body."""

    connection_set: list[Connection] = attrs.Factory(list)


@attrs.frozen(kw_only=True)
class ProducerInfo(Body):
    """One producer connection in ProducerTableInfo."""

    client_id: str = ""
    remote_ip: str = attrs.field(default="", metadata={"wire": "remoteIP"})
    language: LanguageCode = LanguageCode.JAVA
    version: int = 0
    last_update_timestamp: int = 0


@attrs.frozen(kw_only=True)
class ProducerTableInfo(Body):
    """GET_ALL_PRODUCER_INFO body: every producer group on a broker and its connections."""

    data: dict[str, list[ProducerInfo]] = attrs.Factory(dict)


# -- answers of a push consumer to the broker's calls (GET_CONSUMER_RUNNING_INFO 307, ...) ----


@attrs.frozen(kw_only=True)
class ProcessQueueInfo(Body):
    """One queue's local state in ConsumerRunningInfo.mqTable (RocketMQ's ProcessQueueInfo)."""

    commit_offset: int = 0
    cached_msg_min_offset: int = 0
    cached_msg_max_offset: int = 0
    cached_msg_count: int = 0
    cached_msg_size_in_mi_b: int = attrs.field(default=0, metadata={"wire": "cachedMsgSizeInMiB"})
    transaction_msg_min_offset: int = 0
    transaction_msg_max_offset: int = 0
    transaction_msg_count: int = 0
    locked: bool = False
    try_unlock_times: int = 0
    last_lock_timestamp: int = 0
    droped: bool = False  # sic: the Java field name
    last_pull_timestamp: int = 0
    last_consume_timestamp: int = 0


@attrs.frozen(kw_only=True)
class ConsumeStatus(Body):
    """Per-topic consume rates in ConsumerRunningInfo.statusTable."""

    pull_rt: float = attrs.field(default=0.0, metadata={"wire": "pullRT"})
    pull_tps: float = attrs.field(default=0.0, metadata={"wire": "pullTPS"})
    consume_rt: float = attrs.field(default=0.0, metadata={"wire": "consumeRT"})
    consume_ok_tps: float = attrs.field(default=0.0, metadata={"wire": "consumeOKTPS"})
    consume_failed_tps: float = attrs.field(default=0.0, metadata={"wire": "consumeFailedTPS"})
    consume_failed_msgs: int = 0


@attrs.frozen(kw_only=True)
class ConsumerRunningInfo(Body):
    """GET_CONSUMER_RUNNING_INFO answer; ``mqTable`` has MessageQueue object keys (fastjson)."""

    _fastjson_form: ClassVar[bool] = True
    properties: dict[str, str] = attrs.Factory(dict)
    subscription_set: list[SubscriptionData] = attrs.Factory(list)
    mq_table: dict[MessageQueue, ProcessQueueInfo] = attrs.Factory(dict)
    status_table: dict[str, ConsumeStatus] = attrs.Factory(dict)
    jstack: str | None = None


@attrs.frozen(kw_only=True)
class ConsumeMessageDirectlyResult(Body):
    """CONSUME_MESSAGE_DIRECTLY answer; ``consume_result`` is a CMResult name (CR_SUCCESS, ...)."""

    order: bool = False
    auto_commit: bool = True
    consume_result: str = "CR_SUCCESS"
    remark: str | None = None
    spent_time_mills: int = 0
