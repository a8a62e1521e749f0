"""Interop with the official C++ client (PyPI ``rocketmq`` 0.4.4) through BoltMQ, both ways.

The C++ client blocks and runs its own threads: its calls go through ``anyio.to_thread``, and
what its callbacks deliver is collected under a lock and waited for with a deadline.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from client import Message, Producer, PullConsumer
from protocol.bodies import ConsumeFromWhere
from tests.client.helpers import poll_until

from .cpp_client import rocketmq

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]
Unique = Callable[[str], str]
BIG = ("a compressible line of text for the zlib path\n" * 200).encode()  # > 4 KiB


def text(value: Any) -> Any:
    """The binding hands some fields back as bytes."""
    return value.decode() if isinstance(value, bytes) else value


class Inbox:
    """Messages a C++ push consumer delivered, as dicts."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[dict[str, Any]] = []

    def __call__(self, msg: Any) -> None:
        item = {
            "body": msg.body, "tags": text(msg.tags), "keys": text(msg.keys),
            "id": text(msg.id), "origin": text(msg.get_property("ORIGIN")),
        }  # fmt: skip
        with self.lock:
            self.items.append(item)

    def count(self) -> int:
        with self.lock:
            return len(self.items)


async def test_python_producer_to_cpp_push_consumer(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("PyToCpp")
    sent: dict[str, tuple[bytes, str, str, str]] = {}
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        for i in range(10):
            body = BIG + f"#{i}".encode() if i in (3, 7) else f"py message {i} \u2713".encode()
            tag = "TagA" if i % 2 else "TagB"
            result = await producer.send(
                Message(topic, body, tags=tag, keys=f"key-{i}", properties={"ORIGIN": f"py-{i}"})
            )
            sent[f"py-{i}"] = (body, tag, f"key-{i}", result.msg_id)
    inbox = Inbox()
    consumer = rocketmq.PushConsumer(unique("CppCG"))
    consumer.set_namesrv_addr(cluster.namesrv)
    consumer.subscribe(topic, inbox, "*")
    await anyio.to_thread.run_sync(consumer.start)
    try:
        with anyio.fail_after(60):
            while inbox.count() < 10:
                await anyio.sleep(0.05)  # the C++ threads give no awaitable signal
    finally:
        await anyio.to_thread.run_sync(consumer.shutdown)
    got = {item["origin"]: (item["body"], item["tags"], item["keys"], item["id"])
           for item in inbox.items}  # fmt: skip
    assert got == sent


async def test_cpp_producer_to_python_pull_consumer(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("CppToPy")
    producer = rocketmq.Producer(unique("CppPG"))
    producer.set_namesrv_addr(cluster.namesrv)
    await anyio.to_thread.run_sync(producer.start)
    sent: dict[str, tuple[bytes, str | None, list[str], str]] = {}
    try:
        for i in range(10):
            msg = rocketmq.Message(topic)
            body = BIG + f"#{i}".encode() if i == 5 else f"cpp message {i}".encode()
            msg.set_tags("TagC")
            msg.set_keys(f"ck-{i}")
            msg.set_body(body)
            msg.set_property("ORIGIN", f"cpp-{i}")
            result = await anyio.to_thread.run_sync(producer.send_sync, msg)
            assert result.status == rocketmq.SendStatus.OK
            sent[f"cpp-{i}"] = (body, "TagC", [f"ck-{i}"], text(result.msg_id))
    finally:
        await anyio.to_thread.run_sync(producer.shutdown)
    async with PullConsumer(unique("CG"), namesrv_addr=cluster.namesrv,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                            ) as consumer:  # fmt: skip
        await consumer.subscribe(topic, "TagC")
        got = await poll_until(consumer, 10, timeout=20)
    assert {m.properties["ORIGIN"]: (m.body, m.tags, m.keys, m.msg_id) for m in got} == sent
