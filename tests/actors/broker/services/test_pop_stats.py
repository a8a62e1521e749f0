"""Pop groups seen by an operator: GET_CONSUME_STATS (a pop group's queues with their
messages in flight and its popped / acked / retried / dead-lettered counts), the metrics
scrape and the terminal monitor's group row, each changing as messages are popped, acked and
come back.

Loopback only, ephemeral ports, a real file store; invisible times of 1 s, and every wait for
a revive has a deadline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
from prometheus_client.core import Metric

from boltmq import EmbeddedCluster
from client.instance import ClientInstance
from monitor.collector import Collector
from monitor.model import Model, Thresholds
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.bodies import ConsumeStats, MessageQueue, PopConsumeStats
from protocol.headers import GetConsumeStatsRequestHeader, encode_header
from protocol.names import dlq_topic, pop_retry_topic
from tests.actors.broker.delays import group_request, open_cluster, send
from tests.actors.broker.pop_helpers import ack_request, pop
from tests.support.remoting import call

TOPIC, GROUP = "PopStatsT", "CG_popstats"


async def consume_stats(client: RemotingClient, address: str) -> ConsumeStats:
    header = encode_header(GetConsumeStatsRequestHeader(consumer_group=GROUP))
    answer = await call(
        client, address, RemotingCommand.request(RequestCode.GET_CONSUME_STATS, header)
    )
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return ConsumeStats.from_json(answer.body or b"")


def pop_line(stats: ConsumeStats) -> PopConsumeStats:
    [line] = stats.pop_stats or []
    return line


def samples(cluster: EmbeddedCluster, name: str) -> dict[tuple[str, ...], float]:
    """One family of the broker's scrape: (topic, group[, is_retry]) -> value."""
    found: dict[tuple[str, ...], float] = {}
    families: list[Metric] = list(cluster.broker.metrics_collector.collect())
    for family in families:
        for sample in family.samples:
            if sample.name == name:
                labels: dict[str, Any] = sample.labels
                key = (labels["topic"], labels["consumer_group"])
                if "is_retry" in labels:
                    key += (labels["is_retry"],)
                found[key] = sample.value
    return found


async def monitor_row(cluster: EmbeddedCluster) -> Any:
    async with ClientInstance(cluster.registry_address, timeout=5) as instance:
        collector, model = Collector(instance, timeout=5), Model(Thresholds(disk_ratio=1.0))
        snapshot = model.update(await collector.sample())
    return next(g for g in snapshot.groups if (g.group, g.topic) == (GROUP, TOPIC))


async def test_pop_figures_follow_pops_acks_revives_and_dead_letters(tmp_path: Path) -> None:
    async with RemotingClient() as client, open_cluster(tmp_path) as cluster:
        address = cluster.broker_address
        # Two deliveries in all: the second expiry dead-letters.
        answer = await call(client, address, group_request(GROUP, retry_max_times=1))
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        for i in range(3):
            await send(client, address, TOPIC, f"m{i}".encode(), queue_id=0)
        # A group that never popped shows the 4.x answer: no pop block, no in-flight field.
        assert (await consume_stats(client, address)).pop_stats is None

        popped = await pop(client, address, TOPIC, GROUP, invisible_ms=1000)
        assert len(popped) == 3
        stats = await consume_stats(client, address)
        line = pop_line(stats)
        assert (line.topic, line.ck_nums, line.in_flight, line.ack_nums) == (TOPIC, 3, 3, 0)
        broker_name = queue0_broker(cluster)
        queue0 = stats.offset_table[MessageQueue(topic=TOPIC, broker_name=broker_name, queue_id=0)]
        assert (queue0.broker_offset, queue0.consumer_offset, queue0.in_flight) == (3, 3, 3)
        assert samples(cluster, "rocketmq_pop_messages_total") == {(TOPIC, GROUP): 3}
        assert samples(cluster, "rocketmq_consumer_inflight_messages")[(TOPIC, GROUP, "false")] == 3
        row = await monitor_row(cluster)
        assert (row.in_flight, row.acked) == (3, 0)

        answer = await call(client, address, ack_request(TOPIC, popped[0], GROUP))
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        line = pop_line(await consume_stats(client, address))
        assert (line.ack_nums, line.in_flight) == (1, 2)
        assert samples(cluster, "rocketmq_ack_messages_total") == {(TOPIC, GROUP): 1}
        row = await monitor_row(cluster)
        assert (row.in_flight, row.acked) == (2, 1)

        # The two not acked come back through the pop retry topic.
        with trio.fail_after(15):
            while pop_line(await consume_stats(client, address)).revive_nums < 2:
                await trio.sleep(0.1)
        stats = await consume_stats(client, address)
        line = pop_line(stats)
        assert (line.in_flight, line.revive_nums, line.dlq_put_nums) == (0, 2, 0)
        retry = MessageQueue(
            topic=pop_retry_topic(GROUP, TOPIC), broker_name=broker_name, queue_id=0
        )
        assert stats.offset_table[retry].broker_offset == 2  # the retries waiting
        assert samples(cluster, "rocketmq_pop_revive_messages_total") == {(TOPIC, GROUP): 2}
        row = await monitor_row(cluster)
        assert row.in_flight == 0 and row.retry_depth == 2

        # Popped again from the retry topic and left to expire: the DLQ this time.
        again: list[Any] = []
        with trio.fail_after(15):
            while len(again) < 2:
                again += await pop(client, address, TOPIC, GROUP, invisible_ms=1000, poll_ms=300)
        stats = await consume_stats(client, address)
        assert stats.offset_table[retry].in_flight == 2
        with trio.fail_after(15):
            while pop_line(await consume_stats(client, address)).dlq_put_nums < 2:
                await trio.sleep(0.1)
        line = pop_line(await consume_stats(client, address))
        assert (line.ck_nums, line.ack_nums, line.in_flight, line.revive_nums) == (5, 1, 0, 2)
        dead = samples(cluster, "rocketmq_send_to_dlq_messages_total")
        assert dead == {(TOPIC, GROUP): 2}
        assert dlq_topic(GROUP) in cluster.broker.topics.topic_config_table


def queue0_broker(cluster: EmbeddedCluster) -> str:
    return cluster.broker.config.broker_name
