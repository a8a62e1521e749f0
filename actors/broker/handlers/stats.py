"""The statistics requests: GET_BROKER_RUNTIME_INFO, VIEW_BROKER_STATS_DATA,
GET_TOPIC_STATS_INFO and GET_CONSUME_STATS.

They read the statistics collector (`actors.broker.services.stats`), the store and the tables
inline: no request here changes anything.
"""

from __future__ import annotations

import shutil
from collections.abc import Container, Iterable
from pathlib import Path

import attrs

from actors.broker.config import BrokerConfig
from actors.broker.ha import HighAvailability, ha_runtime_info
from actors.broker.ha.controller_mode import ControllerLink
from actors.broker.services.pop import PopService
from actors.broker.services.pop_state import PopGroupStats
from actors.broker.services.stats import (
    BROKER_VERSION_DESC,
    NUMS,
    STATS_FIELDS,
    BrokerStatsManager,
    human_readable_bytes,
)
from actors.broker.tables.clients import ClientManager
from actors.broker.tables.offsets import ConsumerOffsetManager
from actors.broker.tables.topics import TopicManager
from protocol import codecs_status
from protocol.bodies import (
    BrokerStatsData,
    BrokerStatsItem,
    ConsumeStats,
    KVTable,
    MessageQueue,
    OffsetWrapper,
    PopConsumeStats,
    TopicOffset,
    TopicStatsTable,
)
from protocol.codes import CURRENT_VERSION, ResponseCode
from protocol.command import RemotingCommand
from protocol.connection import Connection
from protocol.headers import (
    GetConsumeStatsRequestHeader,
    GetTopicStatsInfoRequestHeader,
    ViewBrokerStatsDataRequestHeader,
    decode_header,
)
from protocol.names import pop_retry_topic
from storage import MessageStore
from storage.results import put_latency_text

__all__ = ["StatsHandlers", "StatsParts", "runtime_info"]


@attrs.frozen
class StatsParts:
    """What the statistics requests read."""

    config: BrokerConfig
    store: MessageStore
    topics: TopicManager
    offsets: ConsumerOffsetManager
    clients: ClientManager
    ha: HighAvailability
    stats: BrokerStatsManager
    #: Pop groups' figures (GET_CONSUME_STATS of a group that pops); None: no pop service.
    pop: PopService | None = None
    #: Controller mode's link: its keys join the runtime info (None without controller mode).
    controller: ControllerLink | None = None


