"""Request-reply between RocketMQ's Java client and BoltMQ's, both ways, through a BoltMQ
broker: a Java requester (DefaultMQProducer.request) answered by a BoltMQ responder, a BoltMQ
requester (Producer.request) answered by a Java responder (MessageUtil.createReplyMessage), and
a Java request nobody answers timing out.

The client is tests/interop/java/AclClient.java (modes request and respond), compiled and run
by tests/interop/java_client.py from the release named by BOLTMQ_ROCKETMQ_HOME (skipped, saying
so, without it). Loopback only, ephemeral ports, a deadline on every wait.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import trio

import boltmq
from boltmq import (
    Admin,
    ConsumeConcurrentlyStatus,
    Message,
    Producer,
    PushConsumer,
    create_reply_message,
)
from protocol.bodies import ConsumeFromWhere
from protocol.message import MessageExt

from .java_client import java_client, results, run_java

__all__ = ["java_client"]

pytestmark = pytest.mark.timeout(400)


async def create_topic(namesrv: str, topic: str) -> None:
    async with Admin(namesrv_addr=namesrv) as admin:
        await admin.create_topic(topic, queue_nums=2)
        with trio.fail_after(30):
            while await admin.instance.fetch_route(topic) is None:
                await trio.sleep(0.1)


async def test_a_java_requester_gets_a_boltmq_reply(tmp_path: Path, java_client: list[str]) -> None:
    suffix = uuid.uuid4().hex[:8]
    topic = f"JavaAsks_{suffix}"
    async with boltmq.embedded(tmp_path) as cluster:
        namesrv = cluster.registry_address
        await create_topic(namesrv, topic)
        async with Producer(f"BoltReplier_{suffix}", namesrv_addr=namesrv) as replier:

            async def answer(requests: list[MessageExt]) -> ConsumeConcurrentlyStatus:
                for request in requests:
                    await replier.send(create_reply_message(request, b"re:" + request.body))
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

            responder = PushConsumer(
                f"BoltResponders_{suffix}", answer, namesrv_addr=namesrv,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            )  # fmt: skip
            responder.subscribe(topic)
            async with responder:
                lines = await run_java(
                    java_client, "request", namesrv, topic, f"JavaAskers_{suffix}", "60000",
                    "how much?",
                )  # fmt: skip
    assert results(lines, "REPLY") == [["re:how", "much?"]], lines


async def test_a_boltmq_requester_gets_a_java_reply(tmp_path: Path, java_client: list[str]) -> None:
    suffix = uuid.uuid4().hex[:8]
    topic = f"BoltAsks_{suffix}"
    async with boltmq.embedded(tmp_path) as cluster:
        namesrv = cluster.registry_address
        await create_topic(namesrv, topic)
        answered: list[list[str]] = []

        async def java_responder() -> None:
            lines = await run_java(
                java_client, "respond", namesrv, topic, f"JavaResponders_{suffix}", "1"
            )
            answered.extend(results(lines, "REPLIED"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(java_responder)
            async with Producer(f"BoltAskers_{suffix}", namesrv_addr=namesrv) as asker:
                # A cold JVM takes its time to start, subscribe and rebalance: the request
                # waits in the topic meanwhile, and its timeout covers that.
                reply = await asker.request(Message(topic, b"which way?"), timeout=120.0)
    assert reply.body == b"re:which way?"
    assert answered == [["SEND_OK", "which way?"]]


async def test_a_java_request_nobody_answers_times_out(
    tmp_path: Path, java_client: list[str]
) -> None:
    suffix = uuid.uuid4().hex[:8]
    topic = f"JavaAsksNobody_{suffix}"
    async with boltmq.embedded(tmp_path) as cluster:
        await create_topic(cluster.registry_address, topic)
        lines = await run_java(
            java_client, "request", cluster.registry_address, topic, f"JavaAskers_{suffix}",
            "3000", "anyone?",
        )  # fmt: skip
    assert results(lines, "REQUEST_TIMEOUT"), lines
    assert not results(lines, "REPLY"), lines
