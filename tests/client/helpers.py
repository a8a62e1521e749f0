"""Shared helpers of the client tests."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from client import Admin, ClientInstance, PullConsumer
from protocol.message import MessageExt
from tests.ports import free_port

__all__ = ["BoltProcess", "SilentPeer", "free_port", "poll_until", "wait_for_route"]


async def poll_until(consumer: PullConsumer, count: int, timeout: float = 10.0) -> list[MessageExt]:
    """Poll until ``count`` messages arrived; fail after ``timeout`` s (more than count fails)."""
    got: list[MessageExt] = []
    with anyio.fail_after(timeout):
        while len(got) < count:
            got.extend(await consumer.poll(timeout=1.0))
    assert len(got) == count, [m.body for m in got]
    return got


async def wait_for_route(instance: ClientInstance, topic: str, timeout: float = 10.0) -> None:
    """Wait until a registry routes ``topic``: a broker registers a topic it auto-created for a
    send a moment after storing the message, so a consumer subscribing at once may be early."""
    with anyio.fail_after(timeout):
        while await instance.update_route(topic) is None:
            await anyio.sleep(0.05)


class SilentPeer:
    """A TCP server on loopback that takes connections and requests but never answers.

    ``connections`` holds the accepted streams, so a test can cut one from the server side.
    """

    def __init__(self) -> None:
        self.address = ""
        self.connections: list[anyio.abc.SocketStream] = []
        self.received = 0

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Listen until cancelled; started with ``await task_group.start(peer.serve)``."""
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.address = f"127.0.0.1:{listener.extra(anyio.abc.SocketAttribute.local_port)}"
        task_status.started()
        await listener.serve(self._swallow)

    async def _swallow(self, stream: anyio.abc.SocketStream) -> None:
        self.connections.append(stream)
        async with stream:
            try:
                async for chunk in stream:
                    self.received += len(chunk)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass


ROOT = Path(__file__).resolve().parents[2]
BROKER_READY = re.compile(r"broker (\S+) .* ready on ([\d.]+:\d+)")
REGISTRY_READY = re.compile(r"registry ready: tcp port (\d+)")


class BoltProcess:
    """A ``boltmq <command>`` subprocess (a cluster or a lone broker) whose log says when it is up.

    ``registry`` and ``broker`` are the addresses it announced; `stop` sends SIGTERM (a clean
    stop: the broker unregisters and writes its tables) and waits.
    """

    def __init__(self, home: Path, command: str, *args: str, timeout: float = 30.0) -> None:
        env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "boltmq.cli", command, *args],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        self.lines: list[str] = []
        self.found: dict[str, str] = {}
        self._ready = threading.Event()
        threading.Thread(target=self._read_log, daemon=True).start()
        if not self._ready.wait(timeout) or "broker" not in self.found:
            self.stop()
            raise RuntimeError(f"boltmq {command} did not start:\n" + "\n".join(self.lines[-30:]))

    def _read_log(self) -> None:
        # Drain stderr for the whole run so the child never blocks on a full pipe.
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            line = raw.decode(errors="replace").rstrip("\n")
            self.lines.append(line)
            if match := REGISTRY_READY.search(line):
                self.found["registry"] = f"127.0.0.1:{match.group(1)}"
            if match := BROKER_READY.search(line):
                self.found["broker_name"] = match.group(1)
                self.found["broker"] = match.group(2)
                self._ready.set()
        self._ready.set()

    @property
    def registry(self) -> str:
        """The registry address (cluster processes only)."""
        return self.found["registry"]

    @property
    def broker(self) -> str:
        """The broker address."""
        return self.found["broker"]

    def stop(self) -> None:
        """SIGTERM and wait (SIGKILL if it does not stop in 20 s)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


class RunningCluster(BoltProcess):
    """The session's cluster process: its registry and broker addresses and its log.

    Registry and broker listen on websocket too (``ws_namesrv``, ``ws_broker``); the broker
    takes SQL92 subscriptions (enablePropertyFilter).
    """

    def __init__(self, home: Path) -> None:
        self.registry_ws_port, self.broker_ws_port = free_port(), free_port()
        super().__init__(
            home, "cluster", "--home", str(home), "--registryPort", "0", "--listenPort", "0",
            "--bindAddress", "127.0.0.1", "--fastPortEnable", "false",
            "--registryWebsocketPort", str(self.registry_ws_port),
            "--websocketListenPort", str(self.broker_ws_port),
            "--mapedFileSizeCommitLog", str(64 << 20), "--enablePropertyFilter", "true",
            timeout=60,
        )  # fmt: skip

    @property
    def ws_namesrv(self) -> str:
        """The registry's websocket address."""
        return f"ws://127.0.0.1:{self.registry_ws_port}/"

    @property
    def ws_broker(self) -> str:
        """The broker's websocket address, as websocket routes name it."""
        return f"ws://127.0.0.1:{self.broker_ws_port}/"

    @property
    def namesrv(self) -> str:
        """The registry address to give clients."""
        return self.registry


@pytest.fixture(scope="session")
def cluster_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    """The shared cluster process."""
    running = RunningCluster(tmp_path_factory.mktemp("client-cluster"))
    try:
        yield running
    finally:
        running.stop()


class ClusterOver:
    """The shared cluster as a client on one transport sees it: ``namesrv`` and ``broker`` are
    websocket addresses for ``"ws"``, TCP ones for ``"tcp"``; anything else is the process's."""

    def __init__(self, process: RunningCluster, transport: str) -> None:
        self.process = process
        self.transport = transport

    @property
    def namesrv(self) -> str:
        """The registry address to give clients."""
        return self.process.ws_namesrv if self.transport == "ws" else self.process.namesrv

    @property
    def broker(self) -> str:
        """The broker address as this transport's routes name it."""
        return self.process.ws_broker if self.transport == "ws" else self.process.broker

    def assert_connected_over(self, instance: ClientInstance) -> None:
        """Every live connection of ``instance`` (registry and brokers) is on this transport."""
        addresses = instance.remoting.addresses()
        assert len(addresses) >= 2, addresses  # a registry and a broker at least
        websocket = self.transport == "ws"
        assert all(a.startswith("ws://") == websocket for a in addresses), addresses

    def __getattr__(self, name: str) -> Any:
        return getattr(self.process, name)


#: Parametrises a test over both transports: ``@over_both_transports`` on a test taking cluster.
over_both_transports = pytest.mark.parametrize("cluster", ["tcp", "ws"], indirect=True)


@pytest.fixture
def cluster(request: pytest.FixtureRequest, cluster_process: RunningCluster) -> ClusterOver:
    """The shared cluster over TCP, or over the transport `over_both_transports` gives."""
    return ClusterOver(cluster_process, getattr(request, "param", "tcp"))


@pytest.fixture
def unique() -> Callable[[str], str]:
    """A maker of names no other test uses: ``unique("Topic")`` -> ``Topic_1a2b3c4d``."""

    def make(prefix: str) -> str:
        return f"{prefix}_{uuid.uuid4().hex[:10]}"

    return make


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Each async test runs on both event loops."""
    return str(request.param)


async def create_topic(cluster: Any, topic: str, queues: int) -> None:
    """A topic with ``queues`` queues, visible in the registry."""
    async with Admin(namesrv_addr=cluster.namesrv) as admin:
        await admin.create_topic(topic, queue_nums=queues)
        with anyio.fail_after(10):
            while True:
                with contextlib.suppress(Exception):
                    await admin.route(topic)
                    return
                await anyio.sleep(0.05)
