"""bench/compare.py runs the rows that its ratios compare side by side: BoltMQ's rows of one
flush mode (each codec path) and RocketMQ's broker of that mode are up together and take
their runs in turn, the order turned each run, so their cells come from the same minutes. A
server of the group that does not start costs its own row only. Not timed: short runs only
have to come out in the order said."""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import time

import pytest

from bench import compare
from bench.peers.base import Server
from bench.peers.boltmq import BoltMQServer
from tests.compiled import needs_compiled

pytestmark = pytest.mark.timeout(600)


class _Named(Server):
    """A server that is never started: only its row, system and flush mode matter."""

    def __init__(self, system: str, row: str, flush: str = "") -> None:
        self.system, self.row, self.flush = system, row, flush
        super().__init__()

    def start(self) -> None:
        self.group.spawn([sys.executable, "-c", "import sys; print('no such server'); sys.exit(3)"])
        self.group.wait_until(lambda: False, "port open", 30)

    def endpoint(self) -> dict[str, str]:
        return {}

    def version(self) -> str:
        return "0"


def _cleanup(servers: list[Server]) -> None:
    for server in servers:
        shutil.rmtree(server.scratch, ignore_errors=True)


def test_the_compared_rows_of_a_flush_mode_are_grouped() -> None:
    planned: list[Server] = [
        _Named("boltmq", "BoltMQ ASYNC_FLUSH (compiled)", "ASYNC_FLUSH"),
        _Named("boltmq", "BoltMQ ASYNC_FLUSH (pure)", "ASYNC_FLUSH"),
        _Named("boltmq", "BoltMQ SYNC_FLUSH (compiled)", "SYNC_FLUSH"),
        _Named("rocketmq", "RocketMQ ASYNC_FLUSH", "ASYNC_FLUSH"),
        _Named("rocketmq", "RocketMQ SYNC_FLUSH", "SYNC_FLUSH"),
        _Named("nats", "NATS JetStream"),
        _Named("redis", "Redis Streams everysec"),
    ]
    try:
        rows = [[server.row for server in group] for group in compare.groups(planned, True)]
        assert rows == [
            ["BoltMQ ASYNC_FLUSH (compiled)", "BoltMQ ASYNC_FLUSH (pure)", "RocketMQ ASYNC_FLUSH"],
            ["BoltMQ SYNC_FLUSH (compiled)", "RocketMQ SYNC_FLUSH"],
            ["NATS JetStream"],
            ["Redis Streams everysec"],
        ]
        alone = compare.groups(planned, False)
        assert [group for group in alone if len(group) != 1] == []
        assert [group[0] for group in alone] == planned
    finally:
        _cleanup(planned)


def test_a_server_of_the_group_that_does_not_start_costs_its_row_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    broken = _Named("broken", "Broken ASYNC_FLUSH", "ASYNC_FLUSH")
    boltmq = BoltMQServer("ASYNC_FLUSH")
    args = argparse.Namespace(
        workloads=["a"], seconds=0.5, backlog=100, runs=2, tries=1, jvm_warmup=0.0
    )
    try:
        failed, measured = compare.run_group([broken, boltmq], args)
        assert "exited with status 3" in failed.error and failed.cells == {}
        assert measured.error == "" and measured.cells["a"].runs == 2
        assert measured.cells["a"].rate > 0
        assert "no such server" in (broken.scratch / "server.log").read_text()
        assert boltmq.group.pids() == []  # stopped
    finally:
        _cleanup([broken, boltmq])
    progress = capsys.readouterr().err
    # The failure says why (the log's last lines) and where the kept log is.
    assert "no such server" in progress and str(broken.scratch) in progress


