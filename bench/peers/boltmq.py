"""BoltMQ's rows: the embedded cluster (registry and broker in one process) in a scratch
directory, and the adapter over BoltMQ's own client that also drives Apache RocketMQ's broker."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from bench.peers.base import Client, Server
from bench.peers.procs import free_port, port_open
from client import Admin, Message, Producer, PullConsumer, SendStatus
from protocol._codecs import PURE_SWITCH
from protocol.bodies import ConsumeFromWhere

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = "DefaultCluster"


async def broker_registered(namesrv: str) -> bool:
    """True once the registry at ``namesrv`` lists a broker (a real GET_BROKER_CLUSTER_INFO)."""
    async with Admin(namesrv_addr=namesrv, timeout=3) as admin:
        info = await admin.cluster_info()
    return bool(info.broker_addr_table)


def row_label(flush: str, path: str | None = None) -> str:
    """A BoltMQ row's label: its flush mode, and its codec path when it names one."""
    return f"BoltMQ {flush}" + (f" ({path})" if path else "")


class BoltMQServer(Server):
    """``boltmq cluster``: a registry and a broker in one process, flushing as ``flush`` says."""

    system = "boltmq"

    def __init__(self, flush: str, path: str | None = None) -> None:
        # ``path`` "compiled" or "pure": the codec path of the cluster and of the runs'
        # clients, named in the row's label; None runs whichever this environment gets.
        self.row = row_label(flush, path)
        self.flush = flush
        self.settings = f"flushDiskType={flush}" + (f", codecs {path}" if path else "")
        if path is not None:
            self.env_changes = {PURE_SWITCH: "1" if path == "pure" else None}
        super().__init__()
        self.registry_port = 0

    def start(self) -> None:
        """Start the cluster and wait until its registry lists the broker."""
        self.registry_port = free_port()
        # The broker also listens on listenPort + 1 (the master's HA port).
        listen_port = free_port(neighbours=(1,))
        while self.registry_port in (listen_port, listen_port + 1):
            listen_port = free_port(neighbours=(1,))
        command = [
            sys.executable, "-m", "boltmq.cli", "cluster", "--home", str(self.scratch),
            "--registryPort", str(self.registry_port), "--listenPort", str(listen_port),
            "--bindAddress", "127.0.0.1", "--fastPortEnable", "false",
            "--flushDiskType", self.flush,
        ]  # fmt: skip
        self.group.spawn(command, cwd=ROOT, env=self.environment())
        namesrv = self.endpoint()["namesrv"]
        self.group.wait_until(lambda: port_open(self.registry_port), "registry port open", 90)
        self.group.wait_until(
            lambda: asyncio.run(broker_registered(namesrv)), "broker registered", 90
        )

    def endpoint(self) -> dict[str, str]:
        """The registry's address."""
        return {"namesrv": f"127.0.0.1:{self.registry_port}"}

    def version(self) -> str:
        """The package version and, in a git checkout, the commit."""
        version = metadata.version("boltmq")
        try:
            commit = subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                text=True, check=True, timeout=10,
            ).stdout.strip()  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            return version
        return f"{version} ({commit})"


class RemotingClientAdapter(Client):
    """BoltMQ's client (Producer, send_batch, PullConsumer) on asyncio, against any RocketMQ
    4.x-compatible registry and broker: BoltMQ's or Apache RocketMQ's."""

    def __init__(self, endpoint: dict[str, str]) -> None:
        super().__init__(endpoint)
        self.namesrv = endpoint["namesrv"]
        self._producer: Producer | None = None
        self._admin: Admin | None = None

    async def open(self) -> None:
        """Start a producer and an admin client (for topic creation)."""
        self._admin = await Admin(namesrv_addr=self.namesrv).__aenter__()
        self._producer = await Producer(
            f"compare-pg-{uuid.uuid4().hex[:8]}", namesrv_addr=self.namesrv
        ).__aenter__()

    async def close(self) -> None:
        """Close the producer and the admin client."""
        if self._producer is not None:
            await self._producer.__aexit__(None, None, None)
        if self._admin is not None:
            await self._admin.__aexit__(None, None, None)

    async def create(self, topic: str) -> None:
        """Create ``topic`` with 8 queues on the cluster's masters; wait for its route."""
        assert self._admin is not None
        await self._admin.create_topic(topic, cluster=CLUSTER, queue_nums=8)
        loop = asyncio.get_running_loop()
        end = loop.time() + 60
        while True:
            try:
                route = await self._admin.route(topic)
                if route.queue_datas:
                    return
            except Exception:
                if loop.time() > end:
                    raise
            if loop.time() > end:
                raise RuntimeError(f"topic {topic} has no queues in its route after 60 s")
            await asyncio.sleep(0.1)

    async def publish(self, topic: str, body: bytes) -> None:
        """One sync send."""
        assert self._producer is not None
        result = await self._producer.send(Message(topic, body))
        if result.status is not SendStatus.SEND_OK:
            raise RuntimeError(f"send to {topic} answered {result.status.value}")

    async def publish_batch(self, topic: str, bodies: list[bytes]) -> None:
        """One SEND_BATCH_MESSAGE."""
        assert self._producer is not None
        result = await self._producer.send_batch([Message(topic, body) for body in bodies])
        if result.status is not SendStatus.SEND_OK:
            raise RuntimeError(f"batch send to {topic} answered {result.status.value}")

    async def consume(self, topic: str, count: int, on_message: Callable[[bytes], None]) -> None:
        """A PullConsumer of a new group from the first offset; offsets committed as it goes
        (every 5 s, as RocketMQ's lite pull consumer does) and at the end."""
        async with PullConsumer(
            f"compare-cg-{uuid.uuid4().hex[:8]}", namesrv_addr=self.namesrv,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        ) as consumer:  # fmt: skip
            await consumer.subscribe(topic)
            received = 0
            while received < count:
                for message in await consumer.poll(timeout=1.0):
                    on_message(message.body)
                    received += 1
            await consumer.commit()
