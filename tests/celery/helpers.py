"""Shared parts of the Celery and taskiq tests: the cluster, worker processes, their effects.

Rules: loopback only, ephemeral ports; a worker is a real ``celery worker`` (or ``taskiq
worker``) process started with `start_worker`, waited for by its ready line, never by a sleep;
every wait has a deadline and names what it waited for.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import kombu.pools
import pytest
from celery import Celery

import boltmq.kombu  # noqa: F401  (registers boltmq://)
from tests.client.helpers import ROOT, RunningCluster
from tests.support.waiting import wait_until_sync

__all__ = [
    "TASKS", "Effects", "Worker", "celery_command", "client_app", "close_app", "cluster",
    "start_worker", "unique_queue", "worker_env",
]  # fmt: skip


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    """One BoltMQ cluster process (registry + broker) for the directory's tests."""
    running = RunningCluster(tmp_path_factory.mktemp("celery-cluster"))
    try:
        yield running
    finally:
        running.stop()


def unique_queue(prefix: str = "t") -> str:
    """A queue name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class Effects:
    """The lines the test tasks append, one file per worker process (tests/celery/celery_app)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def lines(self) -> list[list[str]]:
        """Every line so far, split into fields (the file name, i.e. the pid, first)."""
        found = []
        for path in sorted(self.directory.glob("*.log")):
            for line in path.read_text().splitlines():
                found.append([path.stem, *line.split()])
        return found

    def count(self, kind: str) -> collections.Counter[str]:
        """How many times each argument ran for lines of ``kind``."""
        return collections.Counter(f[2] for f in self.lines() if f[1] == kind)


class Worker:
    """A worker process; its output is kept in ``lines``."""

    def __init__(self, args: list[str], env: dict[str, str], ready: str) -> None:
        self.process = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self._ready_text = ready
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            self.lines.append(line)
            if self._ready_text in line:
                self.ready.set()

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait for the ready line; fail with the output when it does not come."""
        if not self.ready.wait(timeout):
            self.stop()
            raise AssertionError("worker not ready:\n" + self.output())

    def output(self) -> str:
        """The last lines of the output."""
        return "\n".join(self.lines[-40:])

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        self.process.kill()
        self.process.wait(10)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (Celery's warm shutdown) and wait; SIGKILL when it does not end."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def wait_exit(self, timeout: float) -> int:
        """Wait for the process to end by itself; its exit code."""
        wait_until_sync(lambda: self.process.poll() is not None, timeout, "the worker to exit")
        return int(self.process.returncode)


def worker_env(cluster: RunningCluster, queue: str, effects: Effects, tmp: Path,
               **extra: str) -> dict[str, str]:  # fmt: skip
    """The environment tests/celery/celery_app reads."""
    results = tmp / "results"
    results.mkdir(exist_ok=True)
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "BOLTMQ_URL": f"boltmq://{cluster.registry}",
        "CELERY_QUEUE": queue,
        "CELERY_EFFECTS": str(effects.directory),
        "CELERY_RESULTS": str(results),
        **extra,
    }


def client_app(env: dict[str, str]) -> Celery:
    """A Celery app of the test process that sends to the env's queue and reads its results;
    tasks are sent by name (``send_task``), as a client without the task code does."""
    app = Celery("client", broker=env["BOLTMQ_URL"], backend=f"file://{env['CELERY_RESULTS']}")
    app.conf.task_default_queue = env["CELERY_QUEUE"]
    return app


def close_app(app: Celery) -> None:
    """Close the app's connections: Celery's own close() only drops its pool, and kombu keeps
    its pools per broker URL for the whole process, so they are emptied (the next test's app
    opens new ones)."""
    app.close()
    kombu.pools.reset()


#: The test tasks' names (tests/celery/celery_app.py).
TASKS = "tests.celery.celery_app."


def start_worker(env: dict[str, str], name: str, *, concurrency: int = 2,
                 extra: tuple[str, ...] = ()) -> Worker:  # fmt: skip
    """A ``celery worker`` process (thread pool) on the env's queue, ready."""
    args = [
        sys.executable, "-m", "celery", "-A", "tests.celery.celery_app", "worker",
        "-P", "threads", "-c", str(concurrency), "-n", f"{name}@%h",
        "-l", os.environ.get("CELERY_LOG_LEVEL", "info"),
        "-Q", env["CELERY_QUEUE"], "--without-gossip", "--without-mingle",
        "--without-heartbeat", *extra,
    ]  # fmt: skip
    worker = Worker(args, env, " ready.")
    worker.wait_ready()
    return worker


def celery_command(env: dict[str, str], *args: str, timeout: float = 60.0) -> str:
    """Run ``celery -A tests.celery.celery_app ARGS`` to its end; its output."""
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tests.celery.celery_app", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    return done.stdout + done.stderr
