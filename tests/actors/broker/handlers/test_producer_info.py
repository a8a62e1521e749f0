"""GET_ALL_PRODUCER_INFO (328) over the wire: every producer group with its live connections,
from the producers' heartbeats; a group leaves the table when its producer shuts down."""

from __future__ import annotations

import time

import pytest
import trio

import boltmq
from client import Admin, Message, Producer
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.bodies import ProducerTableInfo

pytestmark = pytest.mark.timeout(120)

TOPIC = "ProducerInfoTopic"


async def test_all_producer_info_lists_every_group_and_connection() -> None:
    async with boltmq.embedded() as cluster:
        namesrv, broker = cluster.registry_address, cluster.broker_address
        async with Admin(namesrv_addr=namesrv) as admin:
            await admin.create_topic(TOPIC, broker_addr=broker, queue_nums=1)
            with trio.fail_after(30):
                while await admin.instance.fetch_route(TOPIC) is None:
                    await trio.sleep(0.1)
            async with (
                Producer("pg_info_a", namesrv_addr=namesrv) as first,
                Producer("pg_info_b", namesrv_addr=namesrv) as second,
            ):
                before_ms = int(time.time() * 1000)
                for producer in (first, second):
                    await producer.send(Message(TOPIC, b"x"))
                    await producer.instance.send_heartbeat_to_all_brokers()
                table = await admin.all_producer_info(broker)
                assert {"pg_info_a", "pg_info_b"} <= set(table.data)
                (a,) = table.data["pg_info_a"]
                (b,) = table.data["pg_info_b"]
                assert a.client_id == first.instance.client_id
                assert b.client_id == second.instance.client_id
                assert a.remote_ip.startswith("127.0.0.1:")
                assert a.version == b.version > 0  # the client's version, from its heartbeat
                assert a.last_update_timestamp >= before_ms - 1000
                assert a.last_update_timestamp <= int(time.time() * 1000) + 1000
            # Both producers unregistered on the way out: the table forgets them.
            with trio.fail_after(30):
                while {"pg_info_a", "pg_info_b"} & set(
                    (await admin.all_producer_info(broker)).data
                ):
                    await trio.sleep(0.1)


async def test_the_body_is_rocketmq_5s_producer_table_info() -> None:
    async with boltmq.embedded() as cluster, RemotingClient() as client:
        namesrv, broker = cluster.registry_address, cluster.broker_address
        async with Admin(namesrv_addr=namesrv) as admin:
            await admin.create_topic(TOPIC, broker_addr=broker, queue_nums=1)
        async with Producer("pg_info_wire", namesrv_addr=namesrv) as producer:
            with trio.fail_after(30):
                while True:
                    try:
                        await producer.send(Message(TOPIC, b"x"))
                        break
                    except Exception:  # the route is not in the registry yet
                        await trio.sleep(0.1)
            await producer.instance.send_heartbeat_to_all_brokers()
            with trio.fail_after(10):
                answer = await client.invoke(
                    broker, RemotingCommand.request(RequestCode.GET_ALL_PRODUCER_INFO)
                )
    assert answer.code == ResponseCode.SUCCESS
    assert answer.body is not None
    raw = ProducerTableInfo.from_json(answer.body).to_json()
    # Java's field names: a map "data" of group -> [{clientId, remoteIP, language, ...}].
    assert b'"data":{"pg_info_wire":[{"clientId":' in raw
    for key in (b'"remoteIP":"127.0.0.1:', b'"lastUpdateTimestamp":', b'"version":'):
        assert key in answer.body
