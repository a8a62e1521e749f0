"""Headers of topic, group, statistics and consumer-management requests (sheet 3.10)."""

from __future__ import annotations

import attrs


@attrs.frozen(kw_only=True)
class CreateTopicRequestHeader:
    """UPDATE_AND_CREATE_TOPIC request header; ``topic_filter_type`` is SINGLE_TAG or MULTI_TAG."""

    topic: str
    default_topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_filter_type: str
    topic_sys_flag: int | None = None
    order: bool
    #: RocketMQ 5's attribute changes, ``"+message.type=FIFO,-key"`` (absent from 4.x).
    attributes: str | None = None


@attrs.frozen(kw_only=True)
class GetTopicConfigRequestHeader:
    """GET_TOPIC_CONFIG (RocketMQ 5) request header; ``lo`` asks for the static-topic queue
    mapping, which this broker does not have (its answer leaves it out)."""

    topic: str
    lo: bool | None = None


@attrs.frozen(kw_only=True)
class DeleteTopicRequestHeader:
    """DELETE_TOPIC_IN_BROKER request header."""

    topic: str


@attrs.frozen(kw_only=True)
class DeleteSubscriptionGroupRequestHeader:
    """DELETE_SUBSCRIPTIONGROUP request header."""

    group_name: str
    remove_offset: bool = False


@attrs.frozen(kw_only=True)
class GetTopicStatsInfoRequestHeader:
    """GET_TOPIC_STATS_INFO request header."""

    topic: str


@attrs.frozen(kw_only=True)
class GetConsumeStatsRequestHeader:
    """GET_CONSUME_STATS request header; no topic means every topic of the group."""

    consumer_group: str
    topic: str | None = None


@attrs.frozen(kw_only=True)
class GetConsumerConnectionListRequestHeader:
    """GET_CONSUMER_CONNECTION_LIST request header."""

    consumer_group: str


@attrs.frozen(kw_only=True)
class GetProducerConnectionListRequestHeader:
    """GET_PRODUCER_CONNECTION_LIST request header."""

    producer_group: str


@attrs.frozen(kw_only=True)
class ViewBrokerStatsDataRequestHeader:
    """VIEW_BROKER_STATS_DATA request header."""

    stats_name: str
    stats_key: str


@attrs.frozen(kw_only=True)
class GetBrokerConfigResponseHeader:
    """GET_BROKER_CONFIG response header: the DataVersion JSON as a string."""

    version: str


@attrs.frozen(kw_only=True)
class ResetOffsetRequestHeader:
    """INVOKE_BROKER_TO_RESET_OFFSET / RESET_CONSUMER_CLIENT_OFFSET request header.

    Resets ``group`` on ``topic`` to the first offset stored at or after ``timestamp``.
    ``queue_id`` and ``offset`` (the keys ``queueId`` and ``offset``, as in RocketMQ 5) narrow
    it to one queue and an explicit offset; 4.x senders leave them out.
    """

    topic: str
    group: str
    timestamp: int
    is_force: bool
    queue_id: int | None = None
    offset: int | None = None


@attrs.frozen(kw_only=True)
class GetConsumerStatusRequestHeader:
    """GET_CONSUMER_STATUS_FROM_CLIENT / INVOKE_BROKER_TO_GET_CONSUMER_STATUS request header."""

    topic: str
    group: str
    client_addr: str | None = None


@attrs.frozen(kw_only=True)
class GetConsumerRunningInfoRequestHeader:
    """GET_CONSUMER_RUNNING_INFO request header."""

    consumer_group: str
    client_id: str
    jstack_enable: bool = False


@attrs.frozen(kw_only=True)
class ConsumeMessageDirectlyResultRequestHeader:
    """CONSUME_MESSAGE_DIRECTLY request header."""

    consumer_group: str
    client_id: str | None = None
    msg_id: str | None = None
    broker_name: str | None = None


@attrs.frozen(kw_only=True)
class QueryConsumeTimeSpanRequestHeader:
    """QUERY_CONSUME_TIME_SPAN request header."""

    topic: str
    group: str


@attrs.frozen(kw_only=True)
class QueryTopicConsumeByWhoRequestHeader:
    """QUERY_TOPIC_CONSUME_BY_WHO request header."""

    topic: str


@attrs.frozen(kw_only=True)
class CloneGroupOffsetRequestHeader:
    """CLONE_GROUP_OFFSET request header."""

    src_group: str
    dest_group: str
    topic: str | None = None
    offline: bool = False
