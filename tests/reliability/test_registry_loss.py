"""Every registry down at once, then back.

Producers and consumers that already hold a topic's route keep sending and consuming while
no registry answers; when the registries return (empty: routes live in memory) the broker
registers again within its registerNameServerPeriod, so a client that never saw the topic
finds it. The outage lasts a minute, and the intervals are short so that it holds many failures:
the clients poll the registries every second and the broker registers every second, so a minute
without registries is sixty failed polls and registrations each (the production defaults of
30 s would make it two of each).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from boltmq import (
    Admin,
    ClientInstance,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    Producer,
    PushConsumer,
    SendStatus,
)
from protocol.message import MessageExt
from tests.reliability.nodes import Node, broker_node, registry_node
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

TOPIC = "OutageTopic"
OUTAGE = 60.0


async def routed(namesrv: str, topic: str) -> bool:
    """Whether a fresh client finds ``topic``'s route through ``namesrv``."""
    async with Admin(namesrv_addr=namesrv) as admin:
        try:
            route = await admin.route(topic)
        except Exception:
            return False
        return bool(route.broker_datas)


async def test_cached_routes_keep_clients_working_while_every_registry_is_down(
    tmp_path: Path,
) -> None:
    registries = [registry_node(tmp_path, f"registry-{n}") for n in (1, 2)]
    for registry in registries:
        await registry.start()
    namesrv = ";".join(r.address for r in registries)
    broker = broker_node(tmp_path, "broker-a-0", namesrv)
    await broker.start()
    nodes: list[Node] = [*registries, broker]
    received: set[bytes] = set()

    def on_messages(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        received.update(m.body for m in messages)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    try:
        async with Admin(namesrv_addr=namesrv) as admin:
            await admin.create_topic(TOPIC, broker_addr=broker.address, queue_nums=4)
        await wait_until(lambda: routed(namesrv, TOPIC), 30, "the topic's route")
        producer_instance = ClientInstance(
            namesrv, instance_name="producer", poll_name_server_interval=1.0,
            heartbeat_broker_interval=1.0,
        )  # fmt: skip
        consumer_instance = ClientInstance(
            namesrv, instance_name="consumer", poll_name_server_interval=1.0,
            heartbeat_broker_interval=1.0,
        )  # fmt: skip
        consumer = PushConsumer(
            "OutageConsumer", on_messages, instance=consumer_instance,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            rebalance_interval=1.0,
        )  # fmt: skip
        consumer.subscribe(TOPIC)
        async with (
            producer_instance,
            consumer_instance,
            Producer("OutageProducer", instance=producer_instance) as producer,
            consumer,
        ):
            sent: set[bytes] = set()

            async def send(n: int) -> None:
                body = f"m{n}".encode()
                result = await producer.send(Message(TOPIC, body))
                assert result.status is SendStatus.SEND_OK
                sent.add(body)

            for n in range(20):
                await send(n)
            await wait_until(lambda: received >= sent, 30, "consumption before the outage")
            for registry in registries:
                await registry.kill()
            # Sixty failed route polls and registrations; sends and consumption go on.
            deadline = trio.current_time() + OUTAGE
            n = 20
            while trio.current_time() < deadline:
                await send(n)
                n += 1
                await trio.sleep(0.05)
            await wait_until(lambda: received >= sent, 30, "consumption during the outage")
            assert "OutageTopic" in producer_instance.routes
            # The registries return, empty; the broker registers again.
            for registry in registries:
                await registry.start()
            for registry in registries:
                await wait_until(lambda r=registry: routed(r.address, TOPIC), 30,
                                 f"the broker registered with {registry.address}")  # fmt: skip
            for registry in registries:
                line = f"registry {registry.address} reachable again"
                # Logged once the registry's answer is back, a moment after it routes.
                await wait_until(lambda line=line: line in broker.log_text(), 10, line)
            for m in range(n, n + 20):
                await send(m)
            await wait_until(lambda: received >= sent, 30, "consumption after the outage")
            assert len(sent) > 40
    finally:
        for node in reversed(nodes):
            await node.stop()
