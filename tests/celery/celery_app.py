"""The Celery app the tests' worker processes run (``celery -A tests.celery.celery_app``).

Configured from the environment the test gives the worker: ``BOLTMQ_URL`` (the broker),
``CELERY_QUEUE`` (the test's own queue), ``CELERY_EFFECTS`` (a directory where every task
run appends a line to a file of its process, so a test counts runs, not results), and
``BOLTMQ_VISIBILITY`` (the visibility timeout in seconds).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from celery import Celery

import boltmq.kombu  # noqa: F401  (registers boltmq://)

app = Celery(
    "boltmq_tests",
    broker=os.environ.get("BOLTMQ_URL", "boltmq://127.0.0.1:9876"),
    backend=f"file://{os.environ.get('CELERY_RESULTS', '/nonexistent')}",
)
app.conf.update(
    task_default_queue=os.environ.get("CELERY_QUEUE", "celery"),
    broker_transport_options={
        "visibility_timeout": float(os.environ.get("BOLTMQ_VISIBILITY", "3600")),
        "queue_nums": 4,
        "pop_wait": 0.5,
    },
    broker_connection_retry_on_startup=True,
    broker_connection_max_retries=int(os.environ.get("CELERY_CONNECT_RETRIES", "100")),
    worker_prefetch_multiplier=int(os.environ.get("CELERY_PREFETCH", "4")),
    worker_hijack_root_logger=False,
    task_store_errors_even_if_ignored=True,
)


def _effect(*fields: Any) -> None:
    """One line per run in this process's file: the fields, space-separated."""
    directory = Path(os.environ["CELERY_EFFECTS"])
    with open(directory / f"{os.getpid()}.log", "a") as out:
        out.write(" ".join(str(f) for f in fields) + "\n")


@app.task
def record(n: int) -> int:
    """Runs once per message: records ``n``."""
    _effect("record", n)
    return n


@app.task
def record_time(n: int) -> float:
    """Records ``n`` and when it ran."""
    now = time.time()
    _effect("time", n, now)
    return now


@app.task(acks_late=True)
def slow(n: int, seconds: float) -> int:
    """Acked after it ran: records its start, sleeps, records its end."""
    _effect("start", n, time.time())
    time.sleep(seconds)
    _effect("done", n)
    return n


@app.task(bind=True, max_retries=2)
def flaky(self: Any, n: int) -> int:
    """Fails and retries twice (0.2 s apart), then fails for good."""
    _effect("flaky", n, self.request.retries)
    raise self.retry(countdown=0.2, exc=RuntimeError(f"flaky {n} failed"))


@app.task
def always_fails(n: int) -> None:
    """Raises every time."""
    _effect("fails", n)
    raise ValueError(f"task {n} always fails")
