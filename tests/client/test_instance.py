"""The client core: route refresh, heartbeats and retry on another broker, on trio and asyncio.

The second broker of the retry test is a registration only (REGISTER_BROKER over a live
connection, its address a closed port), so the route names two brokers and the first send to
the dead one must move on to the live one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from client import Admin, ClientInstance, Message, Producer, SendStatus
from client.instance import parse_namesrv_addr
from protocol.bodies import (
    DataVersion,
    ProducerConnection,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from protocol.client import RemotingClient
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    GetProducerConnectionListRequestHeader,
    RegisterBrokerRequestHeader,
    encode_header,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
Unique = Callable[[str], str]


def test_namesrv_addr_forms() -> None:
    assert parse_namesrv_addr("a:1; b:2;") == ["a:1", "b:2"]
    assert parse_namesrv_addr(["a:1"]) == ["a:1"]
    with pytest.raises(ValueError):
        parse_namesrv_addr(" ; ")


async def test_send_retries_on_another_broker(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("RetryTopic")
    async with Admin(namesrv_addr=cluster.namesrv) as admin:
        [cluster_name] = (await admin.cluster_info()).cluster_addr_table
        await admin.create_topic(topic, cluster=cluster_name, queue_nums=2)
    config = TopicConfig(topic_name=topic, read_queue_nums=2, write_queue_nums=2)
    body = RegisterBrokerBody(
        topic_config_serialize_wrapper=TopicConfigSerializeWrapper(
            topic_config_table={topic: config}, data_version=DataVersion(timestamp=1, counter=1)
        )
    ).encode()
    header = RegisterBrokerRequestHeader(
        broker_name="aaa-dead-broker", broker_addr="127.0.0.1:1", cluster_name=cluster_name,
        ha_server_addr="127.0.0.1:2", broker_id=0,
    )  # fmt: skip
    async with RemotingClient() as registrar:  # the registration lives while this is open
        answer = await registrar.invoke(
            cluster.namesrv,
            RemotingCommand.request(RequestCode.REGISTER_BROKER, encode_header(header), body),
        )
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
            with anyio.fail_after(20):
                while len({q.broker_name for q in await producer.queues(topic)}) < 2:
                    await producer.instance.update_route(topic)
            results = [await producer.send(Message(topic, f"r{i}".encode())) for i in range(6)]
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert {r.queue.broker_name for r in results} == {cluster.found["broker_name"]}
    # The registry forgets the fake broker once its connection closed; later tests that
    # create topics on the whole cluster must not find it there.
    async with Admin(namesrv_addr=cluster.namesrv) as admin:
        with anyio.fail_after(10):
            while "aaa-dead-broker" in (await admin.cluster_info()).broker_addr_table:
                await anyio.sleep(0.05)


async def test_routes_refresh_and_heartbeats_repeat(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("RefreshTopic"), unique("PG")
    instance = ClientInstance(
        cluster.namesrv, poll_name_server_interval=0.1, heartbeat_broker_interval=0.1
    )
    async with instance, Producer(group, instance=instance) as producer:
        await producer.send(Message(topic, b"creates the topic with 4 queues"))
        with anyio.fail_after(10):
            while len(await producer.queues(topic)) != 4 or topic not in instance.routes:
                await anyio.sleep(0.05)
        async with Admin(namesrv_addr=cluster.namesrv) as admin:
            await admin.create_topic(topic, broker_addr=cluster.broker, queue_nums=6)
        # No call of ours asks for the route again: the periodic refresh brings 6 queues.
        with anyio.fail_after(10):
            while len(await producer.queues(topic)) != 6:
                await anyio.sleep(0.05)
        # The broker lists the producer's connection (heartbeats arrived).
        request = RemotingCommand.request(
            RequestCode.GET_PRODUCER_CONNECTION_LIST,
            encode_header(GetProducerConnectionListRequestHeader(producer_group=group)),
        )
        answer = await instance.invoke_broker(cluster.broker, request)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        connections = ProducerConnection.from_json(answer.body or b"{}").connection_set
        assert instance.client_id in {c.client_id for c in connections}
    assert instance.client_id.split("@")[1].split("#")[0].isdigit()
