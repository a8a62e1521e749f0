"""``celery inspect`` and ``celery control`` reach every worker process; bad input fails clearly.

The control commands travel through fanout and direct exchanges, which live in the broker
(a topic per exchange, a group per bound queue), so each worker process gets its copy.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from boltmq.kombu import NameTooLong
from tests.celery.helpers import (
    TASKS,
    Effects,
    Worker,
    celery_command,
    client_app,
    close_app,
    start_worker,
    unique_queue,
    worker_env,
)
from tests.client.helpers import RunningCluster
from tests.ports import free_port


def test_inspect_ping_and_control_shutdown_reach_two_workers(
    cluster: RunningCluster, tmp_path: Path
) -> None:
    queue = unique_queue("control")
    env = worker_env(cluster, queue, Effects(tmp_path / "effects"), tmp_path)
    first, second = start_worker(env, "first"), start_worker(env, "second")
    try:
        # Addressed to both, the command ends as soon as both answered (10 s at most).
        nodes = f"first@{socket.gethostname()},second@{socket.gethostname()}"
        pong = celery_command(env, "inspect", "ping", "-t", "10", "-d", nodes)
        assert "first@" in pong and "second@" in pong, pong
        assert pong.count("pong") == 2, pong
        assert "2 nodes online" in pong, pong
        celery_command(env, "control", "shutdown", "-t", "1")
        assert first.wait_exit(20) == 0, first.output()
        assert second.wait_exit(20) == 0, second.output()
        assert any("Got shutdown from remote" in line for line in first.lines)
    finally:
        first.stop()
        second.stop()


def test_an_unreachable_registry_is_one_line_naming_it(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    env = worker_env(_Unreachable(address), "nowhere", Effects(tmp_path / "effects"), tmp_path)
    args = [
        sys.executable, "-m", "celery", "-A", "tests.celery.celery_app", "worker",
        "-P", "threads", "-c", "1", "-Q", "nowhere", "--without-gossip", "--without-mingle",
        "--without-heartbeat",
    ]  # fmt: skip
    worker = Worker(args, env, "Trying again in 4.00 seconds")  # the second failed attempt
    try:
        worker.wait_ready(60)
    finally:
        worker.kill()
    failures = [line for line in worker.lines if "Cannot connect" in line]
    assert len(failures) == 2, worker.output()
    assert all(f"no BoltMQ registry answers at {address}" in line for line in failures)
    assert not any("Traceback" in line for line in worker.lines), worker.output()
    # The client's own per-attempt warnings are not repeated on top of kombu's line.
    assert not any("retry allowed" in line for line in worker.lines), worker.output()


def test_a_queue_name_too_long_for_any_topic_is_refused_with_the_rule(
    cluster: RunningCluster, tmp_path: Path
) -> None:
    env = worker_env(cluster, unique_queue("long"), Effects(tmp_path / "effects"), tmp_path)
    app = client_app(env)
    with pytest.raises(NameTooLong, match=r"at most 71 are allowed") as refused:
        app.send_task(TASKS + "record", (1,), queue="q." * 40)
    assert "RocketMQ topic names hold 127" in str(refused.value)
    close_app(app)


class _Unreachable:
    """A cluster stand-in whose registry address nothing listens on."""

    def __init__(self, registry: str) -> None:
        self.registry = registry
