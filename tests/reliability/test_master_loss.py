"""A master SIGKILLed while its slave holds the replicated messages.

A topic created on the master moments before is served by the slave as soon as the slave
holds its messages (it used to answer TOPIC_NOT_EXIST until its next config sync, up to
10 s later); a consumer turning to the slave gets every message; the master, started again,
has every message it acknowledged and takes sends again, which the consumer gets too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from boltmq import (
    Admin,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    Producer,
    PushConsumer,
    SendStatus,
)
from protocol import RemotingClient
from protocol.codes import ResponseCode
from protocol.message import MessageExt
from tests.actors.broker.helpers import pull_request
from tests.reliability.nodes import (
    Node,
    broker_node,
    call,
    max_offset,
    read_queue,
    registry_node,
    wait_until,
)

pytestmark = pytest.mark.timeout(150)

TOPIC = "FailoverTopic"
QUEUES = 2


async def test_consumers_continue_from_the_slave_and_the_master_returns_without_loss(
    tmp_path: Path,
) -> None:
    registry = registry_node(tmp_path)
    await registry.start()
    master = broker_node(tmp_path, "broker-a-0", registry.address, flushDiskType="SYNC_FLUSH")
    slave = broker_node(
        tmp_path, "broker-a-1", registry.address, brokerId=1, brokerRole="SLAVE",
        slaveReadEnable="true",
    )  # fmt: skip
    nodes: list[Node] = [registry, master, slave]
    for node in (master, slave):
        await node.start()
    received: list[bytes] = []

    def on_messages(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        received.extend(m.body for m in messages)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    try:
        async with Admin(namesrv_addr=registry.address) as admin:
            await admin.create_topic(TOPIC, broker_addr=master.address, queue_nums=QUEUES)

            async def routed() -> bool:
                try:
                    return bool((await admin.route(TOPIC)).broker_datas)
                except Exception:
                    return False

            await wait_until(routed, 30, "the topic's route")
        sent: list[bytes] = []
        async with Producer("FailoverProducer", namesrv_addr=registry.address) as producer:
            for n in range(100):
                result = await producer.send(Message(TOPIC, f"before-{n}".encode()))
                assert result.status is SendStatus.SEND_OK
                sent.append(f"before-{n}".encode())
        async with RemotingClient() as client:
            on_master = [await max_offset(client, master.address, TOPIC, q) for q in range(QUEUES)]

            async def replicated() -> bool:
                return [
                    await max_offset(client, slave.address, TOPIC, q) for q in range(QUEUES)
                ] == on_master

            await wait_until(replicated, 30, "the slave holding every message")
            # At once, not after the next config sync: the slave serves the new topic.
            answer = await call(client, slave.address, pull_request(TOPIC, 0, queue_id=0))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            await master.kill()
            on_slave = [await read_queue(client, slave.address, TOPIC, q) for q in range(QUEUES)]
            assert sorted(m.body for q in on_slave for m in q) == sorted(sent)
        # A consumer starting now finds the topic through the registry and reads the slave.
        consumer = PushConsumer(
            "FailoverConsumer", on_messages, namesrv_addr=registry.address,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            rebalance_interval=1.0,
        )  # fmt: skip
        consumer.subscribe(TOPIC)
        async with consumer:
            await wait_until(lambda: set(received) >= set(sent), 60, "consumption from the slave")
            # The master returns with everything it acknowledged, and takes sends again.
            await master.start()
            async with RemotingClient() as client:
                assert [
                    await max_offset(client, master.address, TOPIC, q) for q in range(QUEUES)
                ] == on_master
            async with Producer("FailoverProducer", namesrv_addr=registry.address) as producer:
                for n in range(20):
                    body = f"after-{n}".encode()

                    async def accepted(body: bytes = body) -> bool:
                        try:
                            result = await producer.send(Message(TOPIC, body))
                        except Exception:
                            return False  # the route still names no master
                        return result.status is SendStatus.SEND_OK

                    await wait_until(accepted, 30, "a send to the returned master")
                    sent.append(body)
            await wait_until(lambda: set(received) >= set(sent), 60, "consumption after return")
    finally:
        for node in reversed(nodes):
            await node.stop()
