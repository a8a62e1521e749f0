"""Produce rates of an ASYNC_MASTER and a SYNC_MASTER with one slave, against no slave.

Master and slave are ``boltmq broker`` processes of their own on loopback; 1 KiB messages are
sent one per request from 64 concurrent senders (BoltMQ's remoting client in this process).
For each setup it prints msgs/s, MB/s, p50/p99 send latency and, with a slave, the
replication rate (commit-log bytes on the slave per second, until it has caught up).

    python -m bench.bench_ha [--seconds 3] [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from bench.bench_produce_consume import _percentile, _produce
from protocol import RemotingClient, RemotingCommand, RequestCode
from protocol.bodies import KVTable

READY = re.compile(r"ready on ([\d.]+:\d+)")
ROOT = Path(__file__).resolve().parents[1]
FILE_SIZE = 256 * 1024 * 1024
SENDERS = 64


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def _start(store: Path, *extra: str) -> tuple[trio.Process, str]:
    """A broker process; returns it and its address once it is ready."""
    command = [
        sys.executable, "-m", "supervisors.cli", "broker",
        "--listenPort", "0", "--bindAddress", "127.0.0.1", "--fastPortEnable", "false",
        "--storePathRootDir", str(store), "--mapedFileSizeCommitLog", str(FILE_SIZE), *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await trio.lowlevel.open_process(
        command, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL
    )
    assert proc.stderr is not None
    buffer = b""
    with trio.fail_after(30):
        while True:
            chunk = await proc.stderr.receive_some(4096)
            if not chunk:
                raise RuntimeError("the broker process ended before it was ready")
            buffer += chunk
            if match := READY.search(buffer.decode(errors="replace")):
                return proc, match.group(1)


async def _runtime_info(client: RemotingClient, address: str) -> dict[str, str]:
    request = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
    answer = await client.invoke(address, request, 10)
    return dict(KVTable.from_json(answer.body or b"{}").table)


async def _stop(proc: trio.Process) -> None:
    proc.terminate()
    with trio.move_on_after(20):
        await proc.wait()
    if proc.returncode is None:
        proc.kill()
        await proc.wait()


async def _run_setup(role: str, with_slave: bool, seconds: float) -> dict[str, float]:
    base = Path(tempfile.mkdtemp(prefix="boltmq-bench-ha-"))
    ha_port = _free_port()
    procs: list[trio.Process] = []
    figures: dict[str, float] = {}
    try:
        master, address = await _start(
            base / "master", "--brokerRole", role, "--haListenPort", str(ha_port)
        )
        procs.append(master)
        async with RemotingClient() as client:
            if with_slave:
                slave, slave_address = await _start(
                    base / "slave", "--brokerRole", "SLAVE", "--brokerId", "1",
                    "--haMasterAddress", f"127.0.0.1:{ha_port}",
                )  # fmt: skip
                procs.append(slave)
                with trio.fail_after(30):
                    while (await _runtime_info(client, address)).get("haConnectionCount") != "1":
                        await trio.sleep(0.05)
            # Create the topic and warm the connection before measuring.
            await _produce(client, address, "BenchHA", 0.3, 8)
            start = time.perf_counter()
            stored, latencies = await _produce(client, address, "BenchHA", seconds, SENDERS)
            elapsed = time.perf_counter() - start
            figures["msgs_per_s"] = stored / elapsed
            figures["mb_per_s"] = stored * 1024 / elapsed / 1e6
            figures["p50_us"] = _percentile(latencies, 0.5) * 1e6
            figures["p99_us"] = _percentile(latencies, 0.99) * 1e6
            if with_slave:
                master_info = await _runtime_info(client, address)
                target = int(master_info["commitLogMaxOffset"])
                with trio.fail_after(120):
                    while True:
                        info = await _runtime_info(client, slave_address)
                        if int(info["commitLogMaxOffset"]) >= target:
                            break
                        await trio.sleep(0.01)
                caught_up = time.perf_counter() - start
                figures["replication_mb_per_s"] = target / caught_up / 1e6
    finally:
        for proc in reversed(procs):
            await _stop(proc)
        shutil.rmtree(base, ignore_errors=True)
    return figures


async def _main(seconds: float) -> None:
    print(
        f"# HA produce rates, {platform.machine()}, {os.cpu_count()} cpus, "
        f"Python {platform.python_version()}; 1 KiB messages, {SENDERS} senders, {seconds} s each"
    )
    setups = [
        ("ASYNC_MASTER", False, "no slave"),
        ("ASYNC_MASTER", True, "one slave"),
        ("SYNC_MASTER", True, "one slave"),
    ]
    baseline = 0.0
    print("| role | slave | msgs/s | MB/s | p50 / p99 | vs no slave | replication MB/s |")
    print("|---|---|---|---|---|---|---|")
    for role, with_slave, label in setups:
        f = await _run_setup(role, with_slave, seconds)
        if not with_slave:
            baseline = f["msgs_per_s"]
        ratio = f["msgs_per_s"] / baseline if baseline else 0.0
        replication = f"{f['replication_mb_per_s']:.1f}" if with_slave else "-"
        print(
            f"| {role} | {label} | {f['msgs_per_s']:,.0f} | {f['mb_per_s']:.1f} | "
            f"{f['p50_us']:,.0f} / {f['p99_us']:,.0f} us | {ratio:.0%} | {replication} |"
        )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--quick", action="store_true", help="1 s per setup")
    args = parser.parse_args(argv)
    trio.run(_main, 1.0 if args.quick else args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
