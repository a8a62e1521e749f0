"""The Spark jobs against the real cluster: the stats job's figures match the traffic the test
sent, exactly; export then replay brings the same messages back into another topic; the
command line and spark-submit show each job's help and refuse bad arguments in one line.

Each test has topics of its own; the jobs run on the run's Spark session.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from client import Message, Producer
from pipeline.jobs.common import SHUFFLE_PARTITIONS_CONF, shuffle_partitions
from pipeline.jobs.export import export
from pipeline.jobs.replay import default_write_id, replay
from pipeline.jobs.stats import COLUMNS, HOUR_MS, stats, stats_frame

from .helpers import (
    ClusterData,
    create_topic,
    queue_offsets,
    read,
    rows_by_key,
    run,
    send_layout,
    session_conf,
)

# Room for the run's first Spark job and cluster start on a busy machine.
pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

# topic -> tag -> (messages, body size): the traffic the stats test sends.
TRAFFIC: dict[str, dict[str | None, tuple[int, int]]] = {
    "JobsOrders": {"created": (23, 100), "paid": (11, 1500), None: (5, 7)},
    "JobsPayments": {"card": (9, 3000), "wire": (2, 64)},
}


async def send_traffic(namesrv: str) -> None:
    """TRAFFIC, one send per message (so they spread over the queues), tags interleaved."""
    async with Producer("pipeline-jobs-producer", namesrv_addr=namesrv) as producer:
        for topic, tags in TRAFFIC.items():
            remaining = {tag: count for tag, (count, _) in tags.items()}
            i = 0
            while any(remaining.values()):
                for tag, (_, size) in tags.items():
                    if remaining[tag]:
                        remaining[tag] -= 1
                        body = (f"{topic}/{tag}/{i}|".encode() + b"x" * size)[:size]
                        await producer.send(Message(topic, body, tags=tag))
                        i += 1


def hour_of(value: Any) -> int:
    """A timestamp column's value as the ms of its hour's start."""
    millis = round(value.timestamp() * 1000)
    return millis - millis % HOUR_MS


def test_stats_counts_the_traffic_exactly(
    spark: SparkSession, data: ClusterData, tmp_path: Path
) -> None:
    run(create_topic, data.namesrv, "JobsOrders", {"broker-a": 2, "broker-b": 2})
    run(create_topic, data.namesrv, "JobsPayments", {"broker-b": 1})
    run(send_traffic, data.namesrv)
    out = tmp_path / "stats"
    rows = stats(spark, namesrv_addr=data.namesrv, topics=list(TRAFFIC), output=str(out),
                 start="2020-01-01T00:00")  # fmt: skip
    written = spark.read.parquet(str(out))
    assert sorted(written.columns) == sorted(COLUMNS)
    figures = [r.asDict() for r in written.collect()]
    assert len(figures) == rows
    # Per (topic, tag), over the hours the sends fell in: exactly what was sent.
    totals: Counter[tuple[str, str | None]] = Counter()
    sizes: Counter[tuple[str, str | None]] = Counter()
    for f in figures:
        totals[(f["topic"], f["tag"])] += f["messages"]
        sizes[(f["topic"], f["tag"])] += f["bytes"]
    expected = {(t, tag): n for t, tags in TRAFFIC.items() for tag, (n, _) in tags.items()}
    assert dict(totals) == expected
    assert dict(sizes) == {(t, tag): n * size for t, tags in TRAFFIC.items()
                           for tag, (n, size) in tags.items()}  # fmt: skip
    # Per hour and latency, against the messages themselves.
    messages = rows_by_key(read(spark, data.namesrv, topics=",".join(TRAFFIC)))
    latencies: dict[tuple[str, str | None, int], list[int]] = {}
    for m in messages.values():
        latency = round((m["storeTimestamp"] - m["bornTimestamp"]).total_seconds() * 1000)
        latencies.setdefault((m["topic"], m["tags"], hour_of(m["storeTimestamp"])), []).append(
            latency)  # fmt: skip
    assert {(f["topic"], f["tag"], hour_of(f["hour"])): f["messages"] for f in figures} == {
        key: len(values) for key, values in latencies.items()}  # fmt: skip
    for f in figures:
        values = sorted(latencies[(f["topic"], f["tag"], hour_of(f["hour"]))])
        assert f["latencyMaxMs"] == values[-1]
        assert f["latencyAvgMs"] == pytest.approx(sum(values) / len(values))
        assert values[0] <= f["latencyP50Ms"] <= f["latencyP99Ms"] <= values[-1]
    # Partitioned by topic.
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == sorted(
        f"topic={t}" for t in TRAFFIC)  # fmt: skip
    # A range after every message: no rows, and no failure.
    empty = stats(spark, namesrv_addr=data.namesrv, topics=list(TRAFFIC),
                  output=str(tmp_path / "none"), start="2999-01-01T00:00")  # fmt: skip
    assert empty == 0


def stage_tasks(spark: SparkSession, group: str) -> list[int]:
    """The number of tasks of every stage of the jobs run under job group ``group``."""
    tracker = spark.sparkContext.statusTracker()
    tasks = []
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        assert job is not None, f"job {job_id} of {group} is no longer tracked"
        for stage_id in job.stageIds:
            stage = tracker.getStageInfo(stage_id)
            assert stage is not None, f"stage {stage_id} of {group} is no longer tracked"
            tasks.append(stage.numTasks)
    return tasks


def test_stats_shuffles_into_as_many_partitions_as_the_read_has(
    spark: SparkSession, data: ClusterData, tmp_path: Path
) -> None:
    topic = "JobsSized"
    run(create_topic, data.namesrv, topic, {"broker-a": 2, "broker-b": 1})
    run(send_layout, data.namesrv, topic, {("broker-a", 0): 4, ("broker-a", 1): 3,
                                           ("broker-b", 0): 3})  # fmt: skip
    context = spark.sparkContext
    # Spark's default, which the run's session lowers to 2.
    with session_conf(spark, SHUFFLE_PARTITIONS_CONF, "200"):
        context.setJobGroup("stats-sized", "the stats job over three queues")
        try:
            rows = stats(spark, namesrv_addr=data.namesrv, topics=[topic],
                         output=str(tmp_path / "stats"))  # fmt: skip
        finally:
            context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        # One partition per queue read, and no stage of the job had more tasks.
        tasks = stage_tasks(spark, "stats-sized")
        assert tasks and max(tasks) == 3, tasks
        assert rows == spark.read.parquet(str(tmp_path / "stats")).count() > 0
        # The same sizing, as the job computes it, on the figures themselves.
        messages = read(spark, data.namesrv, topic=topic)
        assert messages.rdd.getNumPartitions() == 3
        sized = stats_frame(messages, shuffle_partitions(spark, 3))
        assert sized.rdd.getNumPartitions() == 3
        # Never more than the session allows.
        assert shuffle_partitions(spark, 500) == 200


def test_export_then_replay_exactly_once_brings_the_same_messages_back(
    spark: SparkSession, data: ClusterData, tmp_path: Path
) -> None:
    source, target = "JobsExport", "JobsReplayed"
    run(create_topic, data.namesrv, source, {"broker-a": 2, "broker-b": 1})
    run(create_topic, data.namesrv, target, {"broker-a": 1, "broker-b": 1})
    run(send_exported, data.namesrv, source)
    out = tmp_path / "export"
    assert export(spark, namesrv_addr=data.namesrv, topics=[source], output=str(out)) == 30
    exported = spark.read.parquet(str(out))
    assert exported.count() == 30
    assert "queueOffset" in exported.columns and "properties" in exported.columns
    # Only TagA, by the broker's filter.
    only_a = tmp_path / "only-a"
    assert export(spark, namesrv_addr=data.namesrv, topics=[source], output=str(only_a),
                  sub_expression="TagA") == 10  # fmt: skip
    # Exactly once (the default), twice with the same write id: the second run stores
    # nothing new.
    for _ in range(2):
        sent = replay(spark, namesrv_addr=data.namesrv, input_path=str(out), topic=target)
        assert sent == 30

    def messages(topic: str) -> Counter[tuple[Any, ...]]:
        return Counter(
            (bytes(r["body"]), r["tags"], r["keys"], tuple(sorted(r["properties"].items())))
            for r in read(spark, data.namesrv, topic=topic).collect()
        )

    assert messages(target) == messages(source)
    assert sum(n for (_, n) in run(queue_offsets, data.namesrv, target).values()) == 30
    # Without exactlyOnce every run stores its rows: the 10 TagA rows once more.
    replay(spark, namesrv_addr=data.namesrv, input_path=str(only_a), topic=target,
           exactly_once=False)  # fmt: skip
    assert sum(n for (_, n) in run(queue_offsets, data.namesrv, target).values()) == 40
    assert default_write_id(str(out), target) == default_write_id(str(out), target)
    assert default_write_id(str(out), target) != default_write_id(str(out), source)


async def send_exported(namesrv: str, topic: str) -> None:
    """30 messages with tags, keys and properties."""
    async with Producer("pipeline-jobs-producer", namesrv_addr=namesrv) as producer:
        for i in range(30):
            await producer.send(Message(topic, f"export-{i}".encode(),
                                        tags=("TagA", "TagB", None)[i % 3],
                                        keys=f"k{i} k{i % 4}" if i % 2 else None,
                                        properties={"i": str(i)} if i % 5 else {}))  # fmt: skip


def command(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a command with this interpreter's bin first on PATH; output as text."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    return subprocess.run(list(args), cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def test_the_command_line_and_spark_submit_show_help_and_refuse_bad_arguments() -> None:
    for job in ("stats", "export", "replay"):
        done = command(sys.executable, "-m", "boltmq.cli", "pipeline", job, "--help")
        assert done.returncode == 0, done.stderr
        assert f"usage: boltmq pipeline {job}" in done.stdout
        assert f"boltmq pipeline {job} -n 127.0.0.1:9876" in done.stdout  # the example
    done = command(sys.executable, "-m", "boltmq.cli", "pipeline", "--help")
    assert done.returncode == 0 and "stats" in done.stdout and "replay" in done.stdout
    done = command(sys.executable, "-m", "boltmq.cli", "pipeline", "stats", "-n", "h:1",
                   "-t", "T", "-o", "out", "--from", "yesterday")  # fmt: skip
    assert done.returncode == 2
    assert "error: --from 'yesterday' is neither an ISO-8601 time" in done.stderr
    done = command(sys.executable, "-m", "boltmq.cli", "pipeline", "compact")
    assert done.returncode == 2 and "invalid choice: 'compact'" in done.stderr
    done = command(str(BIN / "spark-submit"), "pipeline/jobs/stats.py", "--help")
    assert done.returncode == 0, done.stderr
    assert "spark-submit pipeline/jobs/stats.py -n 127.0.0.1:9876" in done.stdout
