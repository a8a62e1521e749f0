"""Streaming reads against the real cluster: bounded micro-batches under Trigger.AvailableNow,
a restart from the checkpoint that loses and repeats nothing, messages (and queues) that
arrive while the query runs, the consumer group's offsets that groupId commits, and a start
below the min offset that retention really moved (failOnDataLoss both ways).

Each test has topics of its own; every wait polls a condition under a deadline.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from client import ClientInstance
from protocol.bodies import MessageQueue

from .helpers import (
    AGED,
    ClusterData,
    Sent,
    create_topic,
    queue_offsets,
    run,
    send_layout,
    wait_for,
)

# Room for the run's first Spark job and cluster start on a busy machine.
pytestmark = pytest.mark.timeout(300)

Key = tuple[str, str, int, int]


def stream(spark: SparkSession, namesrv: str, **options: str) -> DataFrame:
    """``spark.readStream.format("boltmq")`` with ``namesrvAddr`` and ``options``."""
    reader = spark.readStream.format("boltmq").option("namesrvAddr", namesrv)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def keys_of(df: DataFrame) -> list[Key]:
    """(topic, brokerName, queueId, queueOffset) of each row, in no particular order."""
    return [tuple(row) for row in  # type: ignore[misc]
            df.select("topic", "brokerName", "queueId", "queueOffset").collect()]  # fmt: skip


class Batches:
    """A foreachBatch function that keeps each micro-batch's keys, by batch id."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.found: dict[int, list[Key]] = {}

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        keys = keys_of(df)
        with self.lock:
            self.found[batch_id] = keys

    def sizes(self) -> list[int]:
        """Rows per batch, in batch order."""
        with self.lock:
            return [len(self.found[i]) for i in sorted(self.found)]

    def read_keys(self) -> list[Key]:
        """Every key read, in batch order."""
        with self.lock:
            return [key for i in sorted(self.found) for key in self.found[i]]


@pytest.fixture
def queries() -> Iterator[list[StreamingQuery]]:
    """Queries a test started; stopped at its end whatever happened."""
    started: list[StreamingQuery] = []
    yield started
    for query in started:
        if query.isActive:
            query.stop()


def keys(sent: list[Sent]) -> list[Key]:
    """The keys of ``sent``, sorted."""
    return sorted(s.key() for s in sent)


async def group_offsets(namesrv: str, group: str, queues: list[MessageQueue]) -> dict[
    tuple[str, int], int | None
]:
    """``group``'s offset on the brokers of each of ``queues`` (QUERY_CONSUMER_OFFSET)."""
    async with ClientInstance(namesrv) as instance:
        return {(q.broker_name, q.queue_id): await instance.query_consumer_offset(group, q)
                for q in queues}  # fmt: skip


def test_available_now_reads_the_backlog_in_bounded_batches_and_commits_the_group(
    spark: SparkSession, data: ClusterData, queries: list[StreamingQuery]
) -> None:
    topic, group = "StreamBacklog", "stream-backlog-group"
    run(create_topic, data.namesrv, topic, {"broker-a": 3, "broker-b": 2})
    layout = {("broker-a", 0): 25, ("broker-a", 1): 3, ("broker-a", 2): 0, ("broker-b", 0): 12,
              ("broker-b", 1): 1}  # fmt: skip
    sent = run(send_layout, data.namesrv, topic, layout)
    batches = Batches()
    df = stream(spark, data.namesrv, topic=topic, startingOffsets="earliest",
                maxOffsetsPerTrigger="10", groupId=group)  # fmt: skip
    query = df.writeStream.foreachBatch(batches).trigger(availableNow=True).start()
    queries.append(query)
    assert query.awaitTermination(120), "the AvailableNow query did not finish"
    assert query.exception() is None
    # 41 messages, 10 a batch: every batch full but the last.
    assert batches.sizes() == [10, 10, 10, 10, 1]
    assert sorted(batches.read_keys()) == keys(sent)
    # Each of the four queues with a backlog is in the first batch.
    first = batches.found[min(batches.found)]
    assert {(b, q) for _, b, q, _ in first} == {(b, q) for (b, q), n in layout.items() if n}
    # The group's offsets on the brokers are the queues' max offsets: no lag.
    queues = [MessageQueue(topic=topic, broker_name=b, queue_id=q) for b, q in layout]
    expected = {(b, q): n for (b, q), n in layout.items()}
    committed: dict[tuple[str, int], int | None] = {}

    def caught_up() -> bool:
        committed.update(run(group_offsets, data.namesrv, group, queues))
        return committed == expected

    try:
        wait_for(caught_up, f"group {group}'s offsets to reach {expected}", 30)
    finally:
        print("committed:", committed)


