"""The official Apache RocketMQ C++ client (PyPI ``rocketmq`` 0.4.4, librocketmq behind ctypes)
against a real registry and broker on loopback.

The C++ client blocks and runs its own threads: its calls go through ``trio.to_thread`` and
what its callbacks deliver is collected under a lock and waited for with a deadline.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
import trio

import boltmq
from protocol import RemotingClient, RemotingCommand, RequestCode
from protocol.headers import (
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    decode_header,
    encode_header,
)
from tests.support.waiting import wait_until

from .cpp_client import rocketmq

pytestmark = pytest.mark.timeout(180)


class Inbox:
    """Messages a C++ push consumer delivered, as plain tuples."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[dict[str, Any]] = []

    def __call__(self, msg: Any) -> None:
        item = {
            "body": msg.body,
            "tags": text(msg.tags),
            "keys": text(msg.keys),
            "topic": text(msg.topic),
            "id": text(msg.id),
            "origin": text(msg.get_property("ORIGIN")),
            "queue_offset": msg.queue_offset,
        }
        with self.lock:
            self.items.append(item)

    def snapshot(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.items)


def text(value: Any) -> Any:
    """The binding hands some fields back as bytes."""
    return value.decode() if isinstance(value, bytes) else value


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


async def test_cpp_producer_and_consumers(tmp_path: Any) -> None:
    topic = unique("CppTopic")
    async with boltmq.embedded(tmp_path) as cluster:
        namesrv = cluster.registry_address

        producer = rocketmq.Producer(unique("PG"))
        producer.set_namesrv_addr(namesrv)
        await trio.to_thread.run_sync(producer.start)
        sent: list[dict[str, Any]] = []
        try:
            for i in range(20):
                msg = rocketmq.Message(topic)
                tag = "TagA" if i % 2 == 0 else "TagB"
                msg.set_tags(tag)
                msg.set_keys(f"key-{i}")
                msg.set_body(f"message {i} \u2713".encode())
                msg.set_property("ORIGIN", f"cpp-{i}")
                result = await trio.to_thread.run_sync(producer.send_sync, msg)
                assert result.status == rocketmq.SendStatus.OK
                body = f"message {i} \u2713".encode()
                sent.append(
                    {"body": body, "tags": tag, "keys": f"key-{i}", "origin": f"cpp-{i}",
                     "id": text(result.msg_id)}
                )  # fmt: skip
        finally:
            await trio.to_thread.run_sync(producer.shutdown)

        # Auto-created from TBW102 and registered: the registry routes the new topic.
        async with RemotingClient() as client:
            route = await client.invoke(
                namesrv,
                RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}),
            )
            assert route.code == 0, route.remark
            total = 0
            for queue_id in range(8):
                answer = await client.invoke(
                    cluster.broker_address,
                    RemotingCommand.request(
                        RequestCode.GET_MAX_OFFSET,
                        encode_header(GetMaxOffsetRequestHeader(topic=topic, queue_id=queue_id)),
                    ),
                )
                total += decode_header(GetMaxOffsetResponseHeader, answer.ext_fields).offset
            assert total == 20

        everything = Inbox()
        only_a = Inbox()
        consumers = []
        for group, inbox, expression in (
            (unique("CG_all"), everything, "*"),
            (unique("CG_tagA"), only_a, "TagA"),
        ):
            consumer = rocketmq.PushConsumer(group)
            consumer.set_namesrv_addr(namesrv)
            consumer.subscribe(topic, inbox, expression)
            await trio.to_thread.run_sync(consumer.start)
            consumers.append(consumer)
        try:
            await wait_until(lambda: len(everything.snapshot()) >= 20, 60, "20 messages in group 1")
            await wait_until(
                lambda: len(only_a.snapshot()) >= 10, 60, "10 TagA messages in group 2"
            )
        finally:
            for consumer in consumers:
                await trio.to_thread.run_sync(consumer.shutdown)

        got = sorted(everything.snapshot(), key=lambda m: m["origin"])
        want = sorted(sent, key=lambda m: m["origin"])
        assert [(m["body"], m["tags"], m["keys"], m["origin"], m["topic"]) for m in got] == [
            (m["body"], m["tags"], m["keys"], m["origin"], topic) for m in want
        ]
        assert {m["id"] for m in got} == {m["id"] for m in sent}

        # The C++ pull consumer reads by offset: from 0 everything, from 1 all but each
        # queue's first message.
        def pull_all(start: int) -> list[tuple[str, int]]:
            consumer = rocketmq.PullConsumer(unique("CG_pull"))
            consumer.offset_table = {f"{topic.encode()!r}@{q}": start for q in range(16)}
            consumer.set_namesrv_addr(namesrv)
            consumer.start()
            try:
                return [
                    (text(m.get_property("ORIGIN")), m.queue_offset) for m in consumer.pull(topic)
                ]
            finally:
                consumer.shutdown()

        from_zero = await trio.to_thread.run_sync(pull_all, 0)
        assert sorted(o for o, _ in from_zero) == sorted(m["origin"] for m in sent)
        first_of_queue = {m["origin"] for m in got if m["queue_offset"] == 0}
        from_one = await trio.to_thread.run_sync(pull_all, 1)
        assert sorted(o for o, _ in from_one) == sorted(
            m["origin"] for m in sent if m["origin"] not in first_of_queue
        )
        assert all(offset >= 1 for _, offset in from_one)

        tag_a = only_a.snapshot()
        assert sorted(m["origin"] for m in tag_a) == sorted(
            m["origin"] for m in sent if m["tags"] == "TagA"
        )
