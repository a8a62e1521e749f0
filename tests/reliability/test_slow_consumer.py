"""A consumer far slower than the producers, beside a fast one of another group.

The slow group's backlog stays in the store, not in the broker's memory: the broker answers
each pull with at most pullBatchSize messages and holds nothing per group beyond its held
pulls, so its memory (VmRSS) stays within a bound while the backlog grows; the fast group
consumes everything while the slow one lags, and both end with every message.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from boltmq import (
    Admin,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    Producer,
    PushConsumer,
)
from protocol.message import MessageExt
from tests.reliability.nodes import broker_node, registry_node
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(150)

TOPIC = "SlowTopic"
MESSAGES = 2000
BODY = 4096
#: The broker's memory growth allowed while the slow group's backlog grows to ~8 MiB.
GROWTH_BOUND_MIB = 64


async def test_a_slow_consumer_does_not_grow_the_broker_or_slow_the_others(
    tmp_path: Path,
) -> None:
    registry = registry_node(tmp_path)
    await registry.start()
    broker = broker_node(tmp_path, "broker-a-0", registry.address)
    await broker.start()
    fast: set[bytes] = set()
    slow: set[bytes] = set()

    def on_fast(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        fast.update(m.body[:16] for m in messages)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    async def on_slow(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        await trio.sleep(0.05)
        slow.update(m.body[:16] for m in messages)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    try:
        async with Admin(namesrv_addr=registry.address) as admin:
            await admin.create_topic(TOPIC, broker_addr=broker.address, queue_nums=2)

            async def routed() -> bool:
                try:
                    return bool((await admin.route(TOPIC)).broker_datas)
                except Exception:
                    return False

            await wait_until(routed, 30, "the topic's route")
        consumers = [
            PushConsumer(
                group,
                listener,
                namesrv_addr=registry.address,
                instance_name=group,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                consume_thread_max=2,
                pull_threshold_for_queue=64,
            )
            for group, listener in (("FastGroup", on_fast), ("SlowGroup", on_slow))
        ]
        for consumer in consumers:
            consumer.subscribe(TOPIC)
        base_rss = broker.rss_kib()
        peak_rss = base_rss
        async with consumers[0], consumers[1]:
            async with Producer("SlowProducer", namesrv_addr=registry.address) as producer:
                for n in range(MESSAGES):
                    body = f"{n:016d}".encode() + bytes(BODY - 16)
                    await producer.send(Message(TOPIC, body))
                    if n % 200 == 0:
                        peak_rss = max(peak_rss, broker.rss_kib())
            expected = {f"{n:016d}".encode() for n in range(MESSAGES)}
            await wait_until(lambda: fast >= expected, 60, "the fast group consuming all")
            peak_rss = max(peak_rss, broker.rss_kib())
            assert len(slow) < MESSAGES  # the slow group still lags
            growth = (peak_rss - base_rss) / 1024
            print(f"slow consumer {len(slow)}/{MESSAGES} behind the fast one: broker memory "
                  f"+{growth:.0f} MiB")  # fmt: skip
            assert growth < GROWTH_BOUND_MIB
    finally:
        await broker.stop()
        await registry.stop()
