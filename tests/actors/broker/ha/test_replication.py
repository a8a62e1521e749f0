"""Master/slave replication: byte-identical commit logs, consume queues, restarts, failover.

Real registry, master and slave brokers on loopback; 64 KiB commit-log files so the streams
cross file boundaries; every wait has a deadline.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from actors.broker.broker import Broker, open_broker
from actors.broker.ha.master import HAStatistics
from actors.broker.tables.offsets import CommitOffsets
from protocol import RemotingClient, ResponseCode
from protocol.message import decode_record
from storage import BrokerRole
from tests.actors.broker.ha.helpers import (
    COMMIT_LOG_FILE,
    broker_config,
    commit_log_bytes,
    running_registry,
    running_slave,
    wait_caught_up,
    wait_for,
    wait_slave_linked,
)
from tests.actors.broker.helpers import call, pull_request, send_request
from tests.storage.helpers import store_files

TOPIC = "Replicated"
QUEUES = 4


async def send_many(
    client: RemotingClient, master: Broker, count: int, *, start: int = 0, senders: int = 8
) -> list[int]:
    """Send ``count`` ~1 KiB messages from ``senders`` concurrent producers; their codes."""
    codes: list[int] = []

    async def sender(first: int) -> None:
        for i in range(first, start + count, senders):
            body = f"message-{i:05d}-".encode() + bytes([i % 251]) * 1000
            request = send_request(
                TOPIC, body, queue_id=i % QUEUES, properties={"KEYS": f"key-{i}"}
            )
            response = await call(client, master.address, request)
            codes.append(response.code)

    async with trio.open_nursery() as nursery:
        for s in range(senders):
            nursery.start_soon(sender, start + s)
    return codes


@asynccontextmanager
async def linked_pair(
    tmp_path: Path, role: BrokerRole
) -> AsyncIterator[tuple[RemotingClient, Broker, Broker]]:
    """A registry, a master of ``role`` and a slave with its HA link up, and a client."""
    async with running_registry() as registry, RemotingClient() as client:
        config = broker_config(tmp_path / "master", registry.address, role)
        async with (
            open_broker(config) as master,
            running_slave(tmp_path / "slave", registry.address) as slave,
        ):
            with trio.fail_after(10):
                await wait_slave_linked(master)
            yield client, master, slave


async def pull_all(client: RemotingClient, broker: Broker, queue_id: int) -> list[bytes]:
    """Every record body in one queue of TOPIC, pulled from ``broker``."""
    bodies: list[bytes] = []
    offset = 0
    while True:
        request = pull_request(TOPIC, offset, queue_id=queue_id, max_msgs=32)
        response = await call(client, broker.address, request)
        if response.code != ResponseCode.SUCCESS:
            assert response.code in (
                ResponseCode.PULL_NOT_FOUND,
                ResponseCode.PULL_RETRY_IMMEDIATELY,
            )
            return bodies
        data = memoryview(response.body or b"")
        pos = 0
        while pos < len(data):
            record = decode_record(data, pos)
            bodies.append(bytes(record.body))
            pos += record.store_size
        offset = int(response.ext_fields["nextBeginOffset"])


@pytest.mark.parametrize("role", [BrokerRole.ASYNC_MASTER, BrokerRole.SYNC_MASTER])
async def test_slave_is_byte_identical_acrossstore_files(tmp_path: Path, role: BrokerRole) -> None:
    async with linked_pair(tmp_path, role) as (client, master, slave):
        codes = await send_many(client, master, 240)
        assert codes == [ResponseCode.SUCCESS] * 240
        if role is BrokerRole.SYNC_MASTER:
            # Every acknowledged send is already on the slave.
            assert slave.store.get_max_phy_offset() >= master.store.get_max_phy_offset()
        await wait_caught_up(master, slave)
        assert master.store.get_max_phy_offset() > 3 * COMMIT_LOG_FILE
        assert commit_log_bytes(slave.store) == commit_log_bytes(master.store)
        assert len(slave.store.commit_log.files.files) >= 4
        assert await slave.ha.sync.sync_all()  # type: ignore[union-attr]
        assert slave.topics.select(TOPIC) is not None
        total = 0
        for queue_id in range(QUEUES):
            on_master = await pull_all(client, master, queue_id)
            on_slave = await pull_all(client, slave, queue_id)
            assert on_slave == on_master and on_master
            total += len(on_master)
        assert total == 240
        # The index was rebuilt from the replicated bytes too.
        found = slave.store.query_message(TOPIC, "key-17", 4, 0, 2**62)
        assert [decode_record(b, 0).body[:14] for b in found.buffers] == [b"message-00017-"]
        stats = master.statistics().ha
        assert isinstance(stats, HAStatistics) and len(stats.slaves) == 1
        assert stats.slaves[0].behind_bytes == 0
        info = master.runtime_info()
        assert info["haConnectionCount"] == "1"
        assert info["haSlaveFallBehindBytes"] == "0"
        assert slave.runtime_info()["haMasterConnected"] == "true"


async def test_slave_restart_resumes_without_gap_or_duplicate(tmp_path: Path) -> None:
    async with running_registry() as registry, RemotingClient() as client:
        config = broker_config(tmp_path / "master", registry.address, BrokerRole.ASYNC_MASTER)
        async with open_broker(config) as master:
            async with running_slave(tmp_path / "slave", registry.address) as slave:
                await wait_slave_linked(master)
                await send_many(client, master, 60)
                await wait_caught_up(master, slave)
                first_length = slave.store.get_max_phy_offset()
            # The slave is down: the master goes on, across a file boundary.
            assert await send_many(client, master, 120, start=60) == [ResponseCode.SUCCESS] * 120
            assert master.store.get_max_phy_offset() > first_length + COMMIT_LOG_FILE
            async with running_slave(tmp_path / "slave", registry.address) as slave:
                assert slave.store.get_max_phy_offset() == first_length
                await wait_caught_up(master, slave)
                assert commit_log_bytes(slave.store) == commit_log_bytes(master.store)
                client_stats = slave.ha.client.statistics()  # type: ignore[union-attr]
                assert client_stats.dropped_links == 0 and client_stats.connects == 1
                assert await slave.ha.sync.sync_all()  # type: ignore[union-attr]
                bodies = [b for q in range(QUEUES) for b in await pull_all(client, slave, q)]
                assert sorted(b[:14] for b in bodies) == [
                    f"message-{i:05d}-".encode() for i in range(180)
                ]


async def test_pulls_from_slave_go_on_when_master_stops(tmp_path: Path) -> None:
    async with running_registry() as registry, RemotingClient() as client:
        config = broker_config(tmp_path / "master", registry.address, BrokerRole.ASYNC_MASTER)
        async with trio.open_nursery() as nursery:
            master = Broker(config)
            await nursery.start(master.run)
            async with running_slave(tmp_path / "slave", registry.address) as slave:
                await wait_slave_linked(master)
                await send_many(client, master, 80)
                await wait_caught_up(master, slave)
                # A consumer committed up to offset 5 on queue 0 (synced to the slave).
                await master.offsets.call(CommitOffsets("CG", TOPIC, {0: 5}))
                assert await slave.ha.sync.sync_all()  # type: ignore[union-attr]
                assert master.supervisor is not None
                await master.supervisor.aclose()  # the master stops
                assert slave.offsets.query_offset("CG", TOPIC, 0) == 5
                total = 0
                for queue_id in range(QUEUES):
                    bodies = await pull_all(client, slave, queue_id)
                    assert bodies and all(b.startswith(b"message-") for b in bodies)
                    total += len(bodies)
                assert total == 80
                await wait_for(lambda: not slave.ha.client.connected)  # type: ignore[union-attr]
                # The slave keeps trying to reconnect and keeps serving.
                client_stats = slave.ha.client.statistics()  # type: ignore[union-attr]
                assert client_stats.dropped_links == 1
                assert slave.statistics().supervisor.running

                # The master returns on the same ports: the slave reconnects and catches up.
                master = Broker(config)
                await nursery.start(master.run)
                assert await send_many(client, master, 40, start=80) == [ResponseCode.SUCCESS] * 40
                await wait_caught_up(master, slave)
                assert commit_log_bytes(slave.store) == commit_log_bytes(master.store)
                assert slave.ha.client.statistics().connects == 2  # type: ignore[union-attr]
                assert master.supervisor is not None
                await master.supervisor.aclose()


@pytest.mark.parametrize("role", [BrokerRole.ASYNC_MASTER, BrokerRole.SYNC_MASTER])
async def test_slave_queues_and_index_are_byte_identical(tmp_path: Path, role: BrokerRole) -> None:
    # Plain, keyed, delayed (SCHEDULE_TOPIC_XXXX: tags code = due time) and timed messages.
    start = str(int(time.time() * 1000) + 3_600_000)
    kinds: list[dict[str, str]] = [
        {"TAGS": "TagA"},
        {"TAGS": "TagB", "KEYS": "order-1 order-2"},
        {"TAGS": "TagA", "DELAY": "18"},
        {"TAGS": "TagC", "__STARTDELIVERTIME": start},
    ]
    async with linked_pair(tmp_path, role) as (client, master, slave):
        for i in range(240):
            properties = {**kinds[i % 4], "UNIQ_KEY": f"U{i:06d}"}
            request = send_request(
                TOPIC, bytes([i]) * 700, queue_id=i % QUEUES, properties=properties
            )
            assert (await call(client, master.address, request)).code == ResponseCode.SUCCESS
        with trio.fail_after(10):
            await wait_caught_up(master, slave)
        assert master.store.get_max_phy_offset() > 2 * COMMIT_LOG_FILE
        queues = {name: store_files(b.store.config.consume_queue_dir) for name, b in
                  (("master", master), ("slave", slave))}  # fmt: skip
        assert queues["slave"] == queues["master"]
        assert any(name.startswith("SCHEDULE_TOPIC_XXXX") for name in queues["master"])
        assert any(name.startswith("rmq_sys_wheel_timer") for name in queues["master"])
        # Index files are named by their creation time: compare them in order, once a query
        # has written the keys still waiting.
        for broker in (master, slave):
            assert broker.store.query_message(TOPIC, "U000236", 1, 0, 2**62).buffers
        indexes = [list(store_files(b.store.config.index_dir).values()) for b in (master, slave)]
        assert indexes[0] == indexes[1] and indexes[0]
