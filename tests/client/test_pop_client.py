"""`PopClient` against the session's real cluster: pop and ack exactly once, redelivery after
the invisible time, change of invisible time, batch ack, notification, assignment, FIFO
pops, the dead-letter queue, and receipt handles read and refused.

Loopback only; every wait has a deadline. Short invisible times (the broker's revive ticker
looks every 0.1 s) keep the redelivery tests under two seconds each.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from client import (
    Admin,
    ClientInstance,
    Message,
    MQClientError,
    PopClient,
    PoppedMessage,
    PopStatus,
    Producer,
    ReceiptHandle,
)
from protocol.bodies import SubscriptionGroupConfig
from protocol.codes import ResponseCode

from .helpers import create_topic

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
Unique = Callable[[str], str]
trio_only = pytest.mark.parametrize("anyio_backend", ["trio"])


async def send(cluster: Any, topic: str, bodies: list[bytes], **kwargs: Any) -> None:
    """Send each body to ``topic``."""
    async with Producer("PG_pop_client", namesrv_addr=cluster.namesrv) as producer:
        for body in bodies:
            await producer.send(Message(topic, body, **kwargs))


async def pop_all(
    pop: PopClient, broker: str, group: str, topic: str, count: int, **kwargs: Any
) -> list[PoppedMessage]:
    """Pop until ``count`` messages came (10 s at most)."""
    got: list[PoppedMessage] = []
    with anyio.fail_after(10):
        while len(got) < count:
            result = await pop.pop(broker, group, topic, poll_ms=1000, **kwargs)
            got += result.messages
    return got


async def test_pop_and_ack_every_message_exactly_once(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("PopTopic"), unique("CG_pop")
    await create_topic(cluster, topic, 4)
    bodies = [f"m{i}".encode() for i in range(40)]
    await send(cluster, topic, bodies, tags="TagA", keys="k1 k2")
    async with ClientInstance(cluster.namesrv) as instance:
        pop = instance.pop_client()
        got = await pop_all(pop, cluster.broker, group, topic, 40, max_messages=16)
        assert sorted(p.message.body for p in got) == sorted(bodies)
        first = got[0]
        assert first.message.topic == topic and first.message.tags == "TagA"
        assert first.message.keys == ["k1", "k2"]
        assert first.delivery_attempt == 1 and first.broker_addr == cluster.broker
        assert first.queue_offset == first.handle.offset
        assert first.invisible_until_ms == first.handle.pop_time + 30_000
        for popped in got:
            await pop.ack(popped, group=group, topic=topic)
        # Acked is done: a second ack of a handle is refused, and nothing comes back.
        with pytest.raises(MQClientError) as refused:
            await pop.ack(got[0], group=group, topic=topic)
        assert refused.value.code == ResponseCode.NO_MESSAGE
        again = await pop.pop(cluster.broker, group, topic, poll_ms=300)
        assert again.status is PopStatus.POLLING_NOT_FOUND and again.messages == []


@trio_only
async def test_an_unacked_message_comes_back_with_its_second_attempt(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("PopTopic"), unique("CG_pop")
    await create_topic(cluster, topic, 1)
    await send(cluster, topic, [b"once"])
    async with ClientInstance(cluster.namesrv) as instance:
        pop = instance.pop_client()
        (first,) = await pop_all(pop, cluster.broker, group, topic, 1, invisible_ms=400)
        (second,) = await pop_all(pop, cluster.broker, group, topic, 1, invisible_ms=30_000)
        assert second.message.body == b"once" and second.message.topic == topic
        assert (first.delivery_attempt, second.delivery_attempt) == (1, 2)
        assert second.receipt_handle != first.receipt_handle
        # The retry is acked by its own handle (read from the pop retry topic).
        await pop.ack(second.receipt_handle, group=group, topic=topic)
        with pytest.raises(MQClientError):
            await pop.ack(first, group=group, topic=topic)


@trio_only
async def test_change_invisible_extends_and_replaces_the_handle(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("PopTopic"), unique("CG_pop")
    await create_topic(cluster, topic, 1)
    await send(cluster, topic, [b"slow"])
    async with ClientInstance(cluster.namesrv) as instance:
        pop = instance.pop_client()
        (popped,) = await pop_all(pop, cluster.broker, group, topic, 1, invisible_ms=1500)
        new = await pop.change_invisible(popped, 60_000, group=group, topic=topic)
        assert new != popped.receipt_handle
        assert ReceiptHandle.parse(new).invisible_until_ms >= popped.invisible_until_ms + 58_000
        # Past the first invisible time it is still hidden.
        past_first = popped.invisible_until_ms - int(time.time() * 1000) + 500
        result = await pop.pop(cluster.broker, group, topic, poll_ms=max(past_first, 100))
        assert result.messages == []
        with pytest.raises(MQClientError) as stale:
            await pop.ack(popped, group=group, topic=topic)
        assert stale.value.code == ResponseCode.NO_MESSAGE
        await pop.ack(new, group=group, topic=topic, broker_addr=cluster.broker)


@trio_only
async def test_batch_ack_notification_and_assignment(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("PopTopic"), unique("CG_pop")
    await create_topic(cluster, topic, 2)
    async with ClientInstance(cluster.namesrv) as instance:
        pop = instance.pop_client()
        assert not await pop.notification(cluster.broker, group, topic, poll_ms=100)
        await send(cluster, topic, [f"b{i}".encode() for i in range(10)])
        assert await pop.notification(cluster.broker, group, topic, poll_ms=5000)
        got = await pop_all(pop, cluster.broker, group, topic, 10)
        await pop.batch_ack(got, group=group)
        for popped in got[:2]:  # each was acked by the batch
            with pytest.raises(MQClientError):
                await pop.ack(popped, group=group, topic=topic)
        with pytest.raises(MQClientError):
            await pop.batch_ack(got[:1], group=group)
        assignments = await pop.query_assignment(cluster.broker, topic, group, instance.client_id)
        assert sorted(a.message_queue.queue_id for a in assignments) == [0, 1]
        assert {a.mode for a in assignments} == {"POP"}
        assert {a.message_queue.topic for a in assignments} == {topic}


@trio_only
async def test_fifo_pop_hands_out_the_next_message_only_after_the_ack(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("PopTopic"), unique("CG_fifo")
    await create_topic(cluster, topic, 1)
    async with Admin(namesrv_addr=cluster.namesrv) as admin:
        await admin.create_group(
            SubscriptionGroupConfig(group_name=group, consume_message_orderly=True),
            broker_addr=cluster.broker,
        )
    await send(cluster, topic, [b"1", b"2", b"3"])
    async with ClientInstance(cluster.namesrv) as instance:
        pop = instance.pop_client()
        seen = []
        for expected in (b"1", b"2", b"3"):
            (popped,) = await pop_all(pop, cluster.broker, group, topic, 1, max_messages=1,
                                      order=True)  # fmt: skip
            assert popped.message.body == expected and popped.handle.order
            # While it is in flight the queue gives nothing more.
            held = await pop.pop(cluster.broker, group, topic, order=True, poll_ms=200)
            assert held.messages == []
            await pop.ack(popped, group=group, topic=topic)
            seen.append(popped.message.body)
        assert seen == [b"1", b"2", b"3"]


@trio_only
async def test_fifo_change_invisible_of_a_later_message_in_a_batch(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("PopTopic"), unique("CG_fifo")
    await create_topic(cluster, topic, 1)
    async with Admin(namesrv_addr=cluster.namesrv) as admin:
        await admin.create_group(
            SubscriptionGroupConfig(group_name=group, consume_message_orderly=True),
            broker_addr=cluster.broker,
        )
    await send(cluster, topic, [b"a", b"b"])
    async with ClientInstance(cluster.namesrv) as instance:
        pop = instance.pop_client()
        first, second = await pop_all(pop, cluster.broker, group, topic, 2, order=True,
                                      invisible_ms=1500)  # fmt: skip
        # The FIFO pop's checkpoint is extended in place: the second message's new handle
        # still names it, and acks.
        new = await pop.change_invisible(second, 60_000, group=group, topic=topic)
        assert ReceiptHandle.parse(new).start_offset == second.handle.start_offset
        await pop.ack(first, group=group, topic=topic)
        await pop.ack(new, group=group, topic=topic)
        late = await pop.pop(cluster.broker, group, topic, order=True, poll_ms=800)
        assert late.messages == []  # both settled: nothing comes back


@trio_only
async def test_dead_letter_after_max_attempts_and_forward(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("PopTopic"), unique("CG_dlq")
    await create_topic(cluster, topic, 1)
    async with Admin(namesrv_addr=cluster.namesrv) as admin:
        await admin.create_group(
            SubscriptionGroupConfig(group_name=group, retry_max_times=1),
            broker_addr=cluster.broker,
        )
    await send(cluster, topic, [b"poison", b"forwarded"])
    dlq = f"%DLQ%{group}"
    async with ClientInstance(cluster.namesrv) as instance:
        pop = instance.pop_client()
        got = await pop_all(pop, cluster.broker, group, topic, 2, invisible_ms=30_000)
        forwarded = next(p for p in got if p.message.body == b"forwarded")
        await pop.forward_to_dead_letter(forwarded, group)
        poison = next(p for p in got if p.message.body == b"poison")
        await pop.change_invisible(poison, 100, group=group, topic=topic)  # back soon
        (again,) = await pop_all(pop, cluster.broker, group, topic, 1, invisible_ms=300)
        assert again.message.body == b"poison" and again.delivery_attempt == 2
        # Two deliveries (retryMaxTimes 1): its next expiry sends it to the DLQ.
        dead = await pop_all(pop, cluster.broker, "CG_dlq_reader_" + group, dlq, 2)
        assert sorted(p.message.body for p in dead) == [b"forwarded", b"poison"]
        late = await pop.pop(cluster.broker, group, topic, poll_ms=500)
        assert late.messages == []
        with pytest.raises(MQClientError):  # forwarded means acked
            await pop.ack(forwarded, group=group, topic=topic)


def test_receipt_handles_read_and_refused() -> None:
    text = "5 1700000000000 30000 0 1 broker-a 3 7"
    handle = ReceiptHandle.parse(text)
    assert (handle.start_offset, handle.queue_id, handle.offset) == (5, 3, 7)
    assert handle.encode() == text == handle.extra_info
    assert handle.invisible_until_ms == 1700000030000
    assert handle.real_topic("G", "T") == "%RETRY%G_T"
    with_offset = ReceiptHandle.parse(text + " 12345")
    assert with_offset.commit_log_offset == 12345 and with_offset.extra_info == text
    assert with_offset.encode() == text + " 12345"
    for bad in ("", "1 2 3", "a 1 2 0 0 b 1 2", "1 2 3 0 9 b 1 2"):
        with pytest.raises(MQClientError) as refused:
            ReceiptHandle.parse(bad)
        assert refused.value.code == ResponseCode.INVALID_PARAMETER
