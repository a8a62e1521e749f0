"""Side by side: BoltMQ against Apache RocketMQ's broker, NATS JetStream, RabbitMQ and Redis
Streams on this machine in one run, every system driven from one asyncio client process.

Workloads (1 KiB payloads): (a) 64 concurrent publishers, one message per request, each
awaiting its ack; (b) 8 publishers of batches of 32, awaiting all 32 acks (BoltMQ and RocketMQ:
one batch send); (c) consume a backlog of 200,000 with acks / offset commits; (d) publish-to-
receipt latency p50/p99 at half of the system's peak rate from (a).

Rows: BoltMQ ASYNC_FLUSH and SYNC_FLUSH, each on the codec paths of --paths (compiled: the
built protocol._speedups; pure: BOLTMQ_PURE=1 in the cluster's and the runs' clients'
environments), labelled e.g. "BoltMQ ASYNC_FLUSH (pure)"; Apache RocketMQ's broker (an
unpacked 4.9.x binary release given by --rocketmq-home) in both flush modes, driven by
BoltMQ's client; NATS JetStream (file storage, 1 replica); RabbitMQ (durable classic queue,
persistent messages, publisher confirms); Redis Streams (appendonly, appendfsync everysec,
and always).

Missing peers are installed first (Debian packages, the project's `bench` extra). Each server
runs on loopback ports with a scratch directory, in a process group of its own, stopped at the
end. Each run is a child process, so its CPU is its own; the server's process group and the
machine are sampled from /proc over the same window. A run during which other processes used
more than 20% of a core is repeated (up to --tries); a cell that never got a clean run is
marked `~`. Each cell is the median of --runs runs. A JVM server (RocketMQ) first gets
--jvm-warmup seconds of the workload, not measured, so its JIT has compiled the hot paths
((c), which reads a backlog whatever the seconds, reads it again until they are spent).
The rows that the ratios compare, BoltMQ's (on each codec path) and RocketMQ's broker of
one flush mode, are up together and take their runs in turn, the order turned by one each
run: their cells come from the same minutes of a machine whose speed drifts
(--no-interleave: each row on its own, one after another). Before each run the disk is synced,
so a run does not pay for writing back what the run before it left dirty.

example:
  python -m bench compare --rocketmq-home ~/rocketmq-all-4.9.4-bin-release --write-docs
  python -m bench compare --systems boltmq,redis --workloads a,b --quick
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs

from bench.peers import SYSTEMS, client_class, client_for, install, workloads
from bench.peers.base import Server
from bench.peers.boltmq import row_label
from bench.peers.report import (
    Cell,
    Row,
    docs_section,
    incomplete,
    ratio_lines,
    summary_block,
    table_lines,
    write_docs,
)
from bench.peers.workloads import NAMES, WORKLOADS, Result
from protocol import codecs_status
from protocol._codecs import PURE_SWITCH

ROOT = Path(__file__).resolve().parents[1]
#: Other processes may use this many cores during a run before it is taken again.
OTHERS_LIMIT = 0.2


#: BoltMQ's codec paths (`protocol.codecs_status`), in row order.
PATHS = ("compiled", "pure")


def codecs_line(paths: Sequence[str | None]) -> str:
    """What the docs say BoltMQ's rows ran on: each row's own path when the run labelled them
    by path, else this process's (`codecs_status`)."""
    named = [path for path in paths if path is not None]
    if named:
        return f"{' and '.join(named)}, as each BoltMQ row's label says"
    return codecs_status()


