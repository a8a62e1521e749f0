"""The official RocketMQ 5.x Node.js client (npm rocketmq-client-nodejs 1.0.8) through the
gRPC proxy of an in-process cluster: what it sends BoltMQ's own 4.x client reads, with tags,
keys and properties; what BoltMQ's client sends its SimpleConsumer receives and acks, each
message once.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import boltmq
from client import Admin, ClientInstance, Message, Producer, PullConsumer
from protocol.bodies import ConsumeFromWhere
from tests.client.helpers import poll_until, wait_for_route
from tests.interop.node5_client import node5_dir, run_node5

__all__ = ["node5_dir"]

pytestmark = pytest.mark.timeout(240)


async def _topic(namesrv: str, prefix: str) -> str:
    topic = f"{prefix}_{uuid.uuid4().hex[:8]}"
    async with Admin(namesrv_addr=namesrv) as admin:
        await admin.create_topic(topic, queue_nums=4)
    async with ClientInstance(namesrv) as instance:
        await wait_for_route(instance, topic)
    return topic


async def test_node_producer_to_boltmq_consumer(node5_dir: Path) -> None:
    async with boltmq.embedded() as cluster:
        topic = await _topic(cluster.registry_address, "Node5Send")
        lines = await run_node5(node5_dir, "produce.js", cluster.grpc_endpoint, topic, 40)
        assert lines[-1] == {"done": 40}
        ids = {line["messageId"] for line in lines if "sent" in line}
        assert len(ids) == 40
        async with PullConsumer(
            f"CG_{uuid.uuid4().hex[:8]}", namesrv_addr=cluster.registry_address,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        ) as consumer:  # fmt: skip
            await consumer.subscribe(topic)
            messages = await poll_until(consumer, 40, timeout=30)
        by_seq = {int(m.properties["seq"]): m for m in messages}
        assert sorted(by_seq) == list(range(40))
        assert {m.properties["UNIQ_KEY"] for m in messages} == ids
        for seq, message in by_seq.items():
            assert message.body == f"node message {seq}".encode()
            assert message.tags == ("even" if seq % 2 == 0 else "odd")
            assert message.keys == [f"node-key-{seq}"]


async def test_boltmq_producer_to_node_simple_consumer(node5_dir: Path) -> None:
    async with boltmq.embedded() as cluster:
        topic = await _topic(cluster.registry_address, "Node5Recv")
        group = f"CG_node5_{uuid.uuid4().hex[:8]}"
        async with Producer("PG_node5", namesrv_addr=cluster.registry_address) as producer:
            for i in range(30):
                await producer.send(Message(topic, f"from boltmq {i}".encode(), tags="T"))
        lines = await run_node5(
            node5_dir, "consume.js", cluster.grpc_endpoint, group, topic, 30, 60
        )
        assert lines[-1] == {"done": 30}
        bodies = sorted(line["body"] for line in lines if "body" in line)
        assert bodies == sorted(f"from boltmq {i}" for i in range(30))
        assert {line["tag"] for line in lines if "body" in line} == {"T"}
        assert {line["deliveryAttempt"] for line in lines if "body" in line} == {1}