class StatsHandlers:
    """Handlers of the statistics requests."""

    def __init__(self, parts: StatsParts) -> None:
        self.parts = parts

    def get_broker_runtime_info(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        return request.response(body=KVTable(table=runtime_info(self.parts)).to_json())

    def view_broker_stats_data(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(ViewBrokerStatsDataRequestHeader, request.ext_fields)
        windows = self.parts.stats.stats_item(header.stats_name, header.stats_key)
        if windows is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"The stats <{header.stats_name}> <{header.stats_key}> not exist: names are "
                f"{', '.join(STATS_FIELDS)}; keys a topic, topic@group or the cluster name, "
                "and a key appears once it has been counted and sampled (every 10 s)",
            )
        minute, hour, day = (BrokerStatsItem(sum=w.sum, tps=w.tps, avgpt=w.avgpt) for w in windows)
        body = BrokerStatsData(stats_minute=minute, stats_hour=hour, stats_day=day)
        return request.response(body=body.to_json())

    def get_topic_stats_info(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(GetTopicStatsInfoRequestHeader, request.ext_fields)
        parts = self.parts
        topic = header.topic
        topic_config = parts.topics.select(topic)
        if topic_config is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{topic}] not exist on broker {parts.config.broker_name}",
            )
        store = parts.store
        table: dict[MessageQueue, TopicOffset] = {}
        for queue_id in range(topic_config.write_queue_nums):
            low = max(store.get_min_offset_in_queue(topic, queue_id), 0)
            high = max(store.get_max_offset_in_queue(topic, queue_id), 0)
            last = store.get_message_store_timestamp(topic, queue_id, high - 1) if high else 0
            table[self._queue(topic, queue_id)] = TopicOffset(
                min_offset=low, max_offset=high, last_update_timestamp=max(last, 0)
            )
        return request.response(body=TopicStatsTable(offset_table=table).to_json())

    def get_consume_stats(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(GetConsumeStatsRequestHeader, request.ext_fields)
        parts = self.parts
        group = header.consumer_group
        topics = (
            {header.topic} if header.topic and header.topic.strip()
            else parts.offsets.topics_of_group(group)
        )  # fmt: skip
        info = parts.clients.get_consumer_group_info(group)
        table: dict[MessageQueue, OffsetWrapper] = {}
        consume_tps = 0.0
        pop_stats = self._pop_stats(group, header.topic)
        # A pop group's queues in flight, by (topic read, queue id): the topic's and its
        # pop retry topic's.
        in_flight = {
            queue: count for stat in pop_stats.values() for queue, count in stat.in_flight.items()
        }
        # A pop group's topics and their pop retry topics (whose rows are its retries
        # waiting), listed even before its first offset commit on them.
        topics = set(topics)
        for topic in pop_stats:
            topics.update((topic, pop_retry_topic(group, topic)))
        for topic in sorted(topics):
            topic_config = parts.topics.select(topic)
            if topic_config is None:
                continue
            if (
                info is not None
                and info.subscriptions
                and topic not in info.subscriptions
                and not _pop_retry_of(group, topic, info.subscriptions)
            ):
                continue  # the live group no longer subscribes the topic (as RocketMQ skips it)
            popping = topic in pop_stats or _pop_retry_of(group, topic, pop_stats)
            for queue_id in range(topic_config.read_queue_nums):
                broker_offset = max(parts.store.get_max_offset_in_queue(topic, queue_id), 0)
                consumer_offset = max(parts.offsets.query_offset(group, topic, queue_id), 0)
                last = 0
                if consumer_offset > 0:
                    stored = parts.store.get_message_store_timestamp(
                        topic, queue_id, consumer_offset - 1
                    )
                    last = max(stored, 0)
                table[self._queue(topic, queue_id)] = OffsetWrapper(
                    broker_offset=broker_offset,
                    consumer_offset=consumer_offset,
                    last_timestamp=last,
                    in_flight=in_flight.get((topic, queue_id), 0) if popping else None,
                )
            consume_tps += parts.stats.tps_group_get_nums(group, topic)
        body = ConsumeStats(
            offset_table=table,
            consume_tps=consume_tps,
            pop_stats=[
                PopConsumeStats(
                    topic=s.topic, ck_nums=s.ck_nums, ack_nums=s.ack_nums,
                    in_flight=s.in_flight_total, revive_nums=s.revive_nums,
                    dlq_put_nums=s.dlq_put_nums,
                )
                for s in pop_stats.values()
            ] or None,
        )  # fmt: skip
        return request.response(body=body.to_json())

    def _pop_stats(self, group: str, topic: str | None) -> dict[str, PopGroupStats]:
        """The group's pop figures by topic (only ``topic``'s when given)."""
        pop = self.parts.pop
        if pop is None:
            return {}
        wanted = topic.strip() if topic else ""
        return {
            stat.topic: stat
            for stat in pop.group_stats(group)
            if not wanted or stat.topic == wanted
        }

    def _queue(self, topic: str, queue_id: int) -> MessageQueue:
        return MessageQueue(
            topic=topic, broker_name=self.parts.config.broker_name, queue_id=queue_id
        )


def _pop_retry_of(group: str, topic: str, topics: Container[str] | Iterable[str]) -> bool:
    """Whether ``topic`` is the pop retry topic of ``group`` on one of ``topics``."""
    prefix = pop_retry_topic(group, "")
    return topic.startswith(prefix) and topic[len(prefix) :] in topics


def runtime_info(parts: StatsParts) -> dict[str, str]:
    """GET_BROKER_RUNTIME_INFO's table: the keys of sheet 4.12 this broker can fill honestly."""
    stats = parts.stats
    store = parts.store.statistics()
    now_ms = int(stats.wall_clock() * 1000)
    up = max(now_ms - stats.boot_timestamp, 0) // 1000
    root = parts.config.store_root
    info = {
        "brokerVersionDesc": BROKER_VERSION_DESC,
        "brokerVersion": str(CURRENT_VERSION),
        "msgPutTotalYesterdayMorning": str(stats.msg_put_total_yesterday_morning),
        "msgPutTotalTodayMorning": str(stats.msg_put_total_today_morning),
        "msgPutTotalTodayNow": str(stats.broker_put[NUMS]),
        "msgGetTotalYesterdayMorning": str(stats.msg_get_total_yesterday_morning),
        "msgGetTotalTodayMorning": str(stats.msg_get_total_today_morning),
        "msgGetTotalTodayNow": str(stats.broker_get[NUMS]),
        "dispatchBehindBytes": str(store.dispatch_behind_bytes),
        "earliestMessageTimeStamp": str(parts.store.get_earliest_message_store_time()),
        "remainHowManyDataToFlush": human_readable_bytes(
            max(store.commit_log_max_offset - store.flushed_offset, 0)
        ),
        "bootTimestamp": str(stats.boot_timestamp),
        "runtime": f"[ {up // 86400} days, {up % 86400 // 3600} hours, "
        f"{up % 3600 // 60} minutes, {up % 60} seconds ]",
        "putMessageTimesTotal": str(store.put_messages),
        "putMessageFailedTimes": str(store.put_failures),
        "putMessageSizeTotal": str(store.put_bytes),
        "putMessageAverageSize": repr(store.put_bytes / max(store.put_messages, 1)),
        "putMessageDistributeTime": put_latency_text(store.put_latency),
        "putTps": stats.put_tps(),
        "getFoundTps": stats.get_found_tps(),
        "getTransferedTps": stats.get_transfered_tps(),
        "commitLogMinOffset": str(store.commit_log_min_offset),
        "commitLogMaxOffset": str(store.commit_log_max_offset),
        # BoltMQ's own: "compiled", or "pure (<why>)", the codec path this broker runs.
        "codecs": codecs_status(),
    }
    if root.exists():
        usage = shutil.disk_usage(root)
        info["commitLogDirCapacity"] = (
            f"Total : {human_readable_bytes(usage.total)}, "
            f"Free : {human_readable_bytes(usage.free)}."
        )
        for key, path in (
            ("commitLogDiskRatio", root / "commitlog"),
            ("consumeQueueDiskRatio", root / "consumequeue"),
        ):
            info[key] = repr(_disk_ratio(path if path.exists() else root))
    info.update(ha_runtime_info(parts.ha))  # replication lag (actors.broker.ha)
    if parts.controller is not None:  # role, epoch, SyncStateSet (actors.broker.ha)
        info.update(parts.controller.runtime_info())
    return info


def _disk_ratio(path: Path) -> float:
    usage = shutil.disk_usage(path)
    return (usage.total - usage.free) / usage.total if usage.total else 0.0
