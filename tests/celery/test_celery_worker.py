"""A real ``celery worker`` process on BoltMQ: tasks run once, countdowns hold, a killed
worker's unacked tasks run again elsewhere, retries and failures end as Celery says.

Each test has a queue of its own, so nothing another test left behind reaches its workers;
the first two share one worker (and its queue) and count different kinds of effects.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from celery import Celery

from tests.celery.helpers import (
    TASKS,
    Effects,
    Worker,
    client_app,
    close_app,
    start_worker,
    unique_queue,
    worker_env,
)
from tests.client.helpers import RunningCluster
from tests.support.waiting import wait_until_sync


@attrs.frozen
class _Shared:
    app: Celery
    env: dict[str, str]
    effects: Effects
    worker: Worker


@pytest.fixture(scope="module")
def shared(cluster: RunningCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Shared]:
    """One worker (4 threads, the default visibility timeout) for the tests that need
    nothing special of it; each counts its own kind of effect."""
    tmp = tmp_path_factory.mktemp("shared-worker")
    effects = Effects(tmp / "effects")
    env = worker_env(cluster, unique_queue("shared"), effects, tmp)
    app = client_app(env)
    worker = start_worker(env, "shared", concurrency=4)
    try:
        yield _Shared(app, env, effects, worker)
    finally:
        worker.stop()
        close_app(app)


def test_a_thousand_tasks_run_once_each(shared: _Shared) -> None:
    app, effects = shared.app, shared.effects
    results = [app.send_task(TASKS + "record", (n,)) for n in range(1000)]
    wait_until_sync(lambda: sum(effects.count("record").values()) >= 1000, 60,
                    "1000 task runs")  # fmt: skip
    assert sorted(r.get(timeout=30) for r in results) == list(range(1000))
    assert effects.count("record") == {str(n): 1 for n in range(1000)}
    # Every message was handed out: nothing is left for another worker.
    with app.connection_for_write() as connection:
        queue = shared.env["CELERY_QUEUE"]
        assert connection.default_channel.queue_declare(queue, passive=True).message_count == 0


def test_a_countdown_holds_the_task_back(shared: _Shared) -> None:
    app, effects = shared.app, shared.effects
    sent = time.time()
    later = app.send_task(TASKS + "record_time", (1,), countdown=3)
    now = app.send_task(TASKS + "record_time", (2,))
    assert now.get(timeout=20) < sent + 3
    ran = later.get(timeout=20)
    assert ran >= sent + 3, f"ran {ran - sent:.2f} s after the send"
    assert effects.count("time") == {"1": 1, "2": 1}


def test_a_killed_workers_unacked_tasks_run_on_another(
    cluster: RunningCluster, tmp_path: Path
) -> None:
    queue = unique_queue("killed")
    effects = Effects(tmp_path / "effects")
    env = worker_env(cluster, queue, effects, tmp_path, BOLTMQ_VISIBILITY="3",
                     CELERY_PREFETCH="1")  # fmt: skip
    app = client_app(env)
    first = start_worker(env, "first", concurrency=2)
    for n in range(6):
        app.send_task(TASKS + "slow", (n, 1.0))
    wait_until_sync(lambda: len(effects.count("start")) >= 2, 20, "two tasks started")
    first.kill()
    started_on_first = set(effects.count("start")) - set(effects.count("done"))
    assert started_on_first, "the worker finished its tasks before it was killed"
    second = start_worker(env, "second", concurrency=2)
    try:
        wait_until_sync(lambda: len(effects.count("done")) == 6, 60, "all six tasks done")
    finally:
        second.stop()
        close_app(app)
    done = effects.count("done")
    assert set(done) == {str(n) for n in range(6)}
    starts = effects.count("start")
    for n in started_on_first:
        assert starts[n] == 2, f"task {n} started {starts[n]} times"
        # It came back only once its visibility timeout (3 s) had passed.
        first, again = sorted(float(f[3]) for f in effects.lines() if f[1:3] == ["start", n])
        assert again - first >= 2.5, f"task {n} ran again {again - first:.2f} s later"


def test_retries_then_failure_and_no_redelivery(cluster: RunningCluster, tmp_path: Path) -> None:
    queue = unique_queue("retry")
    effects = Effects(tmp_path / "effects")
    env = worker_env(cluster, queue, effects, tmp_path, BOLTMQ_VISIBILITY="1")
    app = client_app(env)
    worker = start_worker(env, "w1")
    try:
        flaky = app.send_task(TASKS + "flaky", (7,))
        failing = app.send_task(TASKS + "always_fails", (8,))
        wait_until_sync(lambda: app.AsyncResult(flaky.id).state == "FAILURE", 30, "flaky's failure")
        wait_until_sync(lambda: app.AsyncResult(failing.id).state == "FAILURE", 30,
                        "always_fails' failure")  # fmt: skip
        assert isinstance(flaky.result, RuntimeError)
        assert isinstance(failing.result, ValueError)
        retries = sorted(int(f[3]) for f in effects.lines() if f[1] == "flaky")
        assert retries == [0, 1, 2]
        # Well past the visibility timeout: nothing came back.
        seen = len(effects.lines())
        with_deadline = time.monotonic() + 2.5
        while time.monotonic() < with_deadline:
            assert len(effects.lines()) == seen, effects.lines()
            time.sleep(0.1)
        assert effects.count("fails") == {"8": 1}
    finally:
        worker.stop()
        close_app(app)
