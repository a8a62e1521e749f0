"""The gRPC path beside the remoting path: the official RocketMQ 5 Python client through
`boltmq proxy`, and BoltMQ's own client straight to the broker, on one cluster.

Three processes: the cluster (registry + broker, ASYNC_FLUSH), the proxy, and the load (this
process for BoltMQ's client; the official client's own interpreter for the 5.x rows, built
once as the interop tests build it). Per cell: messages per second, and the CPU the broker
and the proxy spent per message (user + system from /proc, all threads), which is what says
where the gRPC path's time goes. 1 KiB bodies, a topic of 8 queues, 64 sends in flight.

- send: ``remoting`` (Producer.send from 64 tasks) and ``gRPC`` (Producer.send_async with a
  window of 64);
- receive + ack by pop: ``remoting`` (BoltMQ's SimpleConsumer over POP_MESSAGE/ACK_MESSAGE)
  and ``gRPC`` (the official SimpleConsumer: ReceiveMessage, AckMessage), each reading what
  its own send row stored, as a group of its own.

    python -m bench proxy [--messages 20000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from bench.bench_broker_cpu import _proc_cpu
from client import Admin, ClientInstance, Message, Producer, SimpleConsumer

ROOT = Path(__file__).resolve().parent.parent
BODY = b"x" * 1024
QUEUES = 8
WINDOW = 64
_REGISTRY = re.compile(r"registry ready: tcp port (\d+)")
_BROKER = re.compile(r"broker \S+ \(.*\) of cluster \S+ ready on ")
_PROXY = re.compile(r"proxy ready: gRPC port (\d+)")


class _Node:
    """A `boltmq` sub-command as a process, its log read away so a full pipe never stalls it."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.log = ""

    @classmethod
    async def start(cls, nursery: trio.Nursery, *args: str, ready: re.Pattern[str]) -> tuple[
        _Node, re.Match[str]
    ]:  # fmt: skip
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "boltmq.cli", *args], cwd=ROOT,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        node = cls(process)
        found = trio.Event()
        match: list[re.Match[str]] = []

        async def read() -> None:
            assert process.stdout is not None
            async for chunk in process.stdout:
                node.log += chunk.decode(errors="replace")
                if not match and (hit := ready.search(node.log)):
                    match.append(hit)
                    found.set()
                node.log = node.log[-20000:] if match else node.log

        nursery.start_soon(read)
        with trio.fail_after(60):
            while not found.is_set():
                if process.poll() is not None:
                    raise RuntimeError(f"boltmq {args[0]} ended before it was ready:\n{node.log}")
                with trio.move_on_after(0.1):
                    await found.wait()
        return node, match[0]

    def cpu(self) -> float:
        user, system, _ = _proc_cpu(self.process.pid)
        return user + system


async def _measure(
    nodes: dict[str, _Node], work: Callable[[], Awaitable[tuple[int, float]]]
) -> dict[str, float]:
    before = {name: node.cpu() for name, node in nodes.items()}
    messages, seconds = await work()
    cells = {"messages": messages, "rate": messages / seconds}
    for name, node in nodes.items():
        cells[f"{name} us/msg"] = (node.cpu() - before[name]) / messages * 1e6
    return cells


async def _remoting_send(namesrv: str, topic: str, count: int) -> tuple[int, float]:
    async with Producer("PG_bench_proxy", namesrv_addr=namesrv) as producer:
        await producer.send(Message(topic, BODY))  # route and connection, not timed
        left = count - 1
        start = time.perf_counter()

        async def sender() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await producer.send(Message(topic, BODY))

        async with trio.open_nursery() as nursery:
            for _ in range(WINDOW):
                nursery.start_soon(sender)
        return count, time.perf_counter() - start


async def _remoting_receive(namesrv: str, topic: str, count: int) -> tuple[int, float]:
    group = f"CG_bench_pop_{uuid.uuid4().hex[:6]}"
    async with SimpleConsumer(group, namesrv_addr=namesrv, subscriptions={topic: "*"}) as consumer:
        received = 0
        start = time.perf_counter()
        with trio.fail_after(600):
            while received < count:
                messages = await consumer.receive(32, 30)
                async with trio.open_nursery() as nursery:
                    for message in messages:
                        nursery.start_soon(consumer.ack, message)
                received += len(messages)
        return received, time.perf_counter() - start


