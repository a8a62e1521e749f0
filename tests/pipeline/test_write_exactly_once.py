"""Exactly-once writes: a streaming micro-batch that fails after sending part of its rows and
is run again from the checkpoint stores each row once with exactlyOnce=true, and twice without
it; a batch write with a writeId run twice stores its rows once; the options are checked."""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType

from client import Message, Producer
from pipeline.errors import OptionError
from pipeline.options import write_options
from protocol.bodies import MessageQueue

from .helpers import ClusterData, create_topic, read, run

# Room for the run's first Spark job and cluster start on a busy machine.
pytestmark = pytest.mark.timeout(300)

PER_QUEUE = 200
FAILING_ROW = b"row-0-150"  # of the first queue's partition: after 128 + 21 rows were sent
TOO_LARGE = 5 << 20  # over the producer's 4 MiB limit: the send of that row fails the task


async def send_rows(namesrv: str, topic: str) -> None:
    async with Producer("pipeline-test-producer", namesrv_addr=namesrv) as producer:
        for queue_id in range(2):
            queue = MessageQueue(topic=topic, broker_name="broker-a", queue_id=queue_id)
            messages = [Message(topic, b"row-%d-%d" % (queue_id, i)) for i in range(PER_QUEUE)]
            for start in range(0, PER_QUEUE, 100):
                await producer.send_batch(messages[start : start + 100], queue=queue)


def run_replayed_stream(
    spark: SparkSession, data: ClusterData, tmp_path: Path, name: str, **options: str
) -> tuple[Counter[bytes], Counter[bytes]]:
    """A micro-batch of 400 rows (two partitions) written to a new topic; the first run fails
    in the send of one row, after earlier rows were sent; the query restarted from its
    checkpoint runs the same micro-batch again. The target's bodies after each run."""
    source, target = f"PipeEO{name}Source", f"PipeEO{name}Target"
    run(create_topic, data.namesrv, source, {"broker-a": 2})
    run(create_topic, data.namesrv, target, {"broker-a": 2, "broker-b": 2})
    run(send_rows, data.namesrv, source)
    marker = tmp_path / "first-run-done"
    marker_path = str(marker)

    @F.udf(returnType=BinaryType())
    def gate(body: bytes) -> bytes:
        # The first run: one row too large to send. The marker says the first run is over.
        if bytes(body) == FAILING_ROW and not os.path.exists(marker_path):
            return b"x" * TOO_LARGE
        return bytes(body)

    def start() -> bool:
        df: DataFrame = (
            spark.readStream.format("boltmq").option("namesrvAddr", data.namesrv)
            .option("topic", source).option("startingOffsets", "earliest").load()
        )  # fmt: skip
        writer = (
            df.select(gate("body").alias("body")).writeStream.format("boltmq")
            .option("namesrvAddr", data.namesrv).option("topic", target)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
        )  # fmt: skip
        for key, value in options.items():
            writer = writer.option(key, value)
        query = writer.start()
        try:
            assert query.awaitTermination(180), "the query did not finish"
        except Exception as exc:
            assert "exceeds 4194304" in str(exc), exc
            # The failed query has ended, but the other partition's task may still be sending
            # on a busy machine: read what the failed run stored once no task runs any more.
            query.stop()
            tracker = spark.sparkContext.statusTracker()
            deadline = time.monotonic() + 120
            while tracker.getActiveStageIds():
                assert time.monotonic() < deadline, "the failed run's tasks did not end"
                time.sleep(0.1)
            return False
        return True

    def bodies() -> Counter[bytes]:
        return Counter(bytes(r["body"]) for r in read(spark, data.namesrv, topic=target).collect())

    assert not start(), "the first run was meant to fail"
    after_failure = bodies()
    marker.touch()
    assert start(), "the run from the checkpoint failed"
    return after_failure, bodies()


def expected_rows() -> Counter[bytes]:
    return Counter(b"row-%d-%d" % (q, i) for q in range(2) for i in range(PER_QUEUE))


def test_exactly_once_stream_stores_a_replayed_micro_batch_once(
    spark: SparkSession, data: ClusterData, tmp_path: Path
) -> None:
    after_failure, after_replay = run_replayed_stream(
        spark, data, tmp_path, "On", exactlyOnce="true"
    )
    # The failed run had sent rows (so the replay had something to send twice) ...
    assert sum(after_failure.values()) >= 149
    assert FAILING_ROW not in after_failure
    # ... and after the replay every row is there once.
    assert after_replay == expected_rows()


