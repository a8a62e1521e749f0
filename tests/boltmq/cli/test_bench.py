"""`boltmq bench`: the real command line in a subprocess against the session cluster.

A produce run stopped by Ctrl-C still prints its summary, and a consume run from the first
offset reads back exactly the messages the produce run counted; a registry that does not
answer ends the run at once with a clear error and a non-zero exit code. On two broker groups
a produce run spreads over both (counted by the brokers) and says where it sends.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio

from boltmq.cli.bench import LatencyHistogram
from client import Admin
from tests.client.two_groups import routes_to, stored_per_broker
from tests.support.waiting import poll_until_sync

if TYPE_CHECKING:
    from tests.client.helpers import RunningCluster
    from tests.client.two_groups import TwoBrokerGroups

ROOT = Path(__file__).resolve().parents[3]

SUMMARY = re.compile(
    r"^(produce|consume): (\d+) msgs in ([\d.]+) s, (\d+) msgs/s, ([\d.]+) MB/s, "
    r"p50 ([\d.]+) ms, p99 ([\d.]+) ms, errors (\d+)$"
)
PROGRESS = re.compile(r"^produce +[\d.]+s: \d+ msgs/s, .* \(total (\d+)\)$")


class BenchProcess:
    """`boltmq bench ...` running in a subprocess, its stderr read line by line."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "boltmq.cli", "bench", *args],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.err_lines: list[str] = []
        self.progressed = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.err_lines.append(line.rstrip("\n"))
            match = PROGRESS.match(line.rstrip("\n"))
            if match and int(match.group(1)) > 0:
                self.progressed.set()

    def finish(self, timeout: float = 30) -> tuple[int, str, str]:
        """Wait for the exit: (exit code, stdout, stderr)."""
        assert self.process.stdout is not None
        try:
            out = self.process.stdout.read()
            code = self.process.wait(timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
        self._reader.join(5)
        return code, out, "\n".join(self.err_lines)


def run_bench(*args: str, timeout: float = 30) -> tuple[int, str, str]:
    """Run `boltmq bench ...` to its end."""
    return BenchProcess(*args).finish(timeout)


def summary_of(out: str) -> re.Match[str]:
    """The one summary line of stdout, matched."""
    lines = out.splitlines()
    assert len(lines) == 1, out
    match = SUMMARY.match(lines[0])
    assert match is not None, lines[0]
    return match


def test_produce_stopped_by_ctrl_c_then_consume_reads_every_message(
    cluster: RunningCluster, unique: Callable[[str], str]
) -> None:
    topic = unique("BenchTool")
    producer = BenchProcess(
        "produce", "-n", cluster.namesrv, "-t", topic, "-s", "200", "-b", "16", "-w", "4",
        "-d", "0", "--queues", "4", "--tags", "TagA",
    )  # fmt: skip
    # Runs until interrupted: wait for a progress line that counts messages, then Ctrl-C.
    assert producer.progressed.wait(20), "\n".join(producer.err_lines)
    producer.process.send_signal(signal.SIGINT)
    code, out, err = producer.finish()
    assert code == 0, err
    produced = summary_of(out)
    assert produced.group(1) == "produce"
    sent = int(produced.group(2))
    assert sent > 0
    assert int(produced.group(8)) == 0, err
    assert float(produced.group(4)) > 0 and float(produced.group(6)) > 0

    # From the first offset, until nothing arrives for two seconds: every message, once.
    code, out, err = run_bench(
        "consume", "-n", cluster.namesrv, "-t", topic, "-g", unique("bench_cg"),
        "--from-first", "--idle-stop", "2", "-d", "30", "--tags", "TagA",
    )  # fmt: skip
    assert code == 0, err
    consumed = summary_of(out)
    assert consumed.group(1) == "consume"
    assert int(consumed.group(2)) == sent
    assert int(consumed.group(8)) == 0
    # 200-byte bodies: MB/s is bodies only.
    rate, mb_rate = float(consumed.group(4)), float(consumed.group(5))
    assert mb_rate == pytest.approx(rate * 200 / 1e6, rel=0.05, abs=0.01)


def test_message_count_limit_and_json_summary(
    cluster: RunningCluster, unique: Callable[[str], str]
) -> None:
    topic = unique("BenchJson")
    code, out, err = run_bench(
        "produce", "-n", cluster.namesrv, "-t", topic, "-b", "7", "-w", "3",
        "--message-count", "100", "--keys", "k-", "-d", "20", "--json",
    )  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert result["mode"] == "produce"
    assert result["messages"] == 100  # the budget is split exactly, even across batches of 7
    assert result["errors"] == 0
    assert result["p50_ms"] > 0 and result["p99_ms"] >= result["p50_ms"]


def test_unreachable_registry_exits_non_zero_with_a_clear_error() -> None:
    for mode in ("produce", "consume"):
        code, out, err = run_bench(mode, "-n", "127.0.0.1:1", "-t", "Anything", "-d", "5")
        assert code == 1
        assert out == ""
        assert f"boltmq bench {mode}:" in err
        assert "no registry answered: 127.0.0.1:1" in err


def test_latency_histogram_percentiles_are_within_a_bucket() -> None:
    rng = random.Random(7)
    samples = [int(rng.lognormvariate(7, 1.5)) for _ in range(20_000)]
    histogram = LatencyHistogram()
    for value in samples:
        histogram.record(value)
    histogram.record(10**15)  # clamped, not an index error
    samples.append(10**15)
    samples.sort()
    for fraction in (0.5, 0.9, 0.99):
        exact = samples[int(fraction * len(samples)) - 1]
        found = histogram.percentile(fraction)
        assert found is not None
        assert found == pytest.approx(exact, rel=0.07, abs=1)
    assert LatencyHistogram().percentile(0.5) is None


def test_produce_spreads_a_new_topic_over_both_broker_groups(
    two_groups: TwoBrokerGroups, unique: Callable[[str], str]
) -> None:
    # As a new user's first run: a topic no broker has yet, single sends, 16 in flight.
    topic = unique("BenchSpread")
    code, out, err = run_bench(
        "produce", "-n", two_groups.namesrv, "-t", topic, "-s", "100", "--message-count", "2000",
        "-d", "120", timeout=150,
    )  # fmt: skip
    assert code == 0, err
    assert int(summary_of(out).group(2)) == 2000
    assert f"producing to 8 queue(s) of {topic} on 2 brokers (broker-a: 4, broker-b: 4)" in err
    assert "latency fault avoidance" not in err
    stored = poll_until_sync(
        lambda: trio.run(stored_per_broker, two_groups.namesrv, topic),
        lambda counts: sum(counts.values()) == 2000, 30, "2000 messages stored",
    )  # fmt: skip
    a, b = stored["broker-a"], stored["broker-b"]
    assert abs(a - b) <= 0.1 * max(a, b), stored


def test_produce_says_when_latency_fault_avoidance_is_on(
    two_groups: TwoBrokerGroups, unique: Callable[[str], str]
) -> None:
    topic = unique("BenchFault")
    code, out, err = run_bench(
        "produce", "-n", two_groups.namesrv, "-t", topic, "--message-count", "50",
        "--latency-fault", "-d", "60", timeout=90,
    )  # fmt: skip
    assert code == 0, err
    assert int(summary_of(out).group(2)) == 50
    start = next(line for line in err.splitlines() if "producing to" in line)
    assert start.endswith(
        f"producing to 8 queue(s) of {topic} on 2 brokers (broker-a: 4, broker-b: 4), "
        "latency fault avoidance: on"
    ), start


def test_produce_names_the_masters_a_topic_leaves_out(
    two_groups: TwoBrokerGroups, unique: Callable[[str], str]
) -> None:
    topic = unique("BenchOneBroker")

    async def create_on_broker_a() -> None:
        async with Admin(namesrv_addr=two_groups.namesrv) as admin:
            await admin.create_topic(topic, broker_addr=two_groups.a.broker, queue_nums=3)

    trio.run(create_on_broker_a)
    trio.run(routes_to, two_groups.namesrv, topic, ("broker-a",))
    code, out, err = run_bench(
        "produce", "-n", two_groups.namesrv, "-t", topic, "--message-count", "30", "-d", "60",
        timeout=90,
    )  # fmt: skip
    assert code == 0, err
    assert int(summary_of(out).group(2)) == 30
    assert f"producing to 3 queue(s) of {topic} on 1 broker (broker-a: 3)" in err
    assert f"topic {topic} has no writable queue on broker-b of cluster DefaultCluster" in err
    assert "--queues N creates the topic" in err