def servers(
    systems: list[str], rocketmq_home: Path | None, paths: Sequence[str | None] = (None,)
) -> list[Server]:
    """The rows' servers, in table order (not started); BoltMQ's once per codec path
    (None: the path this environment gets, unlabelled)."""
    from bench.peers.boltmq import BoltMQServer

    rows: list[Server] = []
    for system in systems:
        if system == "boltmq":
            rows += [BoltMQServer(flush, path) for flush in ("ASYNC_FLUSH", "SYNC_FLUSH")
                     for path in paths]  # fmt: skip
        elif system == "rocketmq" and rocketmq_home is not None:
            from bench.peers.rocketmq import RocketMQServer

            rows += [RocketMQServer(rocketmq_home, flush) for flush in
                     ("ASYNC_FLUSH", "SYNC_FLUSH")]  # fmt: skip
        elif system == "nats":
            from bench.peers.nats import NatsServer

            rows.append(NatsServer())
        elif system == "rabbitmq":
            from bench.peers.rabbitmq import RabbitMQServer

            rows.append(RabbitMQServer())
        elif system == "redis":
            from bench.peers.redis import RedisServer

            rows += [RedisServer("everysec"), RedisServer("always")]
    return rows


def ensure(system: str, rocketmq_home: Path | None) -> str | None:
    """Install what ``system`` lacks; None when ready, else why it cannot run."""
    if system == "rocketmq":
        if rocketmq_home is None:
            return "no --rocketmq-home given (an unpacked Apache RocketMQ 4.9.x binary release)"
        from bench.peers.rocketmq import missing_debian_packages, release_jars

        release_jars(rocketmq_home)  # ReleaseError says what is wrong with the directory
        return install.install_debian(missing_debian_packages(rocketmq_home))
    return install.ensure(system)


# -- one run, in a child process ----------------------------------------------------------------


async def _child(spec: dict[str, Any]) -> dict[str, Any]:
    client = client_for(spec["system"], spec["endpoint"])
    await client.open()
    try:
        pgid, workload = spec["pgid"], spec["workload"]
        if workload == "fill":
            return {"topic": await workloads.make_backlog(client, spec["backlog"])}
        if workload == "a":
            result = await workloads.single(client, pgid, spec["seconds"])
        elif workload == "b":
            result = await workloads.batch(client, pgid, spec["seconds"])
        elif workload == "c":
            result = await workloads.consume(client, pgid, spec["backlog"], spec.get("topic", ""))
        else:
            result = await workloads.e2e(client, pgid, spec["seconds"], spec["rate"])
        return attrs.asdict(result)
    finally:
        # In this task (anyio's scopes must exit where they entered), bounded all the same.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(30):
                await client.close()


def run_child(server: Server, workload: str, args: argparse.Namespace, **extra: Any) -> Any:
    """One run of ``workload`` against ``server`` in a child process: its Result (or, for
    ``fill``, the backlog's topic)."""
    spec = {
        "system": server.system, "endpoint": server.endpoint(), "pgid": server.pgid,
        "workload": workload, "seconds": args.seconds, "backlog": args.backlog, **extra,
    }  # fmt: skip
    limit = 120 + args.seconds * 4 + args.backlog / 200
    spec["limit"] = limit - 10
    done = subprocess.run(
        [sys.executable, "-m", "bench.compare", "--child", json.dumps(spec)],
        cwd=ROOT, capture_output=True, text=True, timeout=limit, env=server.environment(),
    )  # fmt: skip
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        errors = done.stderr.strip().splitlines() or ["no output"]
        _progress(f"{server.row} ({workload}): the run failed; its last output:")
        print("\n".join(errors[-40:]), file=sys.stderr)
        why = errors[-1]
        raise RuntimeError(f"the run's process exited with status {done.returncode}: {why}")
    answer = json.loads(lines[-1])
    return answer["topic"] if workload == "fill" else Result(**answer)


def prepare(server: Server, workload: str, args: argparse.Namespace, rate: float) -> dict[str, Any]:
    """What every run of ``workload`` against ``server`` shares (its backlog, (d)'s rate),
    after a JVM server's warm-up."""
    extra: dict[str, Any] = {"rate": rate}
    if workload == "c" and client_class(server.system).rereadable:
        # One backlog serves every run: each reads it as a new consumer group.
        _progress(f"{server.row} (c): filling a backlog of {args.backlog:,}")
        extra["topic"] = run_child(server, "fill", args)
    if server.jvm and args.jvm_warmup > 0:
        warm_up(server, workload, args, extra)
    return extra


