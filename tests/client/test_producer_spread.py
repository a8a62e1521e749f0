"""Queue choice over two broker groups: sends go round robin over every writable queue of the
topic, on both brokers, also for a topic the brokers create on its first send (TBW102).

The cluster is two processes (tests/client/two_groups.py), on trio and asyncio.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import anyio
import pytest

from client import ClientInstance, Message, Producer
from tests.support.waiting import wait_until

from .two_groups import TwoBrokerGroups, routes_to, stored_per_broker, two_groups

__all__ = ["two_groups"]

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]
Unique = Callable[[str], str]


async def test_many_senders_to_a_new_topic_spread_over_both_brokers(
    two_groups: TwoBrokerGroups, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("SpreadMany")
    results: Counter[str] = Counter()
    async with Producer(unique("PG"), namesrv_addr=two_groups.namesrv) as producer:

        async def sender() -> None:
            for _ in range(20):
                results[(await producer.send(Message(topic, b"m"))).queue.broker_name] += 1

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for _ in range(16):
                    tg.start_soon(sender)
    # Round robin over 8 queues, 4 on each broker: an even split whatever the timing.
    assert results == {"broker-a": 160, "broker-b": 160}
    await routes_to(two_groups.namesrv, topic)
    await wait_until(
        lambda: _stored_is(two_groups.namesrv, topic, results), 15, "the brokers' counts"
    )


async def _stored_is(namesrv: str, topic: str, expected: Counter[str]) -> bool:
    return await stored_per_broker(namesrv, topic) == expected


async def test_tbw102s_queues_serve_until_the_route_poll_though_one_broker_registered_first(
    two_groups: TwoBrokerGroups, unique: Unique, anyio_backend: str
) -> None:
    # The race of a fresh topic, made certain: broker-a stores a first message and registers
    # the topic before the producer's next send. A producer that then took the registry's
    # route would send to broker-a alone, and broker-b would never create the topic.
    topic = unique("SpreadRace")
    async with Producer(unique("PG"), namesrv_addr=two_groups.namesrv) as producer:
        template = await producer.queues(topic)
        assert Counter(q.broker_name for q in template) == {"broker-a": 4, "broker-b": 4}
        first = await producer.send(Message(topic, b"first"), queue=template[0])
        assert first.queue.broker_name == "broker-a"
        await routes_to(two_groups.namesrv, topic, ("broker-a",))
        with anyio.fail_after(30):
            sent = [await producer.send(Message(topic, f"m{i}".encode())) for i in range(8)]
    assert Counter(r.queue.broker_name for r in sent) == {"broker-a": 4, "broker-b": 4}
    await routes_to(two_groups.namesrv, topic)


async def test_after_the_route_poll_the_producer_follows_the_registrys_route(
    two_groups: TwoBrokerGroups, unique: Unique, anyio_backend: str
) -> None:
    # TBW102's queues are not kept for ever: once the poll interval has passed, the route the
    # registry gives (here broker-a's alone: an operator's choice) is the one sent to.
    topic = unique("SpreadPoll")
    async with (
        ClientInstance(two_groups.namesrv, poll_name_server_interval=0.5) as instance,
        Producer(unique("PG"), instance=instance) as producer,
    ):
        template = await producer.queues(topic)
        await producer.send(Message(topic, b"first"), queue=template[0])
        await routes_to(two_groups.namesrv, topic, ("broker-a",))

        async def on_broker_a_alone() -> bool:
            return {q.broker_name for q in await producer.queues(topic)} == {"broker-a"}

        await wait_until(on_broker_a_alone, 15, "the producer taking the registry's route")
        with anyio.fail_after(30):
            sent = [await producer.send(Message(topic, b"m")) for _ in range(8)]
    assert {r.queue.broker_name for r in sent} == {"broker-a"}
    expected = Counter({"broker-a": 9})
    await wait_until(
        lambda: _stored_is(two_groups.namesrv, topic, expected), 15, "broker-a's count"
    )
