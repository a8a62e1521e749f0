"""Master/slave pairs on loopback for the HA tests.

Rules: loopback only, ephemeral ports (the HA port is listenPort + 1; a master that must come
back at the same address takes two adjacent free ports, `free_port_pair`), real stores in
``tmp_path`` with 64 KiB commit-log files so replication crosses file boundaries, and a
deadline (``trio.fail_after``) around every wait.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from actors.broker.broker import Broker, open_broker
from actors.broker.config import BrokerConfig
from actors.broker.ha.master import HAService
from actors.registry import Registry, RegistryConfig, open_registry
from protocol import RemotingClient
from storage import BrokerRole, FileMessageStore
from tests.ports import free_port_pair
from tests.support.waiting import wait_until

COMMIT_LOG_FILE = 64 * 1024

SMALL_FILES: dict[str, Any] = {
    "mapped_file_size_commit_log": COMMIT_LOG_FILE,
    "mapped_file_size_consume_queue": 20 * 1000,
}


REPORT = struct.Struct(">q")
"""A slave's offset report: the commit-log offset it has."""


def broker_config(
    root: Path, registry: str, role: BrokerRole, broker_id: int = 0, **settings: Any
) -> BrokerConfig:
    """A loopback broker of group ``broker-a`` storing under ``root`` (ephemeral port unless
    ``settings`` name one)."""
    base: dict[str, Any] = {"listen_port": 0, "bind_address": "127.0.0.1", **SMALL_FILES}
    return BrokerConfig(
        fast_port_enable=False,
        namesrv_addr=registry,
        store_path_root_dir=str(root),
        broker_role=role,
        broker_id=broker_id,
        **{**base, **settings},
    )


@asynccontextmanager
async def running_registry() -> AsyncIterator[Registry]:
    """A registry on an ephemeral loopback port."""
    config = RegistryConfig(listen_port=0, bind_address="127.0.0.1", kv_config_path=None)
    async with open_registry(config) as registry:
        yield registry


@asynccontextmanager
async def running_slave(root: Path, registry: str, **settings: Any) -> AsyncIterator[Broker]:
    """A slave (brokerId 1, slaveReadEnable) of ``broker-a``."""
    settings.setdefault("slave_read_enable", True)
    config = broker_config(root, registry, BrokerRole.SLAVE, 1, **settings)
    async with open_broker(config) as slave:
        yield slave


class RestartableMaster:
    """An ASYNC_MASTER on fixed ports (listen ``port``, HA ``port + 1``) and one store, run
    in a task of ``nursery`` so it can stop and start again."""

    def __init__(self, root: Path, registry: str, port: int, nursery: trio.Nursery) -> None:
        self.root, self.registry, self.port, self.nursery = root, registry, port, nursery
        self._stop = trio.Event()
        self._stopped = trio.Event()

    async def start(self) -> Broker:
        self._stop, self._stopped = trio.Event(), trio.Event()
        master: Broker = await self.nursery.start(self._run)
        return master

    async def stop(self) -> None:
        """A clean stop: it unregisters, answers held pulls and flushes its store."""
        self._stop.set()
        with trio.fail_after(20):
            await self._stopped.wait()

    async def _run(self, *, task_status: trio.TaskStatus[Broker]) -> None:
        config = broker_config(
            self.root, self.registry, BrokerRole.ASYNC_MASTER,
            listen_port=self.port, ha_listen_port=self.port + 1,
        )  # fmt: skip
        try:
            async with open_broker(config) as master:
                task_status.started(master)
                await self._stop.wait()
        finally:
            self._stopped.set()


@asynccontextmanager
async def master_slave_for_failover(
    root: Path,
) -> AsyncIterator[tuple[Registry, RemotingClient, RestartableMaster, Broker, Broker]]:
    """A registry, a client, a started `RestartableMaster` and its slave (linked to the
    master's fixed HA address, so it follows the master through a stop and a start):
    ``(registry, client, runner, master, slave)``."""
    port = free_port_pair()
    async with (
        running_registry() as registry,
        RemotingClient() as client,
        trio.open_nursery() as nursery,
    ):
        runner = RestartableMaster(root / "master", registry.address, port, nursery)
        master = await runner.start()
        async with running_slave(
            root / "slave", registry.address, ha_master_address=f"127.0.0.1:{port + 1}"
        ) as slave:
            yield registry, client, runner, master, slave
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def sync_master_with_hand_slave(
    root: Path, **settings: Any
) -> AsyncIterator[tuple[Broker, trio.SocketStream, RemotingClient]]:
    """A SYNC_MASTER, a linked hand-driven slave that acknowledges nothing yet, a client."""
    config = broker_config(root, "", BrokerRole.SYNC_MASTER, **settings)
    async with open_broker(config) as master, RemotingClient() as client:
        service = master_service(master)
        host, port = master.config.ha_addr.split(":")
        with trio.fail_after(10):
            slave = await trio.open_tcp_stream(host, int(port))
        async with slave:
            await slave.send_all(REPORT.pack(0))
            await wait_for(lambda: any(c.acked_offset == 0 for c in service.connections.values()))
            yield master, slave, client


async def wait_for(condition: Callable[[], bool], timeout: float = 10) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds."""
    await wait_until(condition, timeout, "the replication condition", interval=0.01)


def master_service(master: Broker) -> HAService:
    """The master's HA service."""
    service = master.ha.service
    assert service is not None
    return service


async def wait_slave_linked(master: Broker) -> None:
    """Until a slave has connected and reported its offset."""
    service = master_service(master)
    await wait_for(lambda: any(c.acked_offset >= 0 for c in service.connections.values()))


async def wait_caught_up(master: Broker, slave: Broker) -> None:
    """Until the slave's commit log is as long as the master's."""
    await wait_for(lambda: slave.store.get_max_phy_offset() == master.store.get_max_phy_offset())


def commit_log_bytes(store: FileMessageStore, start: int = 0) -> bytes:
    """The committed commit log from ``start`` to its end."""
    out = bytearray()
    offset = start
    while (data := store.get_commit_log_data(offset)) is not None:
        out += data
        offset += len(data)
    return bytes(out)