def warm_up(server: Server, workload: str, args: argparse.Namespace, extra: dict[str, Any]) -> None:
    """``--jvm-warmup`` seconds of ``workload`` against ``server``, thrown away.

    The JIT compiles a JVM's hot paths under load: measured cold, it would be judged on its
    interpreter. (a), (b) and (d) run for the seconds asked; (c) reads its backlog whatever
    the seconds (a pass takes about a second), so it reads it again, as a new consumer group
    each time, until the seconds are spent."""
    _progress(f"{server.row} ({workload}): warming up for {args.jvm_warmup:g} s")
    warmup = argparse.Namespace(**{**vars(args), "seconds": args.jvm_warmup})
    start = time.monotonic()
    passes = 0
    while True:
        try:
            run_child(server, workload, warmup, **extra)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            _progress(f"{server.row} ({workload}): the warm-up failed ({exc}); measuring anyway")
            return
        passes += 1
        spent = time.monotonic() - start
        if workload != "c" or spent >= args.jvm_warmup:
            break
    if workload == "c":
        _progress(f"{server.row} (c): warmed up by {passes} reads of the backlog in {spent:.1f} s")


def take_run(
    server: Server, workload: str, args: argparse.Namespace, extra: dict[str, Any], run: int
) -> Result:
    """One run, taken again (up to ``--tries`` times) while other processes were busy: the
    attempt with the least of them."""
    best: Result | None = None
    for attempt in range(1, args.tries + 1):
        # What the servers wrote before (a run of a row beside this one, whose pages the kernel
        # or that server's own flush services write back later) is on disk before this run
        # starts, so no run pays for the one before it.
        os.sync()
        try:
            result = run_child(server, workload, args, **extra)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            if attempt == args.tries:
                raise
            _progress(f"{server.row} ({workload}) run {run}: failed ({exc}); taken again")
            continue
        note = ""
        if result.others_cpu > OTHERS_LIMIT:
            note = f" (others used {result.others_cpu:.0%} of a core: taken again)"
            if attempt == args.tries:
                note = f" (others used {result.others_cpu:.0%} of a core: kept, marked ~)"
        _progress(f"{server.row} ({workload}) {NAMES[workload]} run {run}/{args.runs}: "
                  f"{result.rate:,.0f} msgs/s{note}")  # fmt: skip
        if best is None or result.others_cpu < best.others_cpu:
            best = result
        if result.others_cpu <= OTHERS_LIMIT:
            break
    assert best is not None
    return best


def groups(planned: list[Server], interleave: bool) -> list[list[Server]]:
    """The servers that run side by side, in table order: with ``interleave``, the rows of
    one flush mode that the ratios compare (BoltMQ's on each codec path and RocketMQ's
    broker), so their runs alternate; every other row on its own."""
    if not interleave:
        return [[server] for server in planned]
    out: list[list[Server]] = []
    by_flush: dict[str, list[Server]] = {}
    for server in planned:
        if not server.flush:
            out.append([server])
        elif server.flush in by_flush:
            by_flush[server.flush].append(server)
        else:
            by_flush[server.flush] = [server]
            out.append(by_flush[server.flush])
    return out


def run_group(servers: list[Server], args: argparse.Namespace) -> list[Row]:
    """Start ``servers``, measure every workload on each, stop them; their rows (each with
    any error said). Run ``k`` of a workload is taken on each server in turn, the order
    turned by one each run, so the cells of rows that are compared come from the same
    minutes of a machine whose speed drifts."""
    rows = [Row(server.row, server.system, server.settings) for server in servers]
    up: list[tuple[Server, Row]] = []
    try:
        for server, row in zip(servers, rows, strict=True):
            _progress(f"{server.row}: starting ({server.settings})")
            try:
                started = time.monotonic()
                server.start()
                row.version = server.version()
            except Exception as exc:
                row.error = f"{type(exc).__name__}: {exc}".splitlines()[0]
                _progress(f"{server.row}: failed: {type(exc).__name__}: {exc}")
                continue
            _progress(f"{server.row} {row.version}: up in {time.monotonic() - started:.1f} s")
            up.append((server, row))
        # In a, b, c, d order: (d) runs at half of (a)'s peak, so (a) runs for it anyway.
        wanted = set(args.workloads) | ({"a"} if "d" in args.workloads else set())
        for workload in [w for w in WORKLOADS if w in wanted and up]:
            _measure_side_by_side(up, workload, args)
        if "a" not in args.workloads:
            for row in rows:
                row.cells.pop("a", None)
    finally:
        for server, row in zip(servers, rows, strict=True):
            _stop(server, row)
    return rows


