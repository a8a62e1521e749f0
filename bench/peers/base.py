"""What every system of the comparison provides: a server the tool starts and stops, and an
asyncio client adapter the workloads drive (publish with acknowledgement, batch, consume)."""

from __future__ import annotations

import abc
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.peers.procs import Group

#: The workloads' payload size.
PAYLOAD = 1024


class Server(abc.ABC):
    """A server of one row: started on loopback in a scratch directory, stopped by its group."""

    #: The system (boltmq, rocketmq, nats, rabbitmq, redis) and the row's label.
    system: str = ""
    row: str = ""
    #: The durability setting of the row, as the table and docs print it.
    settings: str = ""
    #: A JVM server: it is warmed up (``--jvm-warmup``) before each workload is measured.
    jvm: bool = False
    #: The flush mode of a row that runs beside others of the same mode (BoltMQ's and
    #: RocketMQ's rows: their cells are compared), else "".
    flush: str = ""
    #: Environment variables set (value) or removed (None) for the server's processes and
    #: for the client processes of its runs.
    env_changes: dict[str, str | None] = {}

    def __init__(self) -> None:
        self.scratch = Path(tempfile.mkdtemp(prefix=f"boltmq-compare-{self.system}-"))
        self.group = Group(self.row, self.scratch / "server.log")

    @abc.abstractmethod
    def start(self) -> None:
        """Start the server and return once it answers a real request."""

    @abc.abstractmethod
    def endpoint(self) -> dict[str, str]:
        """What a client needs to connect (sent to the run's child process as JSON)."""

    @abc.abstractmethod
    def version(self) -> str:
        """The server's version, as its own files or command say."""

    def stop(self, keep: bool = False) -> list[int]:
        """Stop exactly the processes started; the pids that needed SIGKILL. Removes the
        scratch directory unless ``keep``."""
        killed = self.group.stop()
        if not keep:
            shutil.rmtree(self.scratch, ignore_errors=True)
        return killed

    def environment(self) -> dict[str, str]:
        """This process's environment with the row's `env_changes` applied."""
        env = dict(os.environ)
        for name, value in self.env_changes.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return env

    @property
    def pgid(self) -> int | None:
        """The server's process group (for CPU sampling and the stop check)."""
        return self.group.pgid


class Client(abc.ABC):
    """An asyncio client of one system; one instance per run, shared by all its tasks."""

    def __init__(self, endpoint: dict[str, str]) -> None:
        self.endpoint = endpoint

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Disconnect, releasing everything opened."""

    @abc.abstractmethod
    async def create(self, topic: str) -> None:
        """Make ``topic`` (stream, queue) ready for publishing and consuming."""

    @abc.abstractmethod
    async def publish(self, topic: str, body: bytes) -> None:
        """Publish one message and wait for the server's acknowledgement."""

    @abc.abstractmethod
    async def publish_batch(self, topic: str, bodies: list[bytes]) -> None:
        """Publish messages together and wait until every one is acknowledged."""

    @abc.abstractmethod
    async def consume(self, topic: str, count: int, on_message: Callable[[bytes], None]) -> None:
        """Consume ``topic`` from its start as a new consumer (group), acknowledging or
        committing as the system's consumers do, calling ``on_message`` per body, until
        ``count`` have arrived."""

    #: Whether a new consumer can read again what an earlier one consumed (a queue whose
    #: consumption removes messages cannot: each (c) run then needs a backlog of its own).
    rereadable = True
