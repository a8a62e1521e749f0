"""Produce rates of an ASYNC_MASTER and a SYNC_MASTER with one slave, against no slave.

Master and slave are ``boltmq broker`` processes of their own on loopback; 1 KiB messages are
sent one per request from 64 concurrent senders (`bench.loadgen`: one connection, each sender
with one request in flight, ~5 us of cpu per send, so the load takes little of the two cpus
the brokers share on a small machine).
For each setup it prints msgs/s, MB/s, p50/p99 send latency, the master's cpu time per message
(user + system, from /proc; it is what replication adds on the master, and it moves far less
with the machine's load than the rates do) and, with a slave, the replication rate
(commit-log bytes on the slave per second, until it has caught up) and the slave's cpu time
per message over the same span.

With ``--rounds N`` the three setups run N times in turn (so a change of machine load hits
all of them alike); each round is compared with its own no-slave rate and the last lines give
the median ratio per setup.

    python -m bench.bench_ha [--seconds 3] [--rounds 1] [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from bench.bench_produce_consume import BODY, QUEUES, _percentile, _produce
from bench.loadgen import produce
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
        sys.executable, "-m", "boltmq.cli", "broker",
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


def _cpu_seconds(pid: int) -> float:
    """User + system cpu seconds of a process so far (0 where /proc is missing)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # After the command: state is field 3, utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
            cpu = {proc.pid: _cpu_seconds(proc.pid) for proc in procs}
            start, own_cpu = time.perf_counter(), time.process_time()
            stored, latencies = await produce(address, "BenchHA", seconds, SENDERS, QUEUES, BODY)
            elapsed = time.perf_counter() - start
            figures["client_cpu_us"] = (time.process_time() - own_cpu) / stored * 1e6
            figures["master_cpu_us"] = (_cpu_seconds(master.pid) - cpu[master.pid]) / stored * 1e6
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
                figures["slave_cpu_us"] = (_cpu_seconds(slave.pid) - cpu[slave.pid]) / stored * 1e6
    finally:
        for proc in reversed(procs):
            await _stop(proc)
        shutil.rmtree(base, ignore_errors=True)
    return figures


async def _main(seconds: float, rounds: int) -> None:
    print(
        f"# HA produce rates, {platform.machine()}, {os.cpu_count()} cpus, "
        f"Python {platform.python_version()}; 1 KiB messages, {SENDERS} senders, {seconds} s each"
    )
    setups = [
        ("ASYNC_MASTER", False, "no slave"),
        ("ASYNC_MASTER", True, "one slave"),
        ("SYNC_MASTER", True, "one slave"),
    ]
    ratios: dict[str, list[float]] = {}
    print(
        "| run | role | slave | msgs/s | MB/s | p50 / p99 | vs no slave | master cpu/msg "
        "| replication MB/s | slave cpu/msg | client cpu/msg |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for run in range(1, rounds + 1):
        baseline = 0.0
        for role, with_slave, label in setups:
            f = await _run_setup(role, with_slave, seconds)
            if not with_slave:
                baseline = f["msgs_per_s"]
            ratio = f["msgs_per_s"] / baseline if baseline else 0.0
            ratios.setdefault(f"{role}, {label}", []).append(ratio)
            replication = f"{f['replication_mb_per_s']:.1f}" if with_slave else "-"
            slave_cpu = f"{f['slave_cpu_us']:.0f} us" if with_slave else "-"
            print(
                f"| {run} | {role} | {label} | {f['msgs_per_s']:,.0f} | {f['mb_per_s']:.1f} | "
                f"{f['p50_us']:,.0f} / {f['p99_us']:,.0f} us | {ratio:.0%} | "
                f"{f['master_cpu_us']:.0f} us | {replication} | {slave_cpu} | "
                f"{f['client_cpu_us']:.0f} us |"
            )
    if rounds > 1:
        for setup, values in list(ratios.items())[1:]:
            listed = ", ".join(f"{v:.0%}" for v in values)
            print(f"# {setup}: median {statistics.median(values):.0%} of no slave ({listed})")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=1, help="times to run the three setups")
    parser.add_argument("--quick", action="store_true", help="1 s per setup")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    trio.run(_main, 1.0 if args.quick else args.seconds, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
