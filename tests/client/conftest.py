"""Client tests: one real BoltMQ cluster (registry + broker on loopback, ephemeral ports) runs
in a subprocess for the whole session, so the same tests run on trio and on asyncio.

Every async test is marked ``anyio`` and runs once per backend (the ``anyio_backend``
fixture). pytest-trio's trio_mode would claim those tests for trio alone, so its mark is
taken off them after collection. Every test uses topics and groups of its own.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BROKER_READY = re.compile(r"broker (\S+) .* ready on ([\d.]+:\d+)")
REGISTRY_READY = re.compile(r"registry ready: tcp port (\d+)")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Let anyio's plugin, not pytest-trio, run the tests marked ``anyio``."""
    for item in items:
        if item.get_closest_marker("anyio") is not None:
            item.own_markers[:] = [m for m in item.own_markers if m.name != "trio"]


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Each async test runs on both event loops."""
    return str(request.param)


class BoltProcess:
    """A ``boltmq <command>`` subprocess (a cluster or a lone broker) whose log says when it is up.

    ``registry`` and ``broker`` are the addresses it announced; `stop` sends SIGTERM (a clean
    stop: the broker unregisters and writes its tables) and waits.
    """

    def __init__(self, home: Path, command: str, *args: str, timeout: float = 30.0) -> None:
        env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "supervisors.cli", command, *args],
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
    """The session's cluster process: its registry and broker addresses and its log."""

    def __init__(self, home: Path) -> None:
        super().__init__(
            home, "cluster", "--home", str(home), "--registryPort", "0", "--listenPort", "0",
            "--bindAddress", "127.0.0.1", "--fastPortEnable", "false",
            "--mapedFileSizeCommitLog", str(64 << 20), timeout=60,
        )  # fmt: skip

    @property
    def namesrv(self) -> str:
        """The registry address to give clients."""
        return self.registry


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    """The shared cluster process."""
    running = RunningCluster(tmp_path_factory.mktemp("client-cluster"))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def unique() -> Callable[[str], str]:
    """A maker of names no other test uses: ``unique("Topic")`` -> ``Topic_1a2b3c4d``."""

    def make(prefix: str) -> str:
        return f"{prefix}_{uuid.uuid4().hex[:10]}"

    return make
