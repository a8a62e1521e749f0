"""The broker's Prometheus metrics: RocketMQ 5's names, plus the rocketmq-exporter gauges.

`BrokerMetricsCollector` is a prometheus_client collector that reads, at scrape time, the
records the broker keeps anyway: the statistics collector (`actors.broker.services.stats`), the
request counters (`actors.broker.services.request_stats`), the offset, topic and client tables,
the store's statistics and the HA links. Nothing is added to the send path for a scrape; a
scrape runs in the trio thread (`supervisors.metrics_http`), so it reads the tables as any
inline handler does (the text is then formatted from that snapshot in a worker thread).
docs/operations.md lists every name with its labels and meaning.

RocketMQ 5's series carry ``cluster``, ``node_type="broker"`` and ``node_id`` (the broker
name), as BrokerMetricsManager labels them. The rocketmq-exporter gauges (rocketmq_producer_tps
and the rest, read by the Grafana dashboard 10477) keep the exporter's own label names
(``cluster``, ``broker``, ``topic``, ``group``...) so that dashboard works unchanged.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import attrs
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from actors.broker.config import BrokerConfig
from actors.broker.ha import HAClientStatistics, HAStatistics, HighAvailability
from actors.broker.services.pop import PopService
from actors.broker.services.pop_state import PopGroupStats
from actors.broker.services.request_stats import (
    MESSAGE_SIZE_BUCKETS,
    MESSAGE_TYPES,
    TYPED_BUCKETS,
    RequestStats,
)
from actors.broker.services.stats import NUMS, SIZE, BrokerStatsManager
from actors.broker.tables.clients import ClientManager
from actors.broker.tables.groups import SubscriptionGroupManager
from actors.broker.tables.offsets import ConsumerOffsetManager
from actors.broker.tables.topics import TopicManager
from protocol import codecs_status
from protocol.bodies import ConsumeType, MessageModel
from protocol.names import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    BENCHMARK_TOPIC,
    CID_RMQ_SYS_PREFIX,
    OFFSET_MOVED_EVENT,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    SYSTEM_TOPIC_PREFIX,
    is_retry_or_dlq_topic,
)
from protocol.rpc_metrics import rpc_latency_family
from storage import MessageStore

__all__ = ["BrokerMetricsCollector", "ConsumerLag", "MetricsParts", "codecs_family"]

#: RocketMQ's system consumer groups start with this (any case); system topics with
#: `SYSTEM_TOPIC_PREFIX`, besides the ones named in `_SYSTEM_TOPICS`.
SYSTEM_GROUP_PREFIX = CID_RMQ_SYS_PREFIX.lower()
_SYSTEM_TOPICS = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY_TOPIC,
        SCHEDULE_TOPIC,
        BENCHMARK_TOPIC,
        OFFSET_MOVED_EVENT,
        SELF_TEST_TOPIC,
    }
)
# The exporter labels a clustering group's diff with MessageModel.CLUSTERING's ordinal.
_CLUSTERING = str(int(MessageModel.CLUSTERING))
_CONSUME_MODES = {ConsumeType.CONSUME_ACTIVELY: "pull", ConsumeType.CONSUME_PASSIVELY: "push"}


@attrs.frozen
class MetricsParts:
    """What the collector reads at each scrape: the broker's tables, store and counters."""

    config: BrokerConfig
    store: MessageStore
    topics: TopicManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    clients: ClientManager
    ha: HighAvailability
    stats: BrokerStatsManager
    request_stats: RequestStats
    #: Pop groups' figures (RocketMQ 5's pop); None: not served.
    pop: PopService | None = None


@attrs.frozen
class ConsumerLag:
    """One group's backlog on one topic of this broker, over the queues it has committed on."""

    group: str
    topic: str
    lag_messages: int  # sum over queues of max offset - committed offset
    lag_latency_ms: int  # age of the oldest unconsumed message (0 without a backlog)
    consumer_offset: int  # sum of the committed offsets