def _measure_side_by_side(
    up: list[tuple[Server, Row]], workload: str, args: argparse.Namespace
) -> None:
    """``--runs`` runs of ``workload`` on each started server, alternating; each row's cell
    (or why it has none). One workload's failure costs that row's cell only."""
    shared: dict[int, dict[str, Any]] = {}
    results: dict[int, list[Result]] = {}
    clean: dict[int, bool] = {}

    def fail(server: Server, row: Row, exc: Exception) -> None:
        if isinstance(exc, RuntimeError | subprocess.TimeoutExpired):
            row.failures[workload] = str(exc).splitlines()[0][:200]
            _progress(f"{server.row} ({workload}): failed: {row.failures[workload]}")
        else:  # not the run's failure: the row stops here, the others go on
            row.error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            row.failures.setdefault(workload, row.error)
            _progress(f"{server.row}: failed: {row.error}")

    for at, (server, row) in enumerate(up):
        if row.error:
            continue
        if workload == "d" and "a" not in row.cells:
            row.failures["d"] = "no peak rate: (a) failed"
            continue
        rate = row.cells["a"].rate / 2 if workload == "d" else 0.0
        try:
            shared[at] = prepare(server, workload, args, rate)
        except Exception as exc:
            fail(server, row, exc)
            continue
        results[at], clean[at] = [], True
    for run in range(1, args.runs + 1):
        turn = [at for at in results if workload not in up[at][1].failures]
        shift = (run - 1) % len(turn) if turn else 0
        for at in turn[shift:] + turn[:shift]:
            server, row = up[at]
            try:
                best = take_run(server, workload, args, shared[at], run)
            except Exception as exc:
                fail(server, row, exc)
                continue
            clean[at] = clean[at] and best.others_cpu <= OTHERS_LIMIT
            results[at].append(best)
    for at, taken in results.items():
        row = up[at][1]
        if taken and workload not in row.failures:
            row.cells[workload] = Cell.of(taken, clean[at])


def _stop(server: Server, row: Row) -> None:
    """Stop ``server``; a server that did not start keeps its scratch directory (its log
    says why)."""
    keep = row.error != "" and row.version == ""
    killed = server.stop(keep=keep)
    if keep:
        _progress(f"{server.row}: its scratch directory and log are kept in {server.scratch}")
    left = server.group.pids()
    if killed:
        _progress(f"{server.row}: killed after 30 s without exiting: pids {killed}")
    if left:
        row.error = row.error or f"processes left running: {left}"
    _progress(f"{server.row}: stopped")