async def _rmq5(python: Path, home: Path, *args: object) -> tuple[int, float]:
    done = await trio.run_process(
        [str(python), str(Path(__file__).with_name("rmq5_load.py")), *map(str, args)],
        capture_stdout=True, capture_stderr=True, check=False,
        env={**os.environ, "HOME": str(home)},
    )  # fmt: skip
    lines = [line for line in done.stdout.decode().splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"rmq5_load.py {args[0]} failed:\n{done.stderr.decode()[-3000:]}")
    figures = json.loads(lines[-1])
    return int(figures["messages"]), float(figures["seconds"])


def _line(label: str, cells: dict[str, float]) -> str:
    return (
        f"  {label:<26} {cells['rate']:>9,.0f} msgs/s   broker {cells['broker us/msg']:>6.1f} "
        f"us/msg   proxy {cells['proxy us/msg']:>6.1f} us/msg   ({cells['messages']:,.0f} msgs)"
    )


async def _main(args: argparse.Namespace) -> None:
    from tests.interop.rmq5_client import build_venv

    print("bench proxy: building or reusing the official 5.x client's venv", flush=True)
    python = await trio.to_thread.run_sync(build_venv)
    with tempfile.TemporaryDirectory(prefix="boltmq-bench-proxy-") as tmp:
        home = Path(tmp)
        async with trio.open_nursery() as nursery:
            cluster, found = await _Node.start(
                nursery, "cluster", "--home", str(home), "--registryPort", "0",
                "--listenPort", "0", "--fastPortEnable", "false", "--no-grpc",
                # A fresh store faults its commit log in while idle: not what a cell measures.
                "--commitLogIdlePrefaultMb", "0", ready=_REGISTRY,
            )  # fmt: skip
            namesrv = f"127.0.0.1:{found.group(1)}"
            with trio.fail_after(60):
                while not _BROKER.search(cluster.log):
                    await trio.sleep(0.1)
            proxy, found = await _Node.start(
                nursery, "proxy", "-n", namesrv, "--grpcServerPort", "0", ready=_PROXY
            )
            endpoint = f"127.0.0.1:{found.group(1)}"
            nodes = {"broker": cluster, "proxy": proxy}
            try:
                topics = {}
                async with Admin(namesrv_addr=namesrv) as admin:
                    for path in ("remoting", "grpc"):
                        topics[path] = f"BenchProxy_{path}_{uuid.uuid4().hex[:6]}"
                        await admin.create_topic(topics[path], queue_nums=QUEUES)
                async with ClientInstance(namesrv) as instance:
                    for topic in topics.values():
                        with trio.fail_after(30):
                            while not await instance.fetch_route(topic):
                                await trio.sleep(0.2)
                n = args.messages
                print(
                    f"bench proxy: {n:,} messages of 1 KiB per cell, {QUEUES} queues, {WINDOW} in "
                    f"flight; proxy {endpoint}, registry {namesrv}",
                    flush=True,
                )
                grpc_group = f"CG_bench_grpc_{uuid.uuid4().hex[:6]}"
                rows = [
                    ("send, remoting (BoltMQ)",
                     lambda: _remoting_send(namesrv, topics["remoting"], n)),
                    ("send, gRPC (official 5.x)",
                     lambda: _rmq5(python, home, "send", endpoint, topics["grpc"], n, WINDOW)),
                    ("receive+ack, remoting pop",
                     lambda: _remoting_receive(namesrv, topics["remoting"], n)),
                    ("receive+ack, gRPC (5.x)",
                     lambda: _rmq5(python, home, "receive", endpoint, topics["grpc"], grpc_group,
                                   n)),
                ]  # fmt: skip
                for label, work in rows:
                    print(_line(label, await _measure(nodes, work)), flush=True)
            finally:
                for node in (proxy, cluster):
                    node.process.terminate()
                    with trio.move_on_after(20):
                        await node.process.wait()
                nursery.cancel_scope.cancel()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench proxy",
        description=__doc__.split("\n\n")[0],
        epilog="example: python -m bench proxy --messages 20000",
    )
    parser.add_argument("--messages", type=int, default=20_000, help="messages per cell")
    parser.add_argument("--quick", action="store_true", help="2,000 messages per cell")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages = 2_000
    trio.run(_main, args)


if __name__ == "__main__":
    main()
