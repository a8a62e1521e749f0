"""A ``taskiq worker`` process on BoltMQ runs 500 kicked tasks, each exactly once."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from boltmq.taskiq import BoltMQBroker
from tests.celery.helpers import Effects, Worker, unique_queue
from tests.client.helpers import ROOT, RunningCluster
from tests.support.waiting import wait_until_sync


def test_a_taskiq_worker_runs_500_kicked_tasks_once_each(
    cluster: RunningCluster, tmp_path: Path
) -> None:
    topic = unique_queue("taskiq")
    effects = Effects(tmp_path / "effects")
    env = {
        **os.environ, "PYTHONPATH": str(ROOT), "BOLTMQ_NAMESRV": cluster.registry,
        "TASKIQ_TOPIC": topic, "CELERY_EFFECTS": str(effects.directory),
    }  # fmt: skip
    args = [sys.executable, "-m", "taskiq", "worker", "tests.celery.taskiq_app:broker",
            "--workers", "1"]  # fmt: skip
    worker = Worker(args, env, "Listening started")
    try:
        worker.wait_ready(60)
        asyncio.run(_kick(cluster.registry, topic, 500))
        wait_until_sync(lambda: sum(effects.count("record").values()) >= 500, 60,
                        "500 task runs")  # fmt: skip
    finally:
        worker.stop()
    assert effects.count("record") == {str(n): 1 for n in range(500)}


async def _kick(namesrv: str, topic: str, count: int) -> None:
    # A client broker of its own: the test process sends, as an application would.
    broker = BoltMQBroker(namesrv, topic=topic, queue_nums=4)
    task = broker.register_task(_record_stub, task_name="record")
    await broker.startup()
    try:
        for n in range(count):
            await task.kiq(n)
    finally:
        await broker.shutdown()


async def _record_stub(n: int) -> int:
    """Never run here: the worker process has the real task under the same name."""
    raise AssertionError("run by the worker process only")
