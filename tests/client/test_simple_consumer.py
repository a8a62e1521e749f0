"""`SimpleConsumer` against the session's real cluster, on trio and on asyncio: every message
received and acked exactly once, an unacked one back with its second attempt, a change of
invisible duration, a tag filter, a FIFO group, and forward to the dead-letter queue.

Loopback only; every wait has a deadline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from client import (
    Admin,
    Message,
    MessageSelector,
    MQClientError,
    PoppedMessage,
    Producer,
    SimpleConsumer,
)
from protocol.bodies import SubscriptionGroupConfig

from .helpers import create_topic

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
Unique = Callable[[str], str]
trio_only = pytest.mark.parametrize("anyio_backend", ["trio"])


async def send(cluster: Any, topic: str, bodies: list[bytes], **kwargs: Any) -> None:
    """Send each body to ``topic``."""
    async with Producer("PG_simple", namesrv_addr=cluster.namesrv) as producer:
        for body in bodies:
            await producer.send(Message(topic, body, **kwargs))


async def receive_n(
    consumer: SimpleConsumer, count: int, invisible: float = 30.0
) -> list[PoppedMessage]:
    """Receive until ``count`` messages came (10 s at most)."""
    got: list[PoppedMessage] = []
    with anyio.fail_after(10):
        while len(got) < count:
            got += await consumer.receive(16, invisible)
    return got


async def test_receive_and_ack_every_message_exactly_once(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("SimpleTopic"), unique("CG_simple")
    await create_topic(cluster, topic, 4)
    bodies = [f"s{i}".encode() for i in range(50)]
    await send(cluster, topic, bodies)
    async with SimpleConsumer(group, namesrv_addr=cluster.namesrv, subscriptions={topic: "*"},
                              await_duration=1) as consumer:  # fmt: skip
        got = await receive_n(consumer, 50)
        assert sorted(p.message.body for p in got) == sorted(bodies)
        for popped in got:
            await consumer.ack(popped)
        assert await consumer.receive(16, 30) == []  # waited await_duration, nothing back


@trio_only
async def test_unacked_returns_and_change_invisible_extends(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("SimpleTopic"), unique("CG_simple")
    await create_topic(cluster, topic, 1)
    await send(cluster, topic, [b"dropped", b"kept"])
    async with SimpleConsumer(group, cluster.namesrv, subscriptions={topic: "*"},
                              await_duration=1) as consumer:  # fmt: skip
        got = await receive_n(consumer, 2, invisible=1.5)
        kept = next(p for p in got if p.message.body == b"kept")
        kept = await consumer.change_invisible_duration(kept, 60)
        assert kept.invisible_until_ms == kept.handle.invisible_until_ms
        (back,) = await receive_n(consumer, 1)
        assert back.message.body == b"dropped" and back.delivery_attempt == 2
        await consumer.ack(back)
        await consumer.ack(kept)
        assert await consumer.receive(16, 30) == []


@trio_only
async def test_tag_filter_and_forward_to_dead_letter(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("SimpleTopic"), unique("CG_simple")
    await create_topic(cluster, topic, 2)
    await send(cluster, topic, [b"a1", b"a2"], tags="TagA")
    await send(cluster, topic, [b"b1"], tags="TagB")
    selector = MessageSelector.by_tag("TagA")
    subscriptions = {topic: selector}
    async with SimpleConsumer(group, registry_address=cluster.namesrv, subscriptions=subscriptions,
                              await_duration=0.5) as consumer:  # fmt: skip
        got = await receive_n(consumer, 2)
        assert sorted(p.message.body for p in got) == [b"a1", b"a2"]
        await consumer.ack(got[0])
        await consumer.forward_to_dead_letter(got[1])
        with pytest.raises(MQClientError):
            await consumer.ack(got[1])  # forwarded is acked
        for _ in range(2):  # every broker route once: TagB never comes
            assert await consumer.receive(16, 30) == []
    dlq = f"%DLQ%{group}"
    async with SimpleConsumer("CG_reader_" + group, namesrv_addr=cluster.namesrv,
                              subscriptions={dlq: "*"}, await_duration=1) as reader:  # fmt: skip
        (dead,) = await receive_n(reader, 1)
        assert dead.message.body == got[1].message.body


@trio_only
async def test_fifo_group_hands_out_the_next_message_after_the_ack(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("SimpleTopic"), unique("CG_fifo")
    await create_topic(cluster, topic, 1)
    async with Admin(namesrv_addr=cluster.namesrv) as admin:
        await admin.create_group(
            SubscriptionGroupConfig(group_name=group, consume_message_orderly=True),
            broker_addr=cluster.broker,
        )
    await send(cluster, topic, [b"1", b"2", b"3", b"4"])
    async with SimpleConsumer(group, namesrv_addr=cluster.namesrv, subscriptions={topic: "*"},
                              await_duration=0.3) as consumer:  # fmt: skip
        assert consumer.fifo is True
        order: list[bytes] = []
        with anyio.fail_after(10):
            while len(order) < 4:
                batch = await consumer.receive(2, 30)
                if not batch:
                    continue
                assert await consumer.receive(2, 30) == []  # held until acked
                for popped in batch:
                    order.append(popped.message.body)
                    await consumer.ack(popped)
        assert order == [b"1", b"2", b"3", b"4"]


async def test_bad_arguments_are_refused_before_anything_is_sent(cluster: Any) -> None:
    with pytest.raises(ValueError):
        SimpleConsumer("G", namesrv_addr=cluster.namesrv, subscriptions={})
    with pytest.raises(ValueError):
        SimpleConsumer("G", cluster.namesrv, registry_address=cluster.namesrv,
                       subscriptions={"T": "*"})  # fmt: skip
    with pytest.raises(MQClientError):
        async with SimpleConsumer("G", namesrv_addr=cluster.namesrv,
                                  subscriptions={"NoSuchTopic_x1": "*"}):  # fmt: skip
            pass
    consumer = SimpleConsumer("G", namesrv_addr=cluster.namesrv, subscriptions={"T": "*"})
    with pytest.raises(RuntimeError):
        await consumer.receive(1, 1)
