"""SYNC_MASTER answers: no slave, a slave that stops reading, grouped acknowledgements.

A hand-driven slave is a plain TCP socket speaking the HA protocol (8-byte offset reports in,
``[offset][size][bytes]`` frames out), so the test decides exactly when the master hears an
acknowledgement. Loopback only; every wait has a deadline.
"""

from __future__ import annotations

import struct
from pathlib import Path

import trio

from actors.broker.broker import open_broker
from protocol import RemotingClient, ResponseCode
from storage import BrokerRole
from tests.actors.broker.ha.helpers import (
    REPORT,
    broker_config,
    master_service,
    sync_master_with_hand_slave,
    wait_for,
)
from tests.actors.broker.helpers import call, send_request

FRAME = struct.Struct(">qi")


async def test_no_slave_answers_slave_not_available(tmp_path: Path) -> None:
    config = broker_config(tmp_path, "", BrokerRole.SYNC_MASTER)
    async with open_broker(config) as master, RemotingClient() as client:
        response = await call(client, master.address, send_request("Sync", b"alone"))
        assert response.code == ResponseCode.SLAVE_NOT_AVAILABLE
        # Stored all the same, as RocketMQ does; only the replication guarantee is missing.
        assert response.ext_fields["msgId"]
        assert master.store.get_max_offset_in_queue("Sync", 0) == 1
        assert master_service(master).statistics().slave_not_available == 1


async def test_async_master_never_waits(tmp_path: Path) -> None:
    config = broker_config(tmp_path, "", BrokerRole.ASYNC_MASTER)
    async with open_broker(config) as master, RemotingClient() as client:
        response = await call(client, master.address, send_request("Async", b"alone"))
        assert response.code == ResponseCode.SUCCESS
        assert master_service(master).statistics().waiting_sends == 0


async def test_slave_that_stops_reading_times_out_and_one_ack_answers_many(
    tmp_path: Path,
) -> None:
    async with sync_master_with_hand_slave(tmp_path, slave_timeout=300) as (master, slave, client):
        service = master_service(master)
        # The slave never acknowledges: the send times out after slaveTimeout.
        start = trio.current_time()
        response = await call(client, master.address, send_request("Sync", b"unacked"))
        assert response.code == ResponseCode.FLUSH_SLAVE_TIMEOUT
        assert 0.25 <= trio.current_time() - start < 3
        assert service.statistics().slave_timeouts == 1

        # Five concurrent sends wait; one report covering all of them answers all five.
        master.config.slave_timeout = 10_000
        codes: list[int] = []

        async def send(i: int) -> None:
            request = send_request("Sync", f"grouped-{i}".encode(), queue_id=i % 4)
            codes.append((await call(client, master.address, request)).code)

        async with trio.open_nursery() as nursery:
            for i in range(5):
                nursery.start_soon(send, i)
            await wait_for(lambda: service.statistics().waiting_sends == 5)
            assert codes == []
            await slave.send_all(REPORT.pack(master.store.get_max_phy_offset()))
        assert codes == [ResponseCode.SUCCESS] * 5
        assert service.statistics().waiting_sends == 0

        # The master streamed the data from offset 0 (the slave reported 0).
        with trio.fail_after(5):
            head = await slave.receive_some(FRAME.size)
        while len(head) < FRAME.size:
            head += await slave.receive_some(FRAME.size - len(head))
        offset, size = FRAME.unpack(head)
        assert offset == 0 and 0 < size <= master.config.ha_transfer_batch_size


async def test_lagging_slave_answers_slave_not_available(tmp_path: Path) -> None:
    settings = {"ha_slave_fallbehind_max": 1000}
    async with sync_master_with_hand_slave(tmp_path, **settings) as (master, _, client):
        response = await call(client, master.address, send_request("Sync", b"x" * 2000))
        assert response.code == ResponseCode.SLAVE_NOT_AVAILABLE


async def test_slave_silent_past_housekeeping_is_dropped(tmp_path: Path) -> None:
    config = broker_config(tmp_path, "", BrokerRole.ASYNC_MASTER, ha_housekeeping_interval=200)
    async with open_broker(config) as master:
        service = master_service(master)
        host, port = master.config.ha_addr.split(":")
        with trio.fail_after(10):
            slave = await trio.open_tcp_stream(host, int(port))
        async with slave:
            await slave.send_all(REPORT.pack(0))
            await wait_for(lambda: len(service.connections) == 1)
            await wait_for(lambda: not service.connections, timeout=5)


async def test_lag_in_bytes_and_seconds_per_slave(tmp_path: Path) -> None:
    config = broker_config(tmp_path, "", BrokerRole.ASYNC_MASTER)
    async with open_broker(config) as master, RemotingClient() as client:
        for i in range(3):
            response = await call(client, master.address, send_request("Lag", b"x" * (i + 1)))
            assert response.code == ResponseCode.SUCCESS
        service = master_service(master)
        end = master.store.get_max_phy_offset()
        host, port = master.config.ha_addr.split(":")
        with trio.fail_after(10):
            slave = await trio.open_tcp_stream(host, int(port))
        async with slave:
            # A slave holding the first 100 bytes only.
            await slave.send_all(REPORT.pack(100))
            await wait_for(lambda: any(c.acked_offset == 100 for c in service.connections.values()))
            await trio.sleep(0.05)
            (lag,) = service.statistics().slaves
            assert lag.behind_bytes == end - 100 and lag.behind_seconds >= 0.05
            await slave.send_all(REPORT.pack(end))
            await wait_for(lambda: service.statistics().slaves[0].behind_bytes == 0)
            assert service.statistics().slaves[0].behind_seconds == 0
