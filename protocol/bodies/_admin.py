"""Operator answers: consume and topic stats, offset resets, broker stats, consume time spans
(sheet 4.8, 4.9); the MessageQueue-keyed ones are written in fastjson's form.
"""

from __future__ import annotations

import datetime
from typing import Any, ClassVar

import attrs

from protocol.bodies._codec import Body, MessageQueue, converter, unstructure_factory


@attrs.frozen(kw_only=True)
class OffsetWrapper(Body):
    """One queue's line in ConsumeStats."""

    broker_offset: int = 0
    consumer_offset: int = 0
    last_timestamp: int = 0
    #: BoltMQ, a pop group's queue only: messages popped and not yet acked nor come back
    #: (left out otherwise, so a 4.x answer is unchanged; 4.x tools ignore it).
    in_flight: int | None = None


@attrs.frozen(kw_only=True)
class PopConsumeStats(Body):
    """BoltMQ: one pop group's figures on one topic of one broker, in ConsumeStats'
    ``popStats``; the counts are since the broker started, named after RocketMQ 5's
    BrokerStatsManager keys (GROUP_CK_NUMS, GROUP_ACK_NUMS, DLQ_PUT_NUMS)."""

    topic: str
    ck_nums: int = 0  # messages popped
    ack_nums: int = 0  # messages acked
    in_flight: int = 0  # popped, not yet acked nor come back
    revive_nums: int = 0  # come back after their invisible time (retried)
    dlq_put_nums: int = 0  # moved to the dead-letter queue


@attrs.frozen(kw_only=True)
class ConsumeStats(Body):
    """GET_CONSUME_STATS body (MessageQueue object keys)."""

    _fastjson_form: ClassVar[bool] = True
    offset_table: dict[MessageQueue, OffsetWrapper] = attrs.Factory(dict)
    consume_tps: float = 0.0
    #: BoltMQ: a group that pops has a line per topic here (absent for other groups).
    pop_stats: list[PopConsumeStats] | None = None


@attrs.frozen(kw_only=True)
class TopicOffset(Body):
    """One queue's line in TopicStatsTable."""

    min_offset: int = 0
    max_offset: int = 0
    last_update_timestamp: int = 0


@attrs.frozen(kw_only=True)
class TopicStatsTable(Body):
    """GET_TOPIC_STATS_INFO body (MessageQueue object keys)."""

    _fastjson_form: ClassVar[bool] = True
    offset_table: dict[MessageQueue, TopicOffset] = attrs.Factory(dict)


@attrs.frozen(kw_only=True)
class ResetOffsetBody(Body):
    """RESET_CONSUMER_CLIENT_OFFSET / INVOKE_BROKER_TO_RESET_OFFSET body (object keys)."""

    _fastjson_form: ClassVar[bool] = True
    offset_table: dict[MessageQueue, int] = attrs.Factory(dict)


@attrs.frozen(kw_only=True)
class BrokerStatsItem(Body):
    """One window of BrokerStatsData."""

    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0


@attrs.frozen(kw_only=True)
class BrokerStatsData(Body):
    """VIEW_BROKER_STATS_DATA body."""

    stats_minute: BrokerStatsItem = attrs.Factory(BrokerStatsItem)
    stats_hour: BrokerStatsItem = attrs.Factory(BrokerStatsItem)
    stats_day: BrokerStatsItem = attrs.Factory(BrokerStatsItem)


@attrs.frozen(kw_only=True)
class QueueTimeSpan(Body):
    """One queue's times in QueryConsumeTimeSpanBody; written with the ``*Str`` renderings."""

    message_queue: MessageQueue
    min_time_stamp: int = 0
    max_time_stamp: int = 0
    consume_time_stamp: int = 0
    delay_time: int = 0


@attrs.frozen(kw_only=True)
class QueryConsumeTimeSpanBody(Body):
    """QUERY_CONSUME_TIME_SPAN body."""

    consume_time_span_set: list[QueueTimeSpan] = attrs.Factory(list)


_unstructure_time_span = unstructure_factory(QueueTimeSpan)


def _time_span_to(span: QueueTimeSpan) -> dict[str, Any]:
    obj: dict[str, Any] = _unstructure_time_span(span)
    obj["minTimeStampStr"] = _human_time(span.min_time_stamp)
    obj["maxTimeStampStr"] = _human_time(span.max_time_stamp)
    obj["consumeTimeStampStr"] = _human_time(span.consume_time_stamp)
    return obj


converter.register_unstructure_hook(QueueTimeSpan, _time_span_to)


def _human_time(millis: int) -> str:
    # Java's UtilAll.timeMillisToHumanString2 layout: "yyyy-MM-dd HH:mm:ss,SSS", local time.
    moment = datetime.datetime.fromtimestamp(millis / 1000)
    return moment.strftime("%Y-%m-%d %H:%M:%S,") + f"{millis % 1000:03d}"
