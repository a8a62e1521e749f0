"""The official C++ client (PyPI ``rocketmq`` 0.4.4) producing to BoltMQ's push consumer.

The C++ calls block, so they run through ``anyio.to_thread``; what the push consumer gets is
waited for with a deadline.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from client import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer
from protocol.bodies import ConsumeFromWhere
from protocol.message import MessageExt
from tests.client.helpers import create_topic
from tests.support.waiting import wait_until

from .cpp_client import rocketmq

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
Unique = Callable[[str], str]
BIG = ("a compressible line of text for the zlib path\n" * 200).encode()  # > 4 KiB


def text(value: Any) -> Any:
    """The binding hands some fields back as bytes."""
    return value.decode() if isinstance(value, bytes) else value


async def test_cpp_producer_to_python_push_consumer(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("CppToPush")
    producer = rocketmq.Producer(unique("CppPG"))
    producer.set_namesrv_addr(cluster.namesrv)
    await anyio.to_thread.run_sync(producer.start)
    sent: dict[str, tuple[bytes, str | None, list[str], str]] = {}
    try:
        for i in range(10):
            msg = rocketmq.Message(topic)
            body = BIG + f"#{i}".encode() if i == 4 else f"cpp message {i}".encode()
            tag = "TagA" if i % 3 else "TagZ"
            msg.set_tags(tag)
            msg.set_keys(f"ck-{i}")
            msg.set_body(body)
            msg.set_property("ORIGIN", f"cpp-{i}")
            result = await anyio.to_thread.run_sync(producer.send_sync, msg)
            assert result.status == rocketmq.SendStatus.OK
            if tag == "TagA":
                sent[f"cpp-{i}"] = (body, tag, [f"ck-{i}"], text(result.msg_id))
    finally:
        await anyio.to_thread.run_sync(producer.shutdown)

    got: list[MessageExt] = []

    async def listener(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        got.extend(messages)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    push = PushConsumer(unique("CG"), listener, namesrv_addr=cluster.namesrv,
                        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)  # fmt: skip
    push.subscribe(topic, "TagA")
    async with push:
        await wait_until(lambda: len(got) >= len(sent), timeout=20)
        await wait_until(lambda: push.statistics().cached_messages == 0)
    assert {m.properties["ORIGIN"]: (m.body, m.tags, m.keys, m.msg_id) for m in got} == sent


async def test_cpp_and_python_push_consumers_share_one_group(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    # Both sides allocate with AllocateMessageQueueAveragely over the same sorted ids, so
    # together they cover every queue.
    topic, group = unique("MixedGroup"), unique("CG")
    await create_topic(cluster, topic, 8)
    lock = threading.Lock()
    cpp_got: list[str] = []

    def on_cpp(msg: Any) -> None:
        with lock:
            cpp_got.append(text(msg.id))

    py_got: list[str] = []

    async def on_py(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        py_got.extend(m.msg_id for m in messages)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    cpp = rocketmq.PushConsumer(group)
    cpp.set_namesrv_addr(cluster.namesrv)
    cpp.subscribe(topic, on_cpp, "*")
    await anyio.to_thread.run_sync(cpp.start)
    try:
        push = PushConsumer(group, on_py, namesrv_addr=cluster.namesrv)
        push.subscribe(topic)
        async with push, Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
            await wait_until(lambda: len([q for q in push.assignment() if q.topic == topic]) == 4)
            sent = {(await producer.send(Message(topic, f"x{i}".encode()))).msg_id
                    for i in range(40)}  # fmt: skip

            def consumed() -> set[str]:
                with lock:
                    return {*cpp_got, *py_got}

            await wait_until(lambda: sent <= consumed(), timeout=30)
        assert py_got and cpp_got  # both took part
    finally:
        await anyio.to_thread.run_sync(cpp.shutdown)
