"""Client CPU per message: what BoltMQ's own client process spends, against a broker elsewhere.

Starts a registry and a broker (``boltmq cluster``) in a process of their own, then runs the
issue 21 workloads through the real `Producer` and `PullConsumer` in this process and reads
this process's CPU time (user + system, getrusage) and the broker's (/proc/PID/stat) over each
timed window. 1 KiB bodies.

    (a) 64 concurrent senders, each sending one message and awaiting its answer;
    (b) 8 senders of batches of 32 (one SEND_BATCH_MESSAGE each);
    (c) consume a backlog with a pull consumer, committing offsets.

The machine is shared and noisy: CPU microseconds per message are the figure to compare, not
rates; ``--rounds`` repeats every workload and reports the median.

    python -m bench client-cpu [--seconds 3] [--backlog 50000] [--rounds 3] [--backend trio]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import anyio

from client.message import Message
from client.producer import Producer
from client.pull_consumer import PullConsumer
from protocol.bodies import ConsumeFromWhere

BODY = b"x" * 1024
READY = re.compile(r"ready on ([\d.]+:\d+)")
ROOT = Path(__file__).resolve().parents[1]
_TICK = os.sysconf("SC_CLK_TCK")


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far, from /proc."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Window:
    """CPU of this process and of the broker between `start` and `stop`."""

    def __init__(self, broker_pid: int) -> None:
        self.broker_pid = broker_pid
        self.client = self.broker = self.wall = 0.0

    def start(self) -> None:
        """Mark the window's start."""
        self._c0, self._b0, self._w0 = _self_cpu(), _proc_cpu(self.broker_pid), time.monotonic()

    def stop(self) -> None:
        """Mark its end."""
        self.client = _self_cpu() - self._c0
        self.broker = _proc_cpu(self.broker_pid) - self._b0
        self.wall = time.monotonic() - self._w0


async def _single(producer: Producer, topic: str, seconds: float) -> int:
    sent = 0
    deadline = time.monotonic() + seconds

    async def sender() -> None:
        nonlocal sent
        while time.monotonic() < deadline:
            await producer.send(Message(topic, BODY))
            sent += 1

    async with anyio.create_task_group() as tg:
        for _ in range(64):
            tg.start_soon(sender)
    return sent


async def _batches(producer: Producer, topic: str, seconds: float) -> int:
    sent = 0
    deadline = time.monotonic() + seconds

    async def sender() -> None:
        nonlocal sent
        while time.monotonic() < deadline:
            await producer.send_batch([Message(topic, BODY) for _ in range(32)])
            sent += 32

    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(sender)
    return sent


async def _fill(producer: Producer, topic: str, count: int) -> None:
    left = count

    async def sender() -> None:
        nonlocal left
        while left > 0:
            left -= 32
            await producer.send_batch([Message(topic, BODY) for _ in range(32)])

    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(sender)


async def _consume(namesrv: str, topic: str, group: str, count: int) -> int:
    got = 0
    async with PullConsumer(
        group,
        namesrv_addr=namesrv,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        auto_commit=False,
    ) as consumer:
        await consumer.subscribe(topic)
        with anyio.fail_after(600):
            while got < count:
                got += len(await consumer.poll(timeout=5))
                await consumer.commit()
    return got


async def _measure(broker_pid: int, work: Callable[[], Awaitable[int]]) -> tuple[int, Window]:
    window = Window(broker_pid)
    window.start()
    count = await work()
    window.stop()
    return count, window


