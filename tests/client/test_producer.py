"""Producer against a real BoltMQ cluster on loopback, on trio and on asyncio.

Every message sent is read back (pull consumer or VIEW_MESSAGE_BY_ID) and compared; every
wait has a deadline.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import anyio
import pytest
import sniffio

from client import Admin, Message, Producer, PullConsumer, SendStatus
from protocol import names
from protocol.bodies import ConsumeFromWhere
from protocol.message import MessageConst, MessageSysFlag

from .helpers import over_both_transports, poll_until, wait_for_route

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
Unique = Callable[[str], str]


@over_both_transports
async def test_sync_send_returns_ids_and_the_message_reads_back(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    assert sniffio.current_async_library() == anyio_backend
    topic = unique("SyncTopic")
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        message = Message(
            topic, "body \u2713".encode(), tags="TagA", keys=["k1", "k2"],
            properties={"ORIGIN": anyio_backend},
        )  # fmt: skip
        result = await producer.send(message)
        cluster.assert_connected_over(producer.instance)
    assert result.status is SendStatus.SEND_OK
    assert len(result.msg_id) == 32 and len(result.offset_msg_id) == 32
    assert result.queue.topic == topic and result.queue_offset == 0
    async with PullConsumer(unique("CG"), namesrv_addr=cluster.namesrv,
                            consume_from_where=FIRST) as consumer:  # fmt: skip
        await wait_for_route(consumer.instance, topic)
        await consumer.subscribe(topic)
        [got] = await poll_until(consumer, 1)
    assert got.body == "body \u2713".encode()
    assert got.tags == "TagA" and got.keys == ["k1", "k2"]
    assert got.properties["ORIGIN"] == anyio_backend
    assert got.msg_id == result.msg_id
    assert got.offset_msg_id == result.offset_msg_id
    assert (got.queue_id, got.queue_offset) == (result.queue.queue_id, result.queue_offset)


async def test_oneway_sends_arrive(cluster: Any, unique: Unique, anyio_backend: str) -> None:
    topic = unique("OnewayTopic")
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        await producer.send(Message(topic, b"first"))  # creates the topic
        for i in range(5):
            await producer.send_oneway(Message(topic, f"oneway {i}".encode()))
    async with PullConsumer(unique("CG"), namesrv_addr=cluster.namesrv,
                            consume_from_where=FIRST) as consumer:  # fmt: skip
        await wait_for_route(consumer.instance, topic)
        await consumer.subscribe(topic)
        got = await poll_until(consumer, 6)
    assert sorted(m.body for m in got) == sorted(
        [b"first", *(f"oneway {i}".encode() for i in range(5))]
    )


@over_both_transports
async def test_batch_lands_in_one_queue_in_order(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("BatchTopic")
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        batch = [Message(topic, f"batch {i}".encode(), tags="B", keys=f"key-{i}")
                 for i in range(10)]  # fmt: skip
        result = await producer.send_batch(batch)
    ids = result.msg_id.split(",")
    assert result.status is SendStatus.SEND_OK and len(ids) == 10
    assert len(result.offset_msg_id.split(",")) == 10
    async with PullConsumer(unique("CG"), namesrv_addr=cluster.namesrv,
                            consume_from_where=FIRST) as consumer:  # fmt: skip
        await consumer.assign([result.queue])
        got = await poll_until(consumer, 10)
    assert [m.body for m in got] == [f"batch {i}".encode() for i in range(10)]
    assert [m.queue_offset for m in got] == list(range(result.queue_offset, 10))
    assert [m.msg_id for m in got] == ids
    assert [m.keys for m in got] == [[f"key-{i}"] for i in range(10)]


@over_both_transports
async def test_ordered_send_keeps_one_key_on_one_queue_in_order(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("OrderTopic")
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        results = {}
        for key in ("order-1", "order-2", "order-3"):
            results[key] = [
                await producer.send_orderly(Message(topic, f"{key}:{step}".encode()), key)
                for step in range(8)
            ]
    for key, sent in results.items():
        assert len({r.queue for r in sent}) == 1, key
        offsets = [r.queue_offset for r in sent]
        assert offsets == sorted(offsets)
    async with PullConsumer(unique("CG"), namesrv_addr=cluster.namesrv,
                            consume_from_where=FIRST) as consumer:  # fmt: skip
        await wait_for_route(consumer.instance, topic)
        await consumer.subscribe(topic)
        got = await poll_until(consumer, 24)
    by_queue: dict[int, list[bytes]] = {}
    for message in sorted(got, key=lambda m: (m.queue_id, m.queue_offset)):
        by_queue.setdefault(message.queue_id, []).append(message.body)
    for key, sent in results.items():
        bodies = [b for b in by_queue[sent[0].queue.queue_id] if b.startswith(key.encode())]
        assert bodies == [f"{key}:{step}".encode() for step in range(8)]


async def test_large_body_is_stored_compressed_and_reads_back_whole(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("ZipTopic")
    body = b"compressible text " * 1000 + os.urandom(64)
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        result = await producer.send(Message(topic, body, tags="Z"))
        small = await producer.send(Message(topic, b"x" * 4095))
    async with Admin(namesrv_addr=cluster.namesrv) as admin:
        stored = await admin.view_message(result.offset_msg_id)
        stored_small = await admin.view_message(small.offset_msg_id)
    assert stored.sys_flag & MessageSysFlag.COMPRESSED
    assert len(stored.body) < len(body) // 4
    assert not stored_small.sys_flag & MessageSysFlag.COMPRESSED
    async with PullConsumer(unique("CG"), namesrv_addr=cluster.namesrv,
                            consume_from_where=FIRST) as consumer:  # fmt: skip
        await wait_for_route(consumer.instance, topic)
        await consumer.subscribe(topic, "Z")
        [got] = await poll_until(consumer, 1)
    assert got.body == body


async def test_delayed_message_is_held_with_its_delay_level(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("DelayTopic")
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        await producer.send(Message(topic, b"now"))
        result = await producer.send(Message(topic, b"later", delay_level=4))  # 30 s
    async with Admin(namesrv_addr=cluster.namesrv) as admin:
        stored = await admin.view_message(result.offset_msg_id)
    assert stored.properties[MessageConst.DELAY] == "4"
    assert stored.properties[MessageConst.REAL_TOPIC] == topic
    assert stored.topic == names.SCHEDULE_TOPIC
    async with PullConsumer(unique("CG"), namesrv_addr=cluster.namesrv,
                            consume_from_where=FIRST) as consumer:  # fmt: skip
        await wait_for_route(consumer.instance, topic)
        await consumer.subscribe(topic)
        got = await poll_until(consumer, 1)
        assert [m.body for m in got] == [b"now"]
        assert await consumer.poll(timeout=0.3) == []  # held by the broker


async def test_first_registry_down_the_second_answers(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    with anyio.fail_after(20):
        dead = "127.0.0.1:1"
        async with Producer(unique("PG"), namesrv_addr=f"{dead};{cluster.namesrv}") as producer:
            for i in range(4):  # round robin keeps coming back to the dead one
                result = await producer.send(Message(unique("FailoverTopic"), f"{i}".encode()))
                assert result.status is SendStatus.SEND_OK


async def test_a_message_can_be_found_by_key_and_by_offset_id(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("QueryTopic")
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        wanted = await producer.send(Message(topic, b"needle", keys="order-42 extra"))
        await producer.send(Message(topic, b"hay", keys="order-43"))
    async with Admin(namesrv_addr=cluster.namesrv) as admin:
        await wait_for_route(admin.instance, topic)
        with anyio.fail_after(10):
            found = await admin.query_message(topic, "order-42")
        assert [m.body for m in found] == [b"needle"]
        by_uniq = await admin.query_message(topic, wanted.msg_id, unique_key=True)
        assert [m.body for m in by_uniq] == [b"needle"]
        viewed = await admin.view_message(wanted.offset_msg_id)
        assert viewed.body == b"needle" and viewed.msg_id == wanted.msg_id
