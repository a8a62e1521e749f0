"""The brokers view's put latency: RocketMQ's putMessageDistributeTime summarised over the last
refresh (unit), and read from a live broker after known traffic."""

from __future__ import annotations

import pytest
import trio

import boltmq
from client.instance import ClientInstance
from monitor import latency
from monitor.collector import Collector
from monitor.model import Model, Thresholds

from .helpers import TOPICS, make_traffic

pytestmark = pytest.mark.timeout(120)

NAMES = ["[<=0ms]", "[0~10ms]", "[10~50ms]", "[50~100ms]", "[100~200ms]", "[200~500ms]",
         "[500ms~1s]", "[1~2s]", "[2~3s]", "[3~4s]", "[4~5s]", "[5~10s]", "[10s~]"]  # fmt: skip


def histogram(*counts: int) -> str:
    padded = list(counts) + [0] * (len(NAMES) - len(counts))
    return " ".join(f"{name}:{n}" for name, n in zip(NAMES, padded, strict=True)) + " "


def test_summary_since_the_broker_started() -> None:
    put = latency.summarize(histogram(90, 9, 1))
    assert put is not None
    assert (put.p99, put.over_10ms, put.puts) == ("[0~10ms]", pytest.approx(0.01), 100)
    assert put.text() == "p99 [0~10ms], 1.0% ≥10ms"
    slow = latency.summarize(histogram(50, 0, 0, 0, 50))
    assert slow is not None and slow.p99 == "[100~200ms]" and slow.over_10ms == 0.5


def test_summary_of_the_last_refresh() -> None:
    # 1000 fast puts long ago, then 10 slow ones: the recent puts are what is shown.
    put = latency.summarize(histogram(1000, 0, 10), histogram(1000))
    assert put is not None and (put.p99, put.over_10ms, put.puts) == ("[10~50ms]", 1.0, 10)
    # No put since: the whole history. A restart (counts went down): the new history.
    assert latency.summarize(histogram(5, 5), histogram(5, 5)) == latency.summarize(histogram(5, 5))
    restarted = latency.summarize(histogram(2), histogram(500, 3))
    assert restarted is not None and restarted.puts == 2


def test_nothing_to_show() -> None:
    assert latency.summarize(None) is None
    assert latency.summarize("") is None
    assert latency.summarize("not a histogram") is None
    assert latency.summarize(histogram()) is None


async def test_a_live_broker_reports_its_put_latency() -> None:
    async with boltmq.embedded() as cluster:
        await make_traffic(cluster.registry_address, cluster.broker_address)
        async with ClientInstance(cluster.registry_address, timeout=5) as instance:
            collector, model = Collector(instance, timeout=5), Model(Thresholds(disk_ratio=1.0))
            with trio.fail_after(60):
                snapshot = model.update(await collector.sample())
                info = await collector.reads.runtime_info(cluster.broker_address)
    (row,) = snapshot.brokers
    assert row.put_p99 in NAMES
    assert row.put_over_10ms is not None and 0.0 <= row.put_over_10ms <= 1.0
    assert row.put_latency is not None and row.put_latency.startswith(f"p99 {row.put_p99}, ")
    # make_traffic's sends are batches of 100: one put each, besides the topic creations.
    put = latency.summarize(info["putMessageDistributeTime"])
    assert put is not None and put.puts >= sum(-(-n // 100) for _, n in TOPICS.values())