def test_a_query_restarted_from_its_checkpoint_loses_and_repeats_nothing(
    spark: SparkSession, data: ClusterData, queries: list[StreamingQuery], tmp_path: Path
) -> None:
    topic = "StreamRestart"
    run(create_topic, data.namesrv, topic, {"broker-a": 2, "broker-b": 2})
    layout = {("broker-a", 0): 14, ("broker-a", 1): 9, ("broker-b", 0): 11, ("broker-b", 1): 6}
    sent = run(send_layout, data.namesrv, topic, layout)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start(**options: str) -> StreamingQuery:
        df = stream(spark, data.namesrv, topic=topic, maxOffsetsPerTrigger="6", **options)
        writer = df.select("topic", "brokerName", "queueId", "queueOffset", "body").writeStream
        query = writer.format("parquet").option("path", str(out)) \
            .option("checkpointLocation", str(checkpoint))  # fmt: skip
        return query

    first = start(startingOffsets="earliest").start()
    queries.append(first)
    wait_for(lambda: sum(1 for p in first.recentProgress if p["numInputRows"]) >= 2,
             "two micro-batches of the first run", 60)  # fmt: skip
    first.stop()
    # More messages while the query is down, then a restart whose startingOffsets (latest)
    # the checkpoint overrides.
    sent += run(send_layout, data.namesrv, topic, {("broker-a", 1): 4, ("broker-b", 1): 5})
    second = start(startingOffsets="latest").trigger(availableNow=True).start()
    queries.append(second)
    assert second.awaitTermination(120), "the restarted query did not finish"
    assert second.exception() is None
    found = keys_of(spark.read.parquet(str(out)))
    assert len(found) == len(set(found)), "a message was written twice"
    assert sorted(found) == keys(sent)


def test_messages_and_queues_that_arrive_while_the_query_runs_are_read(
    spark: SparkSession, data: ClusterData, queries: list[StreamingQuery]
) -> None:
    topic, table = "StreamLive", "stream_live"
    run(create_topic, data.namesrv, topic, {"broker-a": 2})
    old = run(send_layout, data.namesrv, topic, {("broker-a", 0): 3, ("broker-a", 1): 2})
    # startingOffsets defaults to latest: the messages above are not read.
    df = stream(spark, data.namesrv, topic=topic)
    query = df.writeStream.format("memory").queryName(table).start()
    queries.append(query)
    wait_for(lambda: query.status["message"] == "Waiting for data to arrive",
             "the query's first trigger", 60)  # fmt: skip

    def read_now() -> list[Key]:
        return keys_of(spark.table(table))

    new = run(send_layout, data.namesrv, topic, {("broker-a", 0): 4, ("broker-a", 1): 1})
    wait_for(lambda: sorted(read_now()) == keys(new), "the new messages", 60)
    # The topic grows onto broker-b: its queues are read from their first message on.
    run(create_topic, data.namesrv, topic, {"broker-a": 2, "broker-b": 2})
    grown = run(send_layout, data.namesrv, topic, {("broker-b", 0): 3, ("broker-b", 1): 2,
                                                   ("broker-a", 0): 1})  # fmt: skip
    assert {s.queue_offset for s in grown if s.broker_name == "broker-b"} >= {0}
    wait_for(lambda: sorted(read_now()) == keys(new + grown), "the grown topic's messages", 60)
    assert not set(read_now()) & set(keys(old))
    assert query.exception() is None


def test_a_stream_from_deleted_messages_fails_or_starts_at_the_min_offset(
    spark: SparkSession, data: ClusterData, aged_min: int, queries: list[StreamingQuery]
) -> None:
    starting = json.dumps({AGED: {"broker-r": {"0": 0}}})
    df = stream(spark, data.namesrv, topic=AGED, startingOffsets=starting)
    query = df.writeStream.format("memory").queryName("stream_aged") \
        .trigger(availableNow=True).start()  # fmt: skip
    queries.append(query)
    with pytest.raises(Exception, match=f"topic {AGED}, broker broker-r, queue 0: "
                       "startingOffsets 0 is below the queue's min offset"):  # fmt: skip
        query.awaitTermination(120)
    batches = Batches()
    df = stream(spark, data.namesrv, topic=AGED, startingOffsets=starting,
                failOnDataLoss="false", maxOffsetsPerTrigger="50")  # fmt: skip
    query = df.writeStream.foreachBatch(batches).trigger(availableNow=True).start()
    queries.append(query)
    assert query.awaitTermination(120), "the AvailableNow query did not finish"
    low, high = run(queue_offsets, data.namesrv, AGED)[("broker-r", 0)]
    offsets = sorted(key[3] for key in batches.read_keys())
    assert offsets == list(range(offsets[0], high))
    assert aged_min <= offsets[0] <= low
    assert max(batches.sizes()) <= 50
