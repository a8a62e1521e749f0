"""Streaming reads' remaining options against the real cluster: startingTimestamp for a
query's first batch, subExpression, and minOffsetsPerTrigger with maxTriggerDelay (a batch
waits for enough messages, or for the delay).

Each test has topics of its own; every wait polls a condition under a deadline.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from pipeline.options import stream_options

from .helpers import ClusterData, create_topic, read, rows_by_key, run, send_layout, wait_for
from .test_stream import Batches, keys, keys_of, stream

# Room for the run's first Spark job and cluster start on a busy machine.
pytestmark = pytest.mark.timeout(300)

NO_DATA_PROGRESS = "spark.sql.streaming.noDataProgressEventInterval"


@pytest.fixture
def queries() -> Iterator[list[StreamingQuery]]:
    """Queries a test started; stopped at its end whatever happened."""
    started: list[StreamingQuery] = []
    yield started
    for query in started:
        if query.isActive:
            query.stop()


def test_options_parse() -> None:
    base = {"namesrvAddr": "h:1", "topic": "T"}
    options = stream_options({**base, "minOffsetsPerTrigger": "10", "maxTriggerDelay": "500ms",
                              "startingTimestamp": "1700000000000",
                              "subExpression": " A || B "})  # fmt: skip
    assert options.min_offsets_per_trigger == 10
    assert options.max_trigger_delay == 0.5
    assert options.starting_timestamp == 1_700_000_000_000
    assert options.tags == frozenset({"A", "B"})
    assert stream_options({**base, "maxTriggerDelay": "2m"}).max_trigger_delay == 120.0
    assert stream_options(base).min_offsets_per_trigger is None


def test_starting_timestamp_starts_the_query_at_the_first_message_stored_then(
    spark: SparkSession, data: ClusterData, queries: list[StreamingQuery]
) -> None:
    topic = "StreamTimed"
    run(create_topic, data.namesrv, topic, {"broker-a": 2, "broker-b": 1})
    layout = {("broker-a", 0): 4, ("broker-a", 1): 2, ("broker-b", 0): 3}
    for _ in range(4):
        run(send_layout, data.namesrv, topic, layout)
    stored = {
        key: round(row["storeTimestamp"].timestamp() * 1000)
        for key, row in rows_by_key(read(spark, data.namesrv, topic=topic)).items()
    }
    times = sorted(set(stored.values()))
    middle = times[len(times) // 2]
    batches = Batches()
    df = stream(spark, data.namesrv, topic=topic, startingTimestamp=str(middle),
                subExpression="TagA")  # fmt: skip
    query = df.writeStream.foreachBatch(batches).trigger(availableNow=True).start()
    queries.append(query)
    assert query.awaitTermination(120), "the AvailableNow query did not finish"
    assert query.exception() is None
    tags = {key: row["tags"] for key, row in rows_by_key(read(spark, data.namesrv,
                                                              topic=topic)).items()}  # fmt: skip
    expected = sorted(k for k, t in stored.items() if t >= middle and tags[k] == "TagA")
    assert expected, "no TagA message after the middle store time"
    assert sorted(batches.read_keys()) == expected


def test_min_offsets_per_trigger_waits_for_enough_messages(
    spark: SparkSession, data: ClusterData, queries: list[StreamingQuery]
) -> None:
    topic, table = "StreamMinOffsets", "stream_min_offsets"
    run(create_topic, data.namesrv, topic, {"broker-a": 1, "broker-b": 1})
    # Progress for triggers without data, so the test sees that triggers ran.
    spark.conf.set(NO_DATA_PROGRESS, "100ms")
    try:
        df = stream(spark, data.namesrv, topic=topic, minOffsetsPerTrigger="10",
                    maxTriggerDelay="1h")  # fmt: skip
        query = df.writeStream.format("memory").queryName(table) \
            .trigger(processingTime="200 milliseconds").start()  # fmt: skip
        queries.append(query)
        wait_for(lambda: query.status["message"] == "Waiting for data to arrive",
                 "the query's first trigger", 60)  # fmt: skip
        first = run(send_layout, data.namesrv, topic, {("broker-a", 0): 3, ("broker-b", 0): 1})

        def seen_latest(total: int) -> bool:
            # reportLatestOffset: the queues' max offsets as the last trigger saw them.
            for progress in query.recentProgress:
                for source in progress["sources"]:
                    latest = source.get("latestOffset")
                    document = json.loads(latest) if isinstance(latest, str) else latest
                    if document and sum(offset for brokers in document.values()
                                        for ids in brokers.values()
                                        for offset in ids.values()) >= total:  # fmt: skip
                        return True
            return False

        wait_for(lambda: seen_latest(4), "a trigger that saw the 4 new messages", 60)
        triggers = len(query.recentProgress)
        wait_for(lambda: len(query.recentProgress) >= triggers + 3, "three more triggers", 60)
        assert all(p["numInputRows"] == 0 for p in query.recentProgress)
        assert keys_of(spark.table(table)) == []
        second = run(send_layout, data.namesrv, topic, {("broker-a", 0): 2, ("broker-b", 0): 4})
        wait_for(lambda: len(keys_of(spark.table(table))) == 10, "the 10 messages", 60)
        assert sorted(keys_of(spark.table(table))) == keys(first + second)
        assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [10]
        assert query.exception() is None
    finally:
        spark.conf.unset(NO_DATA_PROGRESS)


def test_max_trigger_delay_lets_fewer_messages_through(
    spark: SparkSession, data: ClusterData, queries: list[StreamingQuery]
) -> None:
    topic = "StreamTriggerDelay"
    run(create_topic, data.namesrv, topic, {"broker-a": 1})
    batches = Batches()
    df = stream(spark, data.namesrv, topic=topic, minOffsetsPerTrigger="1000",
                maxTriggerDelay="2s", maxOffsetsPerTrigger="2")  # fmt: skip
    query = df.writeStream.foreachBatch(batches) \
        .trigger(processingTime="200 milliseconds").start()  # fmt: skip
    queries.append(query)
    wait_for(lambda: query.status["message"] == "Waiting for data to arrive",
             "the query's first trigger", 60)  # fmt: skip
    sent = run(send_layout, data.namesrv, topic, {("broker-a", 0): 3})
    wait_for(lambda: len(batches.read_keys()) == 3, "the 3 messages, after the delay", 90)
    assert sorted(batches.read_keys()) == keys(sent)
    # maxOffsetsPerTrigger still caps each batch.
    assert [n for n in batches.sizes() if n] == [2, 1]
    assert query.exception() is None