def test_without_exactly_once_the_replayed_rows_are_stored_twice(
    spark: SparkSession, data: ClusterData, tmp_path: Path
) -> None:
    after_failure, after_replay = run_replayed_stream(spark, data, tmp_path, "Off")
    assert sum(after_failure.values()) >= 149
    assert set(after_replay) == set(expected_rows())
    assert set(after_replay.values()) <= {1, 2}
    twice = {body for body, n in after_replay.items() if n == 2}
    # Every row the failed run had stored is there twice. Rows it stored after it was read
    # are too: Spark ends a failed stage before the other partition's killed task has
    # stopped sending, so that count is a lower bound.
    assert set(after_failure) <= twice, "each row the failed run sent is there twice"
    assert FAILING_ROW not in twice


def test_a_batch_write_with_a_write_id_stores_its_rows_once(
    spark: SparkSession, data: ClusterData
) -> None:
    topic = "PipeEOBatch"
    run(create_topic, data.namesrv, topic, {"broker-a": 2, "broker-b": 1})
    df = spark.createDataFrame([(f"b{i}".encode(),) for i in range(300)], "body binary")

    def write(write_id: str) -> None:
        (df.repartition(3).write.format("boltmq").mode("append")
         .option("namesrvAddr", data.namesrv).option("topic", topic)
         .option("exactlyOnce", "true").option("writeId", write_id).save())  # fmt: skip

    def bodies() -> Counter[bytes]:
        return Counter(bytes(r["body"]) for r in read(spark, data.namesrv, topic=topic).collect())

    write("nightly-2026-11-24")
    once = Counter(f"b{i}".encode() for i in range(300))
    assert bodies() == once
    write("nightly-2026-11-24")  # the same job again: nothing new
    assert bodies() == once
    write("nightly-2026-11-25")  # another write: stored again
    assert bodies() == once + once


def test_exactly_once_options_are_checked() -> None:
    namesrv = {"namesrvAddr": "127.0.0.1:9876", "topic": "T"}
    options = write_options({**namesrv, "exactlyonce": "TRUE", "WRITEID": "job-7"})
    assert (options.exactly_once, options.write_id) == (True, "job-7")
    with pytest.raises(OptionError, match="exactlyOnce=true needs option writeId"):
        write_options({**namesrv, "exactlyOnce": "true"})
    assert write_options({**namesrv, "exactlyOnce": "true"}, streaming=True).write_id is None
    with pytest.raises(OptionError, match="writeId applies with exactlyOnce=true only"):
        write_options({**namesrv, "writeId": "job-7"})
    with pytest.raises(OptionError, match="exactlyOnce must be true or false, not 'yes'"):
        write_options({**namesrv, "exactlyOnce": "yes"})
    with pytest.raises(OptionError, match="option writeId: 'job:7' is not a write id"):
        write_options({**namesrv, "exactlyOnce": "true", "writeId": "job:7"})


def test_a_stream_write_refuses_the_complete_mode_and_unknown_options(
    spark: SparkSession, data: ClusterData, tmp_path: Path
) -> None:
    df = (
        spark.readStream.format("boltmq").option("namesrvAddr", data.namesrv)
        .option("topic", "PipeOrders").option("startingOffsets", "earliest").load()
    )  # fmt: skip

    def fails(frame: DataFrame, mode: str, **options: str) -> str:
        writer = (frame.writeStream.format("boltmq").outputMode(mode)
                  .option("namesrvAddr", data.namesrv).option("topic", "PipeEOAnywhere")
                  .option("checkpointLocation", str(tmp_path / mode / str(len(options))))
                  .trigger(availableNow=True))  # fmt: skip
        for key, value in options.items():
            writer = writer.option(key, value)
        with pytest.raises(Exception) as caught:
            query = writer.start()
            query.awaitTermination(120)
        return str(caught.value)

    counts = df.groupBy("tags").count().select(F.col("tags").cast("binary").alias("body"))
    text = fails(counts, "complete")
    assert "boltmq cannot rewrite a topic in the complete output mode" in text
    text = fails(df.select("body"), "append", exactlyonce="maybe")
    assert "option exactlyOnce must be true or false, not 'maybe'" in text
    text = fails(df.select("body"), "append", startingOffsets="earliest")
    assert "option startingOffsets applies to reads only" in text