def is_system(topic: str, group: str = "") -> bool:
    """RocketMQ's is_system label: a system topic or a system consumer group."""
    return (
        topic in _SYSTEM_TOPICS
        or topic.lower().startswith(SYSTEM_TOPIC_PREFIX)
        or group.lower().startswith(SYSTEM_GROUP_PREFIX)
    )


def _flag(value: bool) -> str:
    return "true" if value else "false"


class BrokerMetricsCollector(Collector):
    """Reads the broker's records into metric families at each scrape."""

    def __init__(self, parts: MetricsParts) -> None:
        self.parts = parts

    def collect(self) -> Iterator[Metric]:
        """Every family, RocketMQ 5's first, then the exporter's."""
        parts = self.parts
        config = parts.config
        base = {
            "cluster": config.broker_cluster_name,
            "node_type": "broker",
            "node_id": config.broker_name,
        }
        lags = self.consumer_lags()
        yield from self._traffic(base)
        yield rpc_latency_family(parts.request_stats, base)
        yield from self._consumers(base, lags)
        yield from self._storage(base)
        yield from self._ha(base)
        yield from self._exporter(lags)
        yield codecs_family(base)

    # -- RocketMQ 5 --------------------------------------------------------------------------

    def _traffic(self, base: dict[str, str]) -> Iterator[Metric]:
        stats = self.parts.stats
        names = [*base, "topic", "message_type"]
        fixed = list(base.values())
        messages_in = CounterMetricFamily(
            "rocketmq_messages_in", "Messages stored from producers' sends", labels=names
        )
        throughput_in = CounterMetricFamily(
            "rocketmq_throughput_in", "Bytes stored from producers' sends", labels=names
        )
        size = HistogramMetricFamily(
            "rocketmq_message_size", "Sizes of the messages stored, in bytes", labels=names
        )
        for topic, typed in sorted(stats.topic_put_typed.items()):
            for message_type, counter in zip(MESSAGE_TYPES, typed, strict=True):
                if not counter[0]:
                    continue
                labels = [*fixed, topic, message_type]
                messages_in.add_metric(labels, counter[0])
                throughput_in.add_metric(labels, counter[1])
                buckets: list[tuple[str, float]] = []
                running = 0
                for bound, count in zip(
                    MESSAGE_SIZE_BUCKETS, counter[TYPED_BUCKETS:], strict=False
                ):
                    running += count
                    buckets.append((str(float(bound)), running))
                buckets.append(("+Inf", running + counter[-1]))
                size.add_metric(labels, buckets, counter[1])
        yield from (messages_in, throughput_in, size)
        names = [*base, "topic", "consumer_group"]
        messages_out = CounterMetricFamily(
            "rocketmq_messages_out", "Messages consumers pulled (FOUND pulls)", labels=names
        )
        throughput_out = CounterMetricFamily(
            "rocketmq_throughput_out", "Bytes consumers pulled (FOUND pulls)", labels=names
        )
        for topic, groups in sorted(stats.group_get.items()):
            for group, get in sorted(groups.items()):
                messages_out.add_metric([*fixed, topic, group], get[NUMS])
                throughput_out.add_metric([*fixed, topic, group], get[SIZE])
        dlq = CounterMetricFamily(
            "rocketmq_send_to_dlq_messages",
            "Messages moved to a group's dead-letter queue after their last retry",
            labels=names,
        )
        dead: dict[tuple[str, str], int] = {}
        for group, topics in self.parts.request_stats.dlq_messages.items():
            for topic, count in topics.items():
                dead[(group, topic)] = count
        pop_stats = self.parts.pop.group_stats() if self.parts.pop is not None else []
        for stat in pop_stats:  # pop's dead letters join the send-back's, as in RocketMQ 5
            if stat.dlq_put_nums:
                key = (stat.group, stat.topic)
                dead[key] = dead.get(key, 0) + stat.dlq_put_nums
        for (group, topic), count in sorted(dead.items()):
            dlq.add_metric([*fixed, topic, group], count)
        yield from (messages_out, throughput_out, dlq)
        yield from self._pop(base, pop_stats)

    def _pop(self, base: dict[str, str], pop_stats: list[PopGroupStats]) -> Iterator[Metric]:
        """RocketMQ 5's in-flight gauge, and the pop counters (named in its style)."""
        fixed = list(base.values())
        names = [*base, "topic", "consumer_group"]
        families = {
            "ck": CounterMetricFamily(
                "rocketmq_pop_messages", "Messages handed out by pops", labels=names
            ),
            "ack": CounterMetricFamily(
                "rocketmq_ack_messages", "Popped messages acked", labels=names
            ),
            "revive": CounterMetricFamily(
                "rocketmq_pop_revive_messages",
                "Popped messages that came back (retried) after their invisible time",
                labels=names,
            ),
        }
        in_flight = GaugeMetricFamily(
            "rocketmq_consumer_inflight_messages",
            "Messages popped and not yet acked nor come back",
            labels=[*names, "is_retry", "is_system"],
        )
        for stat in pop_stats:
            labels = [*fixed, stat.topic, stat.group]
            families["ck"].add_metric(labels, stat.ck_nums)
            families["ack"].add_metric(labels, stat.ack_nums)
            families["revive"].add_metric(labels, stat.revive_nums)
            by_topic: dict[str, int] = {}
            for (topic, _), count in stat.in_flight.items():
                by_topic[topic] = by_topic.get(topic, 0) + count
            by_topic.setdefault(stat.topic, 0)
            for topic, count in sorted(by_topic.items()):
                in_flight.add_metric(
                    [*fixed, topic, stat.group, _flag(topic != stat.topic),
                     _flag(is_system(topic, stat.group))],
                    count,
                )  # fmt: skip
        yield from families.values()
        yield in_flight

    def _consumers(self, base: dict[str, str], lags: list[ConsumerLag]) -> Iterator[Metric]:
        fixed = list(base.values())
        names = [*base, "topic", "consumer_group", "is_retry", "is_system"]
        lag_messages = GaugeMetricFamily(
            "rocketmq_consumer_lag_messages",
            "Messages stored but not yet committed by the group",
            labels=names,
        )
        lag_latency = GaugeMetricFamily(
            "rocketmq_consumer_lag_latency",
            "Age of the group's oldest uncommitted message, in milliseconds",
            labels=names,
        )
        for lag in lags:
            labels = [
                *fixed, lag.topic, lag.group,
                _flag(is_retry_or_dlq_topic(lag.topic)),
                _flag(is_system(lag.topic, lag.group)),
            ]  # fmt: skip
            lag_messages.add_metric(labels, lag.lag_messages)
            lag_latency.add_metric(labels, lag.lag_latency_ms)
        yield from (lag_messages, lag_latency)
        clients = self.parts.clients
        producers: dict[tuple[str, str], int] = {}
        for channels in clients.producer_table.values():
            for channel in channels.values():
                member = (channel.language.name.lower(), str(channel.version))
                producers[member] = producers.get(member, 0) + 1
        family = GaugeMetricFamily(
            "rocketmq_producer_connections",
            "Producer connections",
            labels=[*base, "language", "version", "protocol_type"],
        )
        for (lang, ver), count in sorted(producers.items()):
            family.add_metric([*fixed, lang, ver, "remoting"], count)
        yield family
        consumers: dict[tuple[str, str, str, str], int] = {}
        for group, info in clients.consumer_table.items():
            mode = _CONSUME_MODES.get(info.consume_type, "push")
            for channel in info.channels.values():
                key = (group, channel.language.name.lower(), str(channel.version), mode)
                consumers[key] = consumers.get(key, 0) + 1
        family = GaugeMetricFamily(
            "rocketmq_consumer_connections",
            "Consumer connections",
            labels=[
                *base, "consumer_group", "language", "version", "consume_mode", "protocol_type",
                "is_system",
            ],
        )  # fmt: skip
        for (group, lang, ver, mode), count in sorted(consumers.items()):
            family.add_metric(
                [*fixed, group, lang, ver, mode, "remoting", _flag(is_system("", group))],
                count,
            )
        yield family
        parts = self.parts
        yield _gauge("rocketmq_topic_number", "Topics on this broker", base,
                     len(parts.topics.topic_config_table))  # fmt: skip
        yield _gauge("rocketmq_consumer_group_number", "Subscription groups on this broker", base,
                     len(parts.groups.table))  # fmt: skip
        yield _gauge("rocketmq_broker_permission", "brokerPermission (6 read-write, 4 read-only)",
                     base, parts.config.broker_permission)  # fmt: skip

    def _storage(self, base: dict[str, str]) -> Iterator[Metric]:
        parts = self.parts
        store = parts.store.statistics()
        labels = {**base, "storage_type": "local", "storage_medium": "disk"}
        root = parts.config.store_root
        if root.exists():
            usage = shutil.disk_usage(root)
            yield _gauge(
                "rocketmq_storage_size",
                "Bytes used on the store's file system",
                labels,
                usage.total - usage.free,
            )
        yield _gauge(
            "rocketmq_storage_flush_behind_bytes",
            "Commit-log bytes written but not yet flushed to disk",
            labels,
            max(store.commit_log_max_offset - store.flushed_offset, 0),
        )
        yield _gauge(
            "rocketmq_storage_dispatch_behind_bytes",
            "Commit-log bytes not yet dispatched to the consume queues and the index",
            labels,
            store.dispatch_behind_bytes,
        )
        earliest = parts.store.get_earliest_message_store_time()
        if earliest > 0:
            now_ms = int(parts.stats.wall_clock() * 1000)
            yield _gauge(
                "rocketmq_storage_message_reserve_time",
                "Age of the oldest stored message, in milliseconds",
                labels,
                max(now_ms - earliest, 0),
            )

    def _ha(self, base: dict[str, str]) -> Iterator[Metric]:
        stats = self.parts.ha.statistics()
        fixed = list(base.values())
        if isinstance(stats, HAStatistics):
            behind = GaugeMetricFamily(
                "rocketmq_ha_slave_fall_behind_bytes",
                "Commit-log bytes each connected slave is behind this master",
                labels=[*base, "slave_address"],
            )
            for slave in stats.slaves:
                behind.add_metric([*fixed, slave.address], slave.behind_bytes)
            yield behind
        elif isinstance(stats, HAClientStatistics):
            yield _gauge(
                "rocketmq_ha_master_fall_behind_bytes",
                "Commit-log bytes this slave is behind its master",
                base,
                stats.behind_bytes,
            )

    # -- rocketmq-exporter (Grafana dashboard 10477) ------------------------------------------

    def _exporter(self, lags: list[ConsumerLag]) -> Iterator[Metric]:
        parts = self.parts
        stats = parts.stats
        cluster = parts.config.broker_cluster_name
        name = parts.config.broker_name
        put_tps, get_tps = stats.broker_tps()
        labels = ["cluster", "brokerIP", "broker"]
        yield _gauge_family("rocketmq_broker_tps", "BrokerPutNums", labels,
                            [([cluster, parts.config.broker_addr, name], put_tps)])  # fmt: skip
        yield _gauge_family("rocketmq_broker_qps", "BrokerGetNums", labels,
                            [([cluster, parts.config.broker_addr, name], get_tps)])  # fmt: skip
        topics = sorted(stats.topic_put)
        labels = ["cluster", "broker", "topic"]
        yield _gauge_family("rocketmq_producer_tps", "TopicPutNums", labels, [
            ([cluster, name, topic], stats.topic_put_tps(topic, NUMS)) for topic in topics
        ])  # fmt: skip
        yield _gauge_family("rocketmq_producer_message_size", "TopicPutMessageSize", labels, [
            ([cluster, name, topic], stats.topic_put_tps(topic, SIZE)) for topic in topics
        ])  # fmt: skip
        store = parts.store
        offsets = []
        for topic, topic_config in sorted(parts.topics.topic_config_table.items()):
            total = sum(
                max(store.get_max_offset_in_queue(topic, queue_id), 0)
                for queue_id in range(topic_config.write_queue_nums)
            )
            offsets.append(([cluster, name, topic], float(total)))
        yield _gauge_family("rocketmq_producer_offset", "TopicOffset", labels, offsets)
        pairs = sorted(
            (group, topic) for topic, groups in stats.group_get.items() for group in groups
        )
        labels = ["cluster", "broker", "topic", "group"]
        yield _gauge_family("rocketmq_consumer_tps", "GroupGetNums", labels, [
            ([cluster, name, topic, group], stats.group_get_tps(group, topic, NUMS))
            for group, topic in pairs
        ])  # fmt: skip
        yield _gauge_family("rocketmq_consumer_message_size", "GroupGetMessageSize", labels, [
            ([cluster, name, topic, group], stats.group_get_tps(group, topic, SIZE))
            for group, topic in pairs
        ])  # fmt: skip
        yield _gauge_family("rocketmq_consumer_offset", "GroupBrokerTotalOffset", labels, [
            ([cluster, name, lag.topic, lag.group], float(lag.consumer_offset)) for lag in lags
        ])  # fmt: skip
        yield _gauge_family(
            "rocketmq_group_get_latency_by_storetime", "GroupGetLatencyByStoreTime", labels, [
                ([cluster, name, lag.topic, lag.group], float(lag.lag_latency_ms))
                for lag in lags
            ],
        )  # fmt: skip
        diffs = []
        for lag in lags:
            if is_retry_or_dlq_topic(lag.topic):
                continue  # the exporter keeps those apart (group_retrydiff, group_dlqdiff)
            info = parts.clients.get_consumer_group_info(lag.group)
            if info is not None and info.message_model is not MessageModel.CLUSTERING:
                continue  # as the exporter: a broadcasting group's diff means nothing
            online = str(len(info.channels)) if info is not None else "0"
            diffs.append(([lag.group, lag.topic, online, _CLUSTERING], float(lag.lag_messages)))
        yield _gauge_family(
            "rocketmq_group_diff", "GroupDiff",
            ["group", "topic", "countOfOnlineConsumers", "msgModel"], diffs,
        )  # fmt: skip

    # -- shared ----------------------------------------------------------------------------

    def consumer_lags(self) -> list[ConsumerLag]:
        """Every group's backlog per topic, over the queues it has committed an offset on."""
        parts = self.parts
        store = parts.store
        now_ms = int(parts.stats.wall_clock() * 1000)
        lags = []
        for key, queues in sorted(parts.offsets.offset_table.items()):
            topic, _, group = key.partition("@")
            lag_messages = consumer_offset = 0
            oldest = 0
            for queue_id, committed in queues.items():
                if committed < 0:
                    continue
                high = max(store.get_max_offset_in_queue(topic, queue_id), 0)
                low = max(store.get_min_offset_in_queue(topic, queue_id), 0)
                position = max(committed, low)  # what retention removed is not a backlog
                consumer_offset += committed
                if high > position:
                    lag_messages += high - position
                    stored = store.get_message_store_timestamp(topic, queue_id, position)
                    if stored > 0 and (oldest == 0 or stored < oldest):
                        oldest = stored
            latency = max(now_ms - oldest, 0) if oldest else 0
            lags.append(ConsumerLag(group, topic, lag_messages, latency, consumer_offset))
        return lags


def codecs_family(base: dict[str, str]) -> GaugeMetricFamily:
    """``boltmq_codecs_info``: 1, labelled with the codec path this broker runs and why."""
    status = codecs_status()
    path, _, reason = status.partition(" (")
    return _gauge(
        "boltmq_codecs_info",
        "The codec path this broker runs: compiled (protocol._speedups) or pure Python",
        {**base, "path": path, "reason": reason.removesuffix(")")},
        1,
    )


def _gauge(name: str, text: str, labels: dict[str, str], value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, text, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family


def _gauge_family(
    name: str, text: str, labels: list[str], samples: list[tuple[list[str], float]]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, text, labels=labels)
    for values, value in samples:
        family.add_metric(values, value)
    return family
