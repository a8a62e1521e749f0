"""The lite pull consumer against a real BoltMQ cluster, on trio and on asyncio."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from client import Message, MQClientError, Producer, PullConsumer, parse_tags
from protocol.bodies import ConsumeFromWhere, MessageQueue

from .helpers import over_both_transports, poll_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
Unique = Callable[[str], str]


def test_tag_expressions() -> None:
    assert parse_tags("*") is None
    assert parse_tags("") is None
    assert parse_tags("TagA || TagB") == frozenset({"TagA", "TagB"})
    assert parse_tags("TagA||*") is None


@over_both_transports
async def test_reads_exactly_what_was_sent_and_resumes_from_committed_offsets(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("PullTopic"), unique("CG")
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        sent = [(await producer.send(Message(topic, f"m{i}".encode()))).msg_id for i in range(30)]
        async with PullConsumer(group, namesrv_addr=cluster.namesrv, consume_from_where=FIRST,
                                auto_commit=False) as consumer:  # fmt: skip
            queues = await consumer.subscribe(topic)
            assert len(queues) == 4
            got = await poll_until(consumer, 30)
            cluster.assert_connected_over(consumer.instance)
            assert sorted(m.msg_id for m in got) == sorted(sent)
            assert await consumer.poll(timeout=0.2) == []
            await consumer.commit()
            for queue in queues:
                assert await consumer.committed(queue) == consumer.position(queue)
        more = [(await producer.send(Message(topic, f"n{i}".encode()))).msg_id for i in range(5)]
        # A new instance of the group starts where the first one committed.
        async with PullConsumer(group, namesrv_addr=cluster.namesrv) as second:
            await second.subscribe(topic)
            again = await poll_until(second, 5)
            assert sorted(m.msg_id for m in again) == sorted(more)


async def test_auto_commit_on_close(cluster: Any, unique: Unique, anyio_backend: str) -> None:
    topic, group = unique("AutoTopic"), unique("CG")
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        for i in range(6):
            await producer.send(Message(topic, f"a{i}".encode()))
        async with PullConsumer(group, namesrv_addr=cluster.namesrv,
                                consume_from_where=FIRST) as consumer:  # fmt: skip
            await consumer.subscribe(topic)
            await poll_until(consumer, 6)
        await producer.send(Message(topic, b"after"))
    async with PullConsumer(group, namesrv_addr=cluster.namesrv) as second:
        await second.subscribe(topic)
        assert [m.body for m in await poll_until(second, 1)] == [b"after"]


@over_both_transports
async def test_tag_filter_and_seek(cluster: Any, unique: Unique, anyio_backend: str) -> None:
    topic = unique("TagTopic")
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        first = await producer.send(Message(topic, b"a0", tags="TagA"))
        queue = first.queue
        for i, tag in enumerate(["TagB", "TagA", "TagC", "TagA"], start=1):
            await producer.send(Message(topic, f"{tag[-1].lower()}{i}".encode(), tags=tag),
                                queue=queue)  # fmt: skip
    async with PullConsumer(unique("CG"), namesrv_addr=cluster.namesrv,
                            consume_from_where=FIRST) as consumer:  # fmt: skip
        await consumer.subscribe(topic, "TagA || TagC")
        got = await poll_until(consumer, 4)
        assert sorted(m.body for m in got) == [b"a0", b"a2", b"a4", b"c3"]
        await consumer.seek(queue, 2)
        again = await poll_until(consumer, 3)
        assert [m.body for m in again] == [b"a2", b"c3", b"a4"]
        await consumer.seek_to_begin(queue)
        assert consumer.position(queue) == 0
        await consumer.seek_to_end(queue)
        assert consumer.position(queue) == 5
        assert await consumer.poll(timeout=0.2) == []


async def test_assign_reads_only_the_given_queue(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("AssignTopic")
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        queues = await producer.queues(topic)
        for queue in queues:
            for i in range(3):
                await producer.send(Message(topic, f"q{queue.queue_id}-{i}".encode()), queue=queue)
    async with PullConsumer(unique("CG"), namesrv_addr=cluster.namesrv,
                            consume_from_where=FIRST) as consumer:  # fmt: skip
        await consumer.assign([queues[1]])
        got = await poll_until(consumer, 3)
        assert [m.body for m in got] == [f"q{queues[1].queue_id}-{i}".encode() for i in range(3)]
        assert consumer.assignment() == [queues[1]]


async def test_poll_of_an_unreachable_queue_fails_clearly(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    async with PullConsumer(unique("CG"), namesrv_addr=cluster.namesrv) as consumer:
        with pytest.raises(MQClientError):
            await consumer.poll(1.0)  # nothing assigned
        await consumer.assign([MessageQueue(topic="TBW102", broker_name="no-such", queue_id=0)])
        with pytest.raises(MQClientError) as refused:
            await consumer.poll(1.0)
        assert "no-such" in str(refused.value)