async def _run(
    namesrv: str, broker_pid: int, seconds: float, backlog: int, rounds: int, only: str
) -> None:
    results: dict[str, list[tuple[float, float, float]]] = {key: [] for key in only}
    async with Producer("BenchCpuPG", namesrv_addr=namesrv) as producer:
        # Warm up: routes, connections, topic creation.
        await _single(producer, "BenchCpuA", 0.5)
        await _batches(producer, "BenchCpuB", 0.5)
        for round_no in range(rounds):
            for key in only:
                if key == "a":
                    count, w = await _measure(
                        broker_pid, lambda: _single(producer, "BenchCpuA", seconds)
                    )
                elif key == "b":
                    count, w = await _measure(
                        broker_pid, lambda: _batches(producer, "BenchCpuB", seconds)
                    )
                else:
                    topic, group = f"BenchCpuC{round_no}", f"BenchCpuCG{round_no}"
                    await _fill(producer, topic, backlog)
                    count, w = await _measure(
                        broker_pid, partial(_consume, namesrv, topic, group, backlog)
                    )
                results[key].append(
                    (w.client * 1e6 / count, w.broker * 1e6 / count, count / w.wall)
                )
                print(
                    f"  round {round_no + 1} ({key}): {count} msgs, client "
                    f"{w.client * 1e6 / count:.1f} us/msg, broker {w.broker * 1e6 / count:.1f} "
                    f"us/msg, {count / w.wall:,.0f} msgs/s",
                    file=sys.stderr,
                )
    names = {
        "a": "(a) 64 senders, 1 msg each",
        "b": "(b) 8 senders, batches of 32",
        "c": f"(c) consume {backlog:,} backlog + commit",
    }
    print(f"{'workload':<38} {'client us/msg':>14} {'broker us/msg':>14} {'msgs/s':>10}")
    for key, rows in results.items():
        client = statistics.median(r[0] for r in rows)
        broker = statistics.median(r[1] for r in rows)
        rate = statistics.median(r[2] for r in rows)
        print(f"{names[key]:<38} {client:>14.1f} {broker:>14.1f} {rate:>10,.0f}")


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m bench client-cpu``."""
    parser = argparse.ArgumentParser(
        prog="bench client-cpu",
        description="Client-process CPU per message for single sends, batches and consumption.",
        epilog="example: python -m bench client-cpu --seconds 3 --rounds 3 --backend asyncio",
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="length of (a) and (b)")
    parser.add_argument("--backlog", type=int, default=50_000, help="messages consumed in (c)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the median is shown")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--flush", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default="ASYNC_FLUSH")
    parser.add_argument("--only", default="abc", help="workloads to run, e.g. 'a' or 'bc'")
    parser.add_argument("--quick", action="store_true", help="one short round")
    args = parser.parse_args(argv)
    if not args.only or set(args.only) - set("abc"):
        parser.error(f"--only takes letters of 'abc' (workloads (a), (b), (c)), not {args.only!r}")
    if args.quick:
        args.seconds, args.backlog, args.rounds = 0.5, 2_000, 1
    home = Path(tempfile.mkdtemp(prefix="boltmq-cpu-"))
    registry_port, broker_port = _free_port(), _free_port()
    command = [
        sys.executable, "-m", "boltmq.cli", "cluster", "--home", str(home),
        "--registryPort", str(registry_port), "--listenPort", str(broker_port),
        "--bindAddress", "127.0.0.1", "--fastPortEnable", "false",
        "--flushDiskType", args.flush, "--log-level", "info",
    ]  # fmt: skip
    log = open(home / "cluster.log", "w+b")  # noqa: SIM115 - closed below, read on failure
    proc = subprocess.Popen(command, cwd=ROOT, stderr=log, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            log.seek(0)
            if READY.search(log.read().decode(errors="replace")):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise SystemExit(
                    "bench client-cpu: the cluster did not start:\n"
                    + log.read().decode(errors="replace")[-2000:]
                )
            time.sleep(0.1)
        load = os.getloadavg()
        print(
            f"client CPU per message, {args.backend}, {args.flush}; python "
            f"{platform.python_version()}, {os.cpu_count()} cpus, load "
            f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
        )
        anyio.run(
            _run, f"127.0.0.1:{registry_port}", proc.pid, args.seconds, args.backlog,
            args.rounds, args.only, backend=args.backend,
        )  # fmt: skip
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