def compiled_available() -> bool:
    """Whether BoltMQ's compiled codecs load here (asked of a process without BOLTMQ_PURE)."""
    env = {k: v for k, v in os.environ.items() if k != PURE_SWITCH}
    done = subprocess.run(
        [sys.executable, "-c", "from protocol import codecs_status; print(codecs_status())"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    return done.returncode == 0 and done.stdout.strip() == "compiled"


def path_ratio_lines(rows: list[Row], paths: Sequence[str | None]) -> list[str]:
    """`ratio_lines` once per codec path: that path's BoltMQ rows, under their unlabelled
    names, against the peers."""
    if None in paths:
        return ratio_lines(rows)
    lines: list[str] = []
    for path in paths:
        suffix = f" ({path})"
        view = [
            attrs.evolve(row, label=row.label.removesuffix(suffix))
            for row in rows
            if row.system != "boltmq" or row.label.endswith(suffix)
        ]
        ratios = ratio_lines(view)
        lines += [f"{ratios[0].rstrip(':')}, BoltMQ's {path} codec path:", *ratios[1:], ""]
    return lines[:-1] + path_gap_lines(rows)


#: The pure path's least share of the compiled path's rate, per cell.
PURE_SHARE = 0.8


def path_gap_lines(rows: list[Row]) -> list[str]:
    """BoltMQ's pure rows against its compiled rows, cell by cell (rates of (a), (b), (c)):
    each at least `PURE_SHARE` or not."""
    by_label = {row.label: row for row in rows if not row.error}
    lines = ["Codec paths (BoltMQ pure / compiled, msgs/s):"]
    for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        pure = by_label.get(row_label(flush, "pure"))
        compiled = by_label.get(row_label(flush, "compiled"))
        if pure is None or compiled is None:
            continue
        for w in ("a", "b", "c"):
            if w not in pure.cells or w not in compiled.cells or not compiled.cells[w].rate:
                continue
            ratio = pure.cells[w].rate / compiled.cells[w].rate
            mark = "" if pure.cells[w].clean and compiled.cells[w].clean else " ~"
            shown = f"{ratio:.2f}"
            if (ratio >= PURE_SHARE) != (float(shown) >= PURE_SHARE):
                shown = f"{ratio:.3f}"  # two places would round it up to the target
            lines.append(
                f"- BoltMQ {flush}, ({w}): {shown}x (target >= {PURE_SHARE:g}x): "
                f"{'met' if ratio >= PURE_SHARE else 'NOT met'}{mark}"
            )  # fmt: skip
    return ["", *lines] if len(lines) > 1 else []


def _progress(line: str) -> None:
    print(f"compare: {line}", file=sys.stderr, flush=True)


def machine() -> str:
    """CPU model, core count and memory, for the report."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        kib = int(Path("/proc/meminfo").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        kib = 0
    return f"{model}, {os.cpu_count()} cores, {kib / 2**20:.0f} GiB RAM, {platform.platform()}"


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; print (and with --write-docs record) the table."""
    parser = argparse.ArgumentParser(
        prog="python -m bench compare", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help=f"comma-separated subset of {','.join(SYSTEMS)} (default: all)",
    )
    parser.add_argument("--workloads", default="abcd", help="subset of a,b,c,d (default: all)")
    parser.add_argument("--seconds", type=float, default=4.0, help="timed run length (4)")
    parser.add_argument("--backlog", type=int, default=200_000, help="(c)'s backlog (200000)")
    parser.add_argument("--runs", type=int, default=3, help="runs per cell, median kept (3)")
    parser.add_argument(
        "--tries",
        type=int,
        default=2,
        help="times a run is taken while other processes are busy (2)",
    )
    parser.add_argument(
        "--rocketmq-home",
        type=Path,
        metavar="DIR",
        help="an unpacked Apache RocketMQ 4.9.x binary release: adds its rows",
    )
    parser.add_argument(
        "--write-docs",
        action="store_true",
        help="append the run to docs/performance-journal.md (section Side by side) and, for a "
        "complete run, make it the summary in docs/PERFORMANCE.md",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: 1 s runs, a backlog of 5000, 1 run per cell",
    )
    parser.add_argument(
        "--paths",
        help="BoltMQ's codec paths, comma-separated: compiled, pure (default: both when the "
        "compiled codecs are built, else pure)",
    )
    parser.add_argument(
        "--jvm-warmup",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="seconds of unmeasured load a JVM server (RocketMQ) gets before each workload (10)",
    )
    parser.add_argument(
        "--no-interleave",
        dest="interleave",
        action="store_false",
        help="run each row on its own, one after another (default: the rows of one flush mode "
        "that the ratios compare run side by side, their runs alternating)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        spec = json.loads(args.child)
        # A run that hangs says where before its parent gives up on it.
        faulthandler.dump_traceback_later(spec.get("limit", 600), exit=True)
        print(json.dumps(asyncio.run(_child(spec))))
        return 0
    systems = [name.strip() for name in args.systems.split(",") if name.strip()]
    unknown = [name for name in systems if name not in SYSTEMS]
    if unknown:
        parser.error(f"unknown system {unknown[0]!r}; choose from {', '.join(SYSTEMS)}")
    args.workloads = sorted({w for w in args.workloads.replace(",", "") if w.strip()})
    bad = [w for w in args.workloads if w not in WORKLOADS]
    if bad or not args.workloads:
        parser.error(
            f"unknown workload {''.join(bad)!r}; choose from a, b, c, d (e.g. --workloads a,c)"
        )
    if args.quick:
        args.seconds, args.backlog, args.runs, args.tries = 1.0, 5000, 1, 1
    if args.seconds <= 0 or args.backlog < 1 or args.runs < 1 or args.tries < 1:
        parser.error("--seconds, --backlog, --runs and --tries must be positive")
    if args.jvm_warmup < 0:
        parser.error("--jvm-warmup must not be negative")
    paths: list[str | None]
    if args.paths is None:
        paths = list(PATHS) if compiled_available() else ["pure"]
    else:
        paths = [p.strip() for p in args.paths.split(",") if p.strip()]
        if not paths or any(p not in PATHS for p in paths):
            parser.error(f"--paths {args.paths!r}: choose from {', '.join(PATHS)}")
        if "compiled" in paths and not compiled_available():
            parser.error("--paths compiled: the compiled codecs are not built (./dev build-ext)")
    if args.rocketmq_home is not None:
        args.rocketmq_home = args.rocketmq_home.expanduser().resolve()
    # SIGTERM unwinds like Ctrl-C, so the servers started are stopped on the way out.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    began = time.monotonic()
    load_before = os.getloadavg()
    notes: list[str] = []
    ready: list[str] = []
    for system in systems:
        try:
            problem = ensure(system, args.rocketmq_home)
        except ValueError as exc:
            parser.error(str(exc))
        if problem:
            notes.append(f"{system}: left out: {problem}")
            _progress(notes[-1])
        else:
            ready.append(system)
    planned = servers(ready, args.rocketmq_home, paths)
    try:
        row_of: dict[int, Row] = {}
        for group in groups(planned, args.interleave):
            row_of.update(zip(map(id, group), run_group(group, args), strict=True))
        rows = [row_of[id(server)] for server in planned]
    except KeyboardInterrupt:
        _progress("interrupted; every server started has been stopped")
        return 130
    finally:
        for server in planned:
            if server.pgid is None:  # never started (a failure or Ctrl-C before its turn)
                shutil.rmtree(server.scratch, ignore_errors=True)
    load_after = os.getloadavg()
    took = time.monotonic() - began
    lines = [*table_lines(rows, args.workloads), "", *path_ratio_lines(rows, paths)]
    print("\n".join(lines))
    for note in notes:
        print(f"- {note}")
    for row in rows:
        for workload, why in row.failures.items():
            print(f"- {row.label} ({workload}) failed: {why}")
    print(f"(took {took / 60:.1f} min; load average {load_before[0]:.1f} before, "
          f"{load_after[0]:.1f} after)")  # fmt: skip
    if args.write_docs:
        command = "python -m bench compare " + " ".join(
            a if a != str(args.rocketmq_home) else "DIR" for a in (argv if argv is not None
                                                                      else sys.argv[1:])
        )  # fmt: skip
        on, date = machine(), datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        section = docs_section(
            rows, lines, notes, command=command.strip(), machine=on, date=date,
            load=(load_before, load_after), minutes=took / 60, args=vars(args),
            codecs=codecs_line(paths),
        )  # fmt: skip
        # Only a run of every row and workload replaces the page's figures; any run is recorded.
        why_not = incomplete(rows, args.workloads, quick=args.quick)
        summary = None if why_not else summary_block(
            rows, lines, command=command.strip(), machine=on, date=date, args=vars(args),
            codecs=codecs_line(paths),
        )  # fmt: skip
        for done in write_docs(section, summary):
            _progress(done)
        if why_not:
            _progress(f"docs/PERFORMANCE.md keeps its summary: {why_not}")
    return 1 if any(row.error for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