@needs_compiled
def test_the_paths_of_a_flush_mode_take_their_runs_in_turn(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = compare.main(
        [
            "--systems", "boltmq", "--workloads", "a", "--paths", "compiled,pure",
            "--seconds", "0.5", "--runs", "3", "--tries", "1", "--backlog", "100",
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert status == 0, captured.out
    progress = captured.err.splitlines()
    runs = [
        (match[1], match[2], int(match[3]))
        for line in progress
        if (match := re.search(r"BoltMQ (\w+) \((\w+)\) \(a\) .* run (\d)/3", line))
    ]
    # Each flush mode's two rows are both up before the first run, and stopped after the last.
    for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        started = [i for i, line in enumerate(progress) if f"BoltMQ {flush} (" in line
                   and ": up in " in line]  # fmt: skip
        stopped = [i for i, line in enumerate(progress) if f"BoltMQ {flush} (" in line
                   and line.endswith(": stopped")]  # fmt: skip
        first = min(i for i, line in enumerate(progress) if f"BoltMQ {flush} (" in line
                    and " run 1/3" in line)  # fmt: skip
        last = max(i for i, line in enumerate(progress) if f"BoltMQ {flush} (" in line
                   and " run 3/3" in line)  # fmt: skip
        assert len(started) == 2 and max(started) < first
        assert len(stopped) == 2 and min(stopped) > last
    # Run k of each row, in turn; the order turned by one each run.
    assert runs == [
        (flush, path, run)
        for flush in ("ASYNC_FLUSH", "SYNC_FLUSH")
        for run, order in (
            (1, ("compiled", "pure")),
            (2, ("pure", "compiled")),
            (3, ("compiled", "pure")),
        )
        for path in order
    ]
    # The table keeps its order: each flush mode's compiled row, then its pure one.
    table = [line.split(" | ")[0] for line in captured.out.splitlines() if "| BoltMQ" in line]
    assert table == [
        "| BoltMQ ASYNC_FLUSH (compiled)", "| BoltMQ ASYNC_FLUSH (pure)",
        "| BoltMQ SYNC_FLUSH (compiled)", "| BoltMQ SYNC_FLUSH (pure)",
    ]  # fmt: skip


def test_no_interleave_runs_each_row_on_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    status = compare.main(
        [
            "--systems", "boltmq", "--workloads", "a", "--paths", "pure", "--no-interleave",
            "--seconds", "0.5", "--runs", "2", "--tries", "1", "--backlog", "100",
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert status == 0, captured.out
    events = [
        line for line in captured.err.splitlines() if line.endswith(": stopped")
        or ": up in " in line
    ]  # fmt: skip
    # Each row is stopped before the next one starts.
    assert [("up in" in line, "ASYNC" in line) for line in events] == [
        (True, True), (False, True), (True, False), (False, False),
    ]  # fmt: skip


def test_the_help_names_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        compare.main(["--help"])
    assert "--no-interleave" in capsys.readouterr().out


@pytest.mark.parametrize("workload", ["a", "c"])
def test_a_jvm_warm_up_lasts_the_seconds_asked_on_every_workload(
    workload: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """(c) reads its backlog whatever the seconds, so its warm-up reads it again, each time as
    a new consumer group, until --jvm-warmup is spent; (a) runs for the seconds itself. A real
    broker stands in for the JVM one (only the warm-up differs)."""
    server = BoltMQServer("ASYNC_FLUSH")
    server.jvm = True
    args = argparse.Namespace(
        workloads=[workload], seconds=0.5, backlog=200, runs=1, tries=1, jvm_warmup=2.5
    )
    try:
        server.start()
        started = time.monotonic()
        extra = compare.prepare(server, workload, args, rate=1000.0)
        took = time.monotonic() - started
        result = compare.take_run(server, workload, args, extra, 1)
    finally:
        server.stop()
        _cleanup([server])
    assert result.messages > 0
    progress = capsys.readouterr().err
    assert "warming up for 2.5 s" in progress
    assert took >= 2.5
    if workload == "c":
        match = re.search(r"warmed up by (\d+) reads of the backlog in ([\d.]+) s", progress)
        assert match is not None, progress
        assert int(match[1]) >= 1 and float(match[2]) >= 2.5
