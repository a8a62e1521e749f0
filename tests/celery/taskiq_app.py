"""The taskiq broker the tests' worker processes run (``taskiq worker
tests.celery.taskiq_app:broker``), configured from ``BOLTMQ_NAMESRV``, ``TASKIQ_TOPIC`` and
``CELERY_EFFECTS`` (each run appends a line to its process's file)."""

from __future__ import annotations

import os
from pathlib import Path

from boltmq.taskiq import BoltMQBroker

broker = BoltMQBroker(
    os.environ.get("BOLTMQ_NAMESRV", "127.0.0.1:9876"),
    topic=os.environ.get("TASKIQ_TOPIC", "taskiq"),
    queue_nums=4,
    pop_wait_seconds=0.5,
)


@broker.task(task_name="record")
async def record(n: int) -> int:
    """Runs once per message: records ``n``."""
    directory = Path(os.environ["CELERY_EFFECTS"])
    with open(directory / f"{os.getpid()}.log", "a") as out:
        out.write(f"record {n}\n")
    return n
