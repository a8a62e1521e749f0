"""Broker CPU per message: microseconds of the broker process's CPU for each message it handles.

The broker runs in its own process; its user+system CPU is read from /proc/PID/stat around
each timed window, so the figure is the broker's alone (the load generator in this process
shares the machine's cpus, and a noisy machine changes rates far more than CPU per message).
Workloads, 1 KiB bodies, each in ASYNC_FLUSH and SYNC_FLUSH:

  single   64 concurrent senders, one message per request, each awaiting its answer
  batch    8 concurrent senders of batches of 32 (one SEND_BATCH_MESSAGE each)
  consume  a backlog read back with pulls of 32 that commit their offsets, 8 queues

    python -m bench broker-cpu [--seconds 3] [--backlog 200000] [--quick]
    python -m bench broker-cpu --against ../base --rounds 3 --flush ASYNC_FLUSH --keys
    python -m bench broker-cpu --profile /tmp/prof   # py-spy samples per workload

``--against DIR`` runs the broker of another checkout in the same run, alternating which goes
first each round, and prints the medians side by side. ``--profile DIR`` attaches py-spy
(``py-spy record --gil --format raw``: samples of the thread holding the GIL) to the broker
during each workload and prints its top functions by own samples; the profiled CPU figures
are inflated by the sampling.
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path

import trio

from bench.bench_produce_consume import READY, ROOT, _consume, _entry_module, _produce
from protocol import RemotingClient

WORKLOADS = ("single", "batch", "consume")
TICK = os.sysconf("SC_CLK_TCK")
_LINE = re.compile(r":\d+\)$")


def _proc_cpu(pid: int) -> tuple[float, float, int]:
    """(user, system) CPU seconds and minor page faults of process ``pid`` (all its threads)
    from /proc."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        # The command name may hold spaces: the fields after it start past the last ')'.
        fields = stat.read().rsplit(b")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK, int(fields[7])


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Profiler:
    """py-spy attached to the broker for one workload (a no-op without ``--profile``)."""

    def __init__(self, directory: Path | None, pid: int, label: str) -> None:
        self.path = directory / f"{label}.txt" if directory else None
        self.pid = pid
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> _Profiler:
        if self.path is not None:
            spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            self.proc = subprocess.Popen(
                [spy, "record", "--pid", str(self.pid), "--format", "raw", "--rate", "250",
                 "--output", str(self.path), "--nonblocking", "--gil"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            time.sleep(0.5)  # py-spy needs a moment to attach before the window opens
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.send_signal(2)  # SIGINT: py-spy writes its samples and exits
            self.proc.wait(30)


def top_functions(path: Path, count: int = 25) -> list[tuple[str, float, float]]:
    """(function, own share, inclusive share) of py-spy raw (collapsed) samples, by own share."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        samples = int(n)
        # Per function, not per line: the line numbers split one function's cost.
        frames = [_LINE.sub(")", frame) for frame in stack.split(";")]
        total += samples
        own[frames[-1]] += samples
        for frame in set(frames):
            inclusive[frame] += samples
    return [(f, n / total, inclusive[f] / total) for f, n in own.most_common(count)]


async def _start_broker(root: Path, flush: str, store: Path) -> tuple[trio.Process, str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    command = [
        sys.executable, "-m", _entry_module(root), "broker",
        "--listenPort", "0", "--bindAddress", "127.0.0.1", "--fastPortEnable", "false",
        "--storePathRootDir", str(store), "--flushDiskType", flush,
        "--mapedFileSizeCommitLog", str(256 * 1024 * 1024),
    ]  # fmt: skip
    proc = await trio.lowlevel.open_process(
        command, cwd=root, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL
    )
    assert proc.stderr is not None
    buffer = b""
    with trio.fail_after(60):
        while True:
            chunk = await proc.stderr.receive_some(4096)
            if not chunk:
                raise RuntimeError("the broker process ended before it was ready")
            buffer += chunk
            if match := READY.search(buffer.decode(errors="replace")):
                return proc, match.group(1)


async def _drain(proc: trio.Process) -> None:
    """Read the broker's log lines away, so a full pipe never stalls it."""
    assert proc.stderr is not None
    while await proc.stderr.receive_some(65536):
        pass


async def _run_mode(
    flush: str, seconds: float, backlog: int, root: Path, profile: Path | None, tag: str,
    keys: bool = False,
) -> dict[str, float]:  # fmt: skip
    """Broker CPU us/msg (and msgs/s, client CPU us/msg) of each workload, one broker."""
    store = Path(tempfile.mkdtemp(prefix="boltmq-bench-cpu-"))
    proc, address = await _start_broker(root, flush, store)
    figures: dict[str, float] = {}
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_drain, proc)
            async with RemotingClient() as client:
                await _produce(client, address, "BenchSingle", 0.3, 8)
                await _produce(client, address, "BenchBatch", 0.3, 2, batch=32)

                async def measure(label: str, work: Awaitable[int]) -> None:
                    with _Profiler(profile, proc.pid, f"{tag}-{flush}-{label}"):
                        cpu0, self0, t0 = _proc_cpu(proc.pid), _self_cpu(), time.perf_counter()
                        count = await work
                        took = time.perf_counter() - t0
                        user, system, faults = _proc_cpu(proc.pid)
                        client_cpu = _self_cpu() - self0
                    figures[label] = (user + system - cpu0[0] - cpu0[1]) / count * 1e6
                    figures[f"{label}_faults"] = (faults - cpu0[2]) / count
                    figures[f"{label}_sys"] = (system - cpu0[1]) / count * 1e6
                    figures[f"{label}_rate"] = count / took
                    figures[f"{label}_client"] = client_cpu / count * 1e6

                async def single() -> int:
                    return (await _produce(client, address, "BenchSingle", seconds, 64,
                                           keys=keys))[0]  # fmt: skip

                async def batch() -> int:
                    return (await _produce(client, address, "BenchBatch", seconds, 8, 32,
                                           keys=keys))[0]  # fmt: skip

                async def consume() -> int:
                    return (await _consume(client, address, "BenchBacklog", commit=True))[0]

                await measure("single", single())
                await measure("batch", batch())
                # The backlog is written untimed, in batches, then read back timed.
                stored = 0
                while stored < backlog:
                    stored += (await _produce(client, address, "BenchBacklog", 0.5, 8, 32))[0]
                await measure("consume", consume())
            nursery.cancel_scope.cancel()
    finally:
        proc.terminate()
        with trio.move_on_after(20):
            await proc.wait()
        shutil.rmtree(store, ignore_errors=True)
    return figures


def _line(label: str, f: dict[str, float]) -> str:
    return "  ".join(
        f"{w} {f[w]:5.1f} us/msg (sys {f[w + '_sys']:4.1f}, faults {f[w + '_faults']:4.2f}, "
        f"{f[w + '_rate']:>7,.0f}/s, "
        f"client {f[w + '_client']:4.1f})"
        for w in WORKLOADS
    ).join((f"    {label:<8} ", ""))


async def _main(args: argparse.Namespace) -> None:
    load = os.getloadavg()
    print(
        f"broker CPU per message: {platform.machine()}, {os.cpu_count()} cpus, python "
        f"{platform.python_version()}, 1 KiB bodies"
        f"{' each with a UNIQ_KEY' if args.keys else ''}, {args.seconds:g}s per figure, backlog "
        f"{args.backlog:,}, {args.rounds} rounds, load average {load[0]:.2f} {load[1]:.2f}"
    )
    checkouts = [("this", ROOT)] + ([("against", args.against)] if args.against else [])
    for flush in args.flush or ["ASYNC_FLUSH", "SYNC_FLUSH"]:
        runs: dict[str, list[dict[str, float]]] = {label: [] for label, _ in checkouts}
        for n in range(args.rounds):
            for label, root in checkouts if n % 2 == 0 else checkouts[::-1]:
                f = await _run_mode(
                    flush, args.seconds, args.backlog, root, args.profile, label, args.keys
                )
                runs[label].append(f)
                print(f"  {flush} round {n + 1}", flush=True)
                print(_line(label, f), flush=True)
        print(f"  {flush} medians (broker CPU us/msg):")
        for label, _ in checkouts:
            medians = {
                key: statistics.median(f[key] for f in runs[label]) for key in runs[label][0]
            }
            print(_line(label, medians))
        if args.against:
            ratios = ", ".join(
                f"{w} {statistics.median(f[w] for f in runs['this']) / statistics.median(f[w] for f in runs['against']):.3f}"  # noqa: E501
                for w in WORKLOADS
            )
            print(f"    this/against CPU per message: {ratios}")
    if args.profile:
        for path in sorted(args.profile.glob("*.txt")):
            print(f"  top functions by own samples: {path.name}")
            for function, share, inclusive in top_functions(path):
                print(f"    {share * 100:5.1f}%  {inclusive * 100:5.1f}%  {function}")


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m bench broker-cpu``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench broker-cpu",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per send figure")
    parser.add_argument("--backlog", type=int, default=200_000, help="messages to consume")
    parser.add_argument("--quick", action="store_true", help="a short run (1 s, 20,000)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds per flush mode (1)")
    parser.add_argument(
        "--against", type=Path, metavar="DIR", help="also run the broker of the checkout DIR"
    )
    parser.add_argument(
        "--flush", choices=["ASYNC_FLUSH", "SYNC_FLUSH"], action="append",
        help="flush mode (repeatable; default both)",
    )  # fmt: skip
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="write py-spy samples per workload to DIR"
    )
    parser.add_argument(
        "--keys", action="store_true",
        help="each sent message with a fresh UNIQ_KEY, as producers send (the index's keys)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.backlog = min(args.seconds, 1.0), min(args.backlog, 20_000)
    if args.against is not None:
        args.against = args.against.resolve()
        if not (args.against / "storage").is_dir():
            parser.error(f"--against {args.against}: not a BoltMQ checkout (no storage/ in it)")
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    trio.run(_main, args)


if __name__ == "__main__":
    main()
