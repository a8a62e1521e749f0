"""Latency-based fault avoidance: the pure strategy on a hand-driven clock, then a producer
against a route that names a dead broker, on trio and asyncio.

The dead broker is a registration only (REGISTER_BROKER over a live connection, its address a
closed port), as in test_instance.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from client import Admin, Message, Producer, SendStatus
from client.fault import LatencyFaultTolerance, MQFaultStrategy
from protocol.bodies import (
    DataVersion,
    MessageQueue,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from protocol.client import RemotingClient
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import RegisterBrokerRequestHeader, encode_header

from .helpers import free_port

Unique = Callable[[str], str]


class Clock:
    """A clock the test moves by hand (milliseconds)."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def queues_of(*brokers: str, count: int = 2) -> list[MessageQueue]:
    return [
        MessageQueue(topic="T", broker_name=b, queue_id=i) for b in brokers for i in range(count)
    ]


# -- the pure strategy ---------------------------------------------------------------------------


def test_latency_table_maps_to_avoidance_durations() -> None:
    strategy = MQFaultStrategy(enabled=True)
    table = {0: 0, 49: 0, 50: 0, 100: 0, 549: 0, 550: 30000, 999: 30000, 1000: 60000,
             2000: 120000, 3000: 180000, 14999: 180000, 15000: 600000, 30000: 600000}  # fmt: skip
    for latency, duration in table.items():
        assert strategy.not_available_duration(latency) == duration, latency


def test_a_failed_broker_is_avoided_until_its_duration_ends() -> None:
    clock = Clock()
    strategy = MQFaultStrategy(enabled=True, clock=clock)
    queues = queues_of("a", "b")
    strategy.update("a", 12.0, isolation=True)  # a failure counts as a 30 s latency: 600 s
    picked = {strategy.select(queues, index, None).broker_name for index in range(8)}
    assert picked == {"b"}
    clock.now += 599_999
    assert not strategy.tolerance.is_available("a")
    clock.now += 1
    assert strategy.tolerance.is_available("a")
    picked = {strategy.select(queues, index, None).broker_name for index in range(8)}
    assert picked == {"a", "b"}


def test_a_slow_broker_is_avoided_for_the_table_duration() -> None:
    clock = Clock()
    strategy = MQFaultStrategy(enabled=True, clock=clock)
    strategy.update("a", 600.0, isolation=False)  # >= 550 ms: 30 s
    strategy.update("b", 80.0, isolation=False)  # fast: never avoided
    assert not strategy.tolerance.is_available("a") and strategy.tolerance.is_available("b")
    clock.now += 30_000
    assert strategy.tolerance.is_available("a")


def test_when_every_broker_is_avoided_the_least_bad_one_is_used() -> None:
    clock = Clock()
    strategy = MQFaultStrategy(enabled=True, clock=clock)
    queues = queues_of("a", "b", count=3)
    strategy.update("a", 20000.0, isolation=False)  # 600 s, latency 20 s
    strategy.update("b", 1200.0, isolation=False)  # 60 s, latency 1.2 s: the better one
    assert {strategy.select(queues, index, None).broker_name for index in range(6)} == {"b"}
    # A reported broker that does not serve the topic is forgotten, plain round robin follows.
    tolerance = LatencyFaultTolerance(clock)
    for name, latency in (("a", 20000.0), ("b", 20000.0), ("x", 100.0)):
        tolerance.update(name, latency, 600000)
    strategy.tolerance = tolerance
    assert strategy.select(queues, 4, None) == queues[4]
    assert [item.broker_name for item in tolerance.items()] == ["a", "b"]


def test_a_retry_prefers_another_broker_and_off_means_round_robin() -> None:
    queues = queues_of("a", "b")
    on = MQFaultStrategy(enabled=True, clock=Clock())
    assert on.select(queues, 0, "a").broker_name == "b"
    off = MQFaultStrategy()
    off.update("a", 30000.0, isolation=True)  # ignored while off
    assert [off.select(queues, i, None) for i in range(4)] == queues
    assert off.select(queues, 0, "a").broker_name == "b"
    assert off.tolerance.items() == []


def test_bad_tables_are_refused() -> None:
    with pytest.raises(ValueError, match="one duration per latency"):
        MQFaultStrategy(latency_max_ms=[1, 2], not_available_duration_ms=[0])
    with pytest.raises(ValueError, match="ascend"):
        MQFaultStrategy(latency_max_ms=[5, 1], not_available_duration_ms=[0, 0])


# -- a producer against a dead broker ------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_producer_avoids_a_dead_broker_after_one_failure(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("FaultTopic")
    dead = unique("aaa-dead")  # sorts before the live broker: round robin meets it first
    async with Admin(namesrv_addr=cluster.namesrv) as admin:
        [cluster_name] = (await admin.cluster_info()).cluster_addr_table
        await admin.create_topic(topic, broker_addr=cluster.broker, queue_nums=2)
    config = TopicConfig(topic_name=topic, read_queue_nums=2, write_queue_nums=2)
    body = RegisterBrokerBody(
        topic_config_serialize_wrapper=TopicConfigSerializeWrapper(
            topic_config_table={topic: config}, data_version=DataVersion(timestamp=1, counter=1)
        )
    ).encode()
    header = RegisterBrokerRequestHeader(
        broker_name=dead, broker_addr=f"127.0.0.1:{free_port()}",
        cluster_name=cluster_name, ha_server_addr="127.0.0.1:2", broker_id=0,
    )  # fmt: skip
    live = cluster.found["broker_name"]
    async with RemotingClient() as registrar:  # the registration lives while this is open
        answer = await registrar.invoke(
            cluster.namesrv,
            RemotingCommand.request(RequestCode.REGISTER_BROKER, encode_header(header), body),
        )
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        failures = {}
        for enabled in (False, True):
            async with Producer(unique("PG"), namesrv_addr=cluster.namesrv,
                                send_latency_fault_enable=enabled) as producer:  # fmt: skip
                with anyio.fail_after(20):
                    while len({q.broker_name for q in await producer.queues(topic)}) < 2:
                        await producer.instance.update_route(topic)
                    results = [
                        await producer.send(Message(topic, f"f{i}".encode())) for i in range(12)
                    ]
                assert all(r.status is SendStatus.SEND_OK for r in results)
                assert {r.queue.broker_name for r in results} == {live}
                failures[enabled] = producer.statistics().failed_attempts
                if enabled:
                    tolerance = producer.fault_strategy.tolerance
                    assert not tolerance.is_available(dead)
                    assert tolerance.is_available(live)
    async with Admin(namesrv_addr=cluster.namesrv) as admin:
        with anyio.fail_after(10):  # the registration ends with its connection: leave no trace
            while dead in (await admin.cluster_info()).broker_addr_table:
                await anyio.sleep(0.05)
    # Off, round robin keeps landing on the dead broker; on, it is tried once and then avoided.
    assert failures[True] == 1
    assert failures[False] >= 3
