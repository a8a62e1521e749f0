"""The clients view against an embedded cluster: producers (GET_ALL_PRODUCER_INFO) and
consumers with their role, and a broker that does not serve the producer request (as Apache
RocketMQ 4.x answers REQUEST_CODE_NOT_SUPPORTED) shown as producers unknown there.

Loopback only, ephemeral ports; every wait has a deadline.
"""

from __future__ import annotations

import pytest
import trio

import boltmq
from client import Message, Producer
from client.instance import ClientInstance
from monitor.collector import Collector
from monitor.model import Model, Thresholds
from monitor.snapshot import Snapshot
from protocol import RemotingCommand, RequestCode, ResponseCode
from protocol.connection import Connection

from .helpers import LIVE_GROUP, STALLED_TOPIC, consume_live, make_traffic

pytestmark = pytest.mark.timeout(120)


async def snapshot_of(namesrv: str) -> Snapshot:
    async with ClientInstance(namesrv, timeout=5) as instance:
        collector, model = Collector(instance, timeout=5), Model(Thresholds(disk_ratio=1.0))
        with trio.fail_after(60):
            return model.update(await collector.sample())


async def test_producers_and_consumers_with_their_role() -> None:
    async with boltmq.embedded() as cluster, trio.open_nursery() as nursery:
        namesrv = cluster.registry_address
        await make_traffic(namesrv, cluster.broker_address)
        stop = trio.Event()
        await nursery.start(consume_live, namesrv, stop)
        async with Producer("pg_mon_clients", namesrv_addr=namesrv) as producer:
            await producer.send(Message(STALLED_TOPIC, b"x"))
            await producer.instance.send_heartbeat_to_all_brokers()
            snapshot = await snapshot_of(namesrv)
        stop.set()
    rows = {(c.role, c.group): c for c in snapshot.clients}
    producer_row = rows[("producer", "pg_mon_clients")]
    assert producer_row.client_id == producer.instance.client_id
    assert producer_row.address.startswith("127.0.0.1:")
    assert producer_row.note is None
    assert ("consumer", LIVE_GROUP) in rows
    # make_traffic's producer has left: it is not listed any more.
    assert ("producer", "pg_mon") not in rows


async def test_a_broker_without_the_request_shows_producers_unknown() -> None:
    def not_supported(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "request type 328 not supported"
        )

    async with boltmq.embedded() as cluster:
        cluster.broker.dispatcher.register(RequestCode.GET_ALL_PRODUCER_INFO, not_supported)
        namesrv = cluster.registry_address
        await make_traffic(namesrv, cluster.broker_address)
        snapshot = await snapshot_of(namesrv)
    (row,) = [c for c in snapshot.clients if c.role == "producer"]
    assert row.note is not None
    assert "producers unknown on broker-a" in row.note
    assert "GET_ALL_PRODUCER_INFO" in row.note
    # Everything else about the broker is still shown.
    assert [(b.broker_name, b.error) for b in snapshot.brokers] == [("broker-a", None)]
    assert snapshot.topics
