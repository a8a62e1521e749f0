"""clusterList -m (messages put and got yesterday and today) and -i (a round every N seconds).

-i runs until interrupted, so it runs as a process that the test stops with SIGINT, as a person
would with Ctrl-C.
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest

from tests.boltmq.cli.admin.helpers import admin_json, make_topic, run_admin, send_per_queue

ROOT = Path(__file__).resolve().parents[4]
MORE_KEYS = [
    "cluster", "brokerName", "brokerId", "address", "inTotalYest", "outTotalYest",
    "inTotalToday", "outTotalToday",
]  # fmt: skip


def test_more_stats_count_todays_puts_and_gets(
    cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = unique("MoreStatsT")
    broker_name = make_topic(cluster.namesrv, topic, 1)
    before = admin_json(capsys, cluster.namesrv, "clusterList", "-m")
    assert len(before) == 1 and list(before[0]) == MORE_KEYS
    send_per_queue(cluster.namesrv, topic, broker_name, [4])
    got = admin_json(capsys, cluster.namesrv, "consumeMessage", "-t", topic)
    assert len(got) == 4
    after = admin_json(capsys, cluster.namesrv, "clusterList", "-m")
    # The broker started today: nothing counted for yesterday.
    assert after == [{
        "cluster": "DefaultCluster", "brokerName": broker_name, "brokerId": 0,
        "address": cluster.broker, "inTotalYest": 0, "outTotalYest": 0,
        "inTotalToday": before[0]["inTotalToday"] + 4,
        "outTotalToday": before[0]["outTotalToday"] + 4,
    }]  # fmt: skip

    code, out, _ = run_admin(capsys, cluster.namesrv, "clusterList", "-m")
    assert code == 0
    for title in ("Cluster Name", "Broker Name", "BID", "Addr", "InTotalYest", "OutTotalYest",
                  "InTotalToday", "OutTotalToday"):  # fmt: skip
        assert title in out
    assert "InTPS" not in out


class Lines:
    """A process's output lines, read by a thread so the test can wait with a deadline."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.put(line)

    def until(self, wanted: str, timeout: float = 60.0) -> list[str]:
        """Lines up to and including the first that contains ``wanted``."""
        deadline = time.monotonic() + timeout
        seen: list[str] = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no line with {wanted!r} in {timeout} s: {seen}")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            seen.append(line)
            if wanted in line:
                return seen

    def rest(self) -> list[str]:
        """Every line after those taken, once the stream ended."""
        self.reader.join(timeout=60)
        assert not self.reader.is_alive(), "the output did not end"
        rest = []
        while not self.lines.empty():
            rest.append(self.lines.get_nowait())
        return rest


def _start(namesrv: str, *argv: str) -> tuple[subprocess.Popen[str], Lines]:
    process = subprocess.Popen(
        [sys.executable, "-m", "boltmq.cli", "admin", "clusterList", "-n", namesrv, *argv],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    return process, Lines(process.stdout)


def _interrupt(process: subprocess.Popen[str], lines: Lines) -> tuple[int, list[str], str]:
    """Ctrl-C: (exit code, the lines not taken yet, stderr)."""
    process.send_signal(signal.SIGINT)
    code = process.wait(timeout=60)
    assert process.stderr is not None
    return code, lines.rest(), process.stderr.read()


def test_interval_prints_a_json_line_per_round_until_interrupted(cluster: Any) -> None:
    process, lines = _start(cluster.namesrv, "-i", "1", "--json")
    try:
        first = lines.until('"round":1')
        second = lines.until('"round":2')
        code, rest, err = _interrupt(process, lines)
    finally:
        process.kill()
    assert (code, err) == (0, "")
    documents = [json.loads(line) for line in [*first, *second, *rest]]
    assert [d["round"] for d in documents] == list(range(1, len(documents) + 1))
    assert len(documents) >= 2
    assert documents[1]["timestamp"] >= documents[0]["timestamp"] + 1000
    for document in documents:
        assert list(document) == ["round", "timestamp", "brokers"]
        [broker] = document["brokers"]
        assert broker["address"] == cluster.broker and broker["version"] == "V4_9_8"


def test_interval_tables_show_their_round(cluster: Any) -> None:
    process, lines = _start(cluster.namesrv, "-i", "1", "-m")
    try:
        first = lines.until("round 1 at ")
        lines.until("round 2 at ")
        code, rest, err = _interrupt(process, lines)
    finally:
        process.kill()
    assert (code, err) == (0, "")
    assert "InTotalToday" in "".join(first) or "InTotalToday" in "".join(rest)
    last = rest[-1].strip()
    assert last.startswith("stopped after ") and last.endswith(" round(s)")
    rounds = int(last.split()[2])
    assert rounds >= 2


def test_interval_must_be_positive(cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_admin(capsys, cluster.namesrv, "clusterList", "-i", "0")
    assert (code, out) == (2, "")
    assert "0 must be above 0" in err
    code, out, _ = run_admin(capsys, None, "clusterList", "--help")
    assert code == 0 and "[-m] [-i 5]" in out
