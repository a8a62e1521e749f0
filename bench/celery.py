"""``python -m bench celery``: Celery tasks/s through BoltMQ beside the same workload on Redis.

One run, same machine, same workload for each broker: a ``celery worker`` process (thread pool,
``--concurrency`` threads, gossip, mingle and heartbeats off) and this process sending
``--tasks`` tasks with ``apply_async`` as fast as one thread can. Each task appends one line
to its worker's file; a run ends when the files hold every task. Figures: sends/s (the client)
and tasks/s end to end (first send to last task run), median of ``--rounds`` rounds.

- BoltMQ: ``boltmq cluster`` (ASYNC_FLUSH) and the ``boltmq://`` transport (pop consumption,
  prefetch = concurrency x 4, Celery's default).
- Redis: Debian's ``redis-server`` (appendonly, appendfsync everysec), started on a loopback
  port; kombu's Redis transport with redis-py. Without ``redis-server`` the Redis row says so.

    python -m bench celery                      # 3000 tasks, 3 rounds, 4 threads
    python -m bench celery --quick              # 300 tasks, 1 round
    python -m bench celery --tasks 10000 --concurrency 8 --json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# The worker processes import this module as their Celery app (``-A bench.celery``): the
# broker comes from the environment the benchmark gives them.
app: Any = None
if os.environ.get("BENCH_CELERY_BROKER"):
    from celery import Celery

    import boltmq.kombu  # noqa: F401  (registers boltmq://)

    app = Celery("bench_celery", broker=os.environ["BENCH_CELERY_BROKER"])
    app.conf.update(
        task_ignore_result=True,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        broker_transport_options={"queue_nums": 8},
    )

    @app.task(name="bench.noop")  # type: ignore[untyped-decorator]
    def noop(n: int) -> None:
        """Appends one line to this process's file: the benchmark counts runs."""
        with open(Path(os.environ["BENCH_CELERY_DONE"]) / f"{os.getpid()}.log", "a") as out:
            out.write(f"{n}\n")


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print one line per broker (or a JSON document)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench celery",
        description="Celery tasks/s through BoltMQ beside Redis, one run on this machine.",
        epilog="example: python -m bench celery --tasks 3000 --rounds 3 --concurrency 4",
    )
    parser.add_argument("--tasks", type=int, default=3000, help="tasks per round (3000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per broker (3)")
    parser.add_argument("--concurrency", type=int, default=4, help="worker threads (4)")
    parser.add_argument("--quick", action="store_true", help="300 tasks, one round")
    parser.add_argument("--skip-redis", action="store_true", help="BoltMQ alone")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.quick:
        args.tasks, args.rounds = 300, 1
    if args.tasks < 1 or args.rounds < 1 or args.concurrency < 1:
        parser.error("--tasks, --rounds and --concurrency must be at least 1")
    try:
        import celery  # noqa: F401
        import kombu  # noqa: F401
    except ImportError:
        sys.exit("celery bench: Celery is not installed; install the extra boltmq[celery]")

    rows: list[dict[str, Any]] = [_boltmq_row(args)]
    rows.append({"broker": "Redis", "skipped": "--skip-redis"} if args.skip_redis
                else _redis_row(args))  # fmt: skip
    machine = f"{platform.node()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}"
    if args.json:
        print(json.dumps({"machine": machine, "tasks": args.tasks, "rounds": args.rounds,
                          "concurrency": args.concurrency, "rows": rows}, indent=2))  # fmt: skip
        return
    print(f"celery bench: {args.tasks} tasks x {args.rounds} round(s), worker threads "
          f"{args.concurrency}; {machine}")  # fmt: skip
    for row in rows:
        if "skipped" in row:
            print(f"  {row['broker']:<8} skipped: {row['skipped']}")
        else:
            print(f"  {row['broker']:<8} {row['tasks_per_s']:>8,.0f} tasks/s end to end, "
                  f"{row['sends_per_s']:>8,.0f} sends/s  ({row['server']})")  # fmt: skip


def _boltmq_row(args: argparse.Namespace) -> dict[str, Any]:
    from bench.peers.boltmq import BoltMQServer

    server = BoltMQServer("ASYNC_FLUSH")
    server.start()
    try:
        url = f"boltmq://{server.endpoint()['namesrv']}"
        return _measure("BoltMQ", url, args) | {"server": f"boltmq {server.version()}"}
    finally:
        server.stop()


def _redis_row(args: argparse.Namespace) -> dict[str, Any]:
    if shutil.which("redis-server") is None:
        return {"broker": "Redis", "skipped": "redis-server is not installed "
                "(Debian package redis-server)"}  # fmt: skip
    from bench.peers.redis import RedisServer

    server = RedisServer("everysec")
    server.start()
    try:
        url = f"redis://127.0.0.1:{server.endpoint()['port']}/0"
        return _measure("Redis", url, args) | {"server": f"redis-server {server.version()}"}
    finally:
        server.stop()


def _measure(name: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    totals: list[float] = []
    sends: list[float] = []
    for _ in range(args.rounds):
        total, send = _round(url, args)
        totals.append(total)
        sends.append(send)
    return {
        "broker": name,
        "tasks_per_s": statistics.median(totals),
        "sends_per_s": statistics.median(sends),
        "rounds_tasks_per_s": totals,
    }


def _round(url: str, args: argparse.Namespace) -> tuple[float, float]:
    """One round on a queue of its own: (tasks/s end to end, sends/s)."""
    import kombu.pools
    from celery import Celery

    import boltmq.kombu  # noqa: F401  (registers boltmq://)

    queue = f"bench-{uuid.uuid4().hex[:8]}"
    done = Path(tempfile.mkdtemp(prefix="boltmq-celery-bench-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_CELERY_BROKER": url,
           "BENCH_CELERY_DONE": str(done)}  # fmt: skip
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "bench.celery", "worker", "-P", "threads",
         "-c", str(args.concurrency), "-Q", queue, "-l", "warning", "--without-gossip",
         "--without-mingle", "--without-heartbeat", "-n", f"{queue}@%h"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    client = Celery("bench_client", broker=url)
    client.conf.task_ignore_result = True
    try:
        _wait_worker(client, queue, worker)
        start = time.perf_counter()
        for n in range(args.tasks):
            client.send_task("bench.noop", (n,), queue=queue)
        sent = time.perf_counter()
        _wait_done(done, args.tasks, worker)
        end = time.perf_counter()
    finally:
        worker.terminate()
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(10)
        # Celery's close() only drops its pool; kombu keeps pools per URL for the process.
        client.close()
        kombu.pools.reset()
        shutil.rmtree(done, ignore_errors=True)
    return args.tasks / (end - start), args.tasks / (sent - start)


def _wait_worker(client: Any, queue: str, worker: subprocess.Popen[str]) -> None:
    # Ready when it answers a ping addressed to it: its queue is consumed by then.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            output = worker.stderr.read() if worker.stderr else ""
            raise RuntimeError(f"the celery worker exited:\n{output}")
        if client.control.ping(destination=[f"{queue}@{socket.gethostname()}"], timeout=1.0):
            return
    raise RuntimeError("the celery worker did not answer a ping within 120 s")


def _wait_done(done: Path, tasks: int, worker: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        count = sum(len(p.read_bytes().splitlines()) for p in done.glob("*.log"))
        if count >= tasks:
            return
        if worker.poll() is not None:
            raise RuntimeError("the celery worker exited before running every task")
        time.sleep(0.02)
    raise RuntimeError(f"not every task ran within 600 s ({tasks} sent)")


if __name__ == "__main__":
    main()
