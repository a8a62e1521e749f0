"""Batch reads against the real cluster: every message exactly once with its fields, offset
ranges by keyword and by JSON, several topics, minPartitions and small pulls."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta

import pytest
from pyspark.sql import SparkSession

import pipeline

from .helpers import (
    BIG_BODY,
    EVENTS,
    ORDERS,
    ORDERS_LAYOUT,
    ClusterData,
    Sent,
    read,
    rows_by_key,
)

# Room for the run's first Spark job and cluster start on a busy machine.
pytestmark = pytest.mark.timeout(300)


def keys_between(
    sent: list[Sent], ranges: dict[tuple[str, int], tuple[int, int]]
) -> list[tuple[str, str, int, int]]:
    """The keys of the messages inside ``ranges``: (broker, queue) -> [start, end)."""
    found = []
    for message in sent:
        start, end = ranges.get((message.broker_name, message.queue_id), (0, 0))
        if start <= message.queue_offset < end:
            found.append(message.key())
    return sorted(found)


def test_a_read_gives_every_message_once_with_its_fields(
    spark: SparkSession, data: ClusterData
) -> None:
    df = read(spark, data.namesrv, topic=ORDERS)
    assert df.schema == pipeline.SCHEMA
    # One partition per queue holding messages (broker-a/1 is empty).
    assert df.rdd.getNumPartitions() == sum(1 for n in ORDERS_LAYOUT.values() if n)
    rows = rows_by_key(df)
    assert sorted(rows) == sorted(s.key() for s in data.orders)
    # Each queue's offsets are 0..n-1, exactly.
    for (broker, queue_id), count in ORDERS_LAYOUT.items():
        offsets = sorted(k[3] for k in rows if k[1:3] == (broker, queue_id))
        assert offsets == list(range(count))
    now = datetime.now()  # Spark hands timestamps back in the session's (local) time zone
    for sent in data.orders:
        row = rows[sent.key()]
        assert row["body"] == sent.body
        assert row["keys"] == sent.keys
        assert row["tags"] == sent.tags
        assert row["properties"] == sent.properties
        assert row["msgId"] == sent.msg_id
        assert row["reconsumeTimes"] == 0
        assert re.fullmatch(r"127\.0\.0\.1:\d+", row["bornHost"])
        assert row["bornTimestamp"] <= row["storeTimestamp"]
        assert now - timedelta(minutes=30) < row["storeTimestamp"] <= now + timedelta(minutes=1)
    # The 8 KiB body was stored compressed and comes back inflated.
    assert rows[(ORDERS, "broker-a", 2, 0)]["body"] == BIG_BODY


def test_offset_keywords(spark: SparkSession, data: ClusterData) -> None:
    everything = len(data.orders)
    assert read(spark, data.namesrv, topic=ORDERS, startingOffsets="earliest",
                endingOffsets="latest").count() == everything  # fmt: skip
    assert read(spark, data.namesrv, topic=ORDERS, startingOffsets="LATEST").count() == 0
    assert read(spark, data.namesrv, topic=ORDERS, endingOffsets="earliest").count() == 0


def test_json_offsets_pick_exact_ranges_with_minus_two_and_minus_one(
    spark: SparkSession, data: ClusterData
) -> None:
    starting = {ORDERS: {"broker-a": {"0": 2, "2": -2, "3": -1}, "broker-b": {"1": 4}}}
    ending = {ORDERS: {"broker-a": {"0": 5, "3": -1}, "broker-b": {"0": 3, "1": -1}}}
    df = read(spark, data.namesrv, topic=ORDERS, startingOffsets=json.dumps(starting),
              endingOffsets=json.dumps(ending))  # fmt: skip
    # Unnamed queues start at earliest and end at latest.
    expected = {
        ("broker-a", 0): (2, 5),
        ("broker-a", 2): (0, 12),
        ("broker-a", 3): (40, 40),
        ("broker-b", 0): (0, 3),
        ("broker-b", 1): (4, 9),
        ("broker-b", 2): (0, 1),
    }
    rows = rows_by_key(df)
    assert sorted(rows) == keys_between(data.orders, expected)
    assert df.rdd.getNumPartitions() == 5  # broker-a/3's range is empty


def test_several_topics(spark: SparkSession, data: ClusterData) -> None:
    df = read(spark, data.namesrv, topics=f" {ORDERS}, {EVENTS} ")
    rows = rows_by_key(df)
    assert sorted(rows) == sorted(s.key() for s in data.orders + data.events)
    for sent in data.events:
        assert rows[sent.key()]["body"] == sent.body


def test_min_partitions_splits_ranges_and_still_reads_each_message_once(
    spark: SparkSession, data: ClusterData
) -> None:
    df = read(spark, data.namesrv, topic=ORDERS, minPartitions="20", pullBatchSize="3")
    assert df.rdd.getNumPartitions() >= 20
    rows = rows_by_key(df)
    assert sorted(rows) == sorted(s.key() for s in data.orders)
    assert all(rows[s.key()]["body"] == s.body for s in data.orders)
    # Fewer than the queues with messages: one partition per queue, as without the option.
    assert read(spark, data.namesrv, topic=ORDERS, minPartitions="2").rdd.getNumPartitions() == 6


def test_a_limit_stops_reading_early(spark: SparkSession, data: ClusterData) -> None:
    rows = read(spark, data.namesrv, topic=ORDERS, pullBatchSize="2").limit(5).collect()
    assert len(rows) == 5
    sent = {s.key(): s for s in data.orders}
    for row in rows:
        key = (row["topic"], row["brokerName"], row["queueId"], row["queueOffset"])
        assert row["body"] == sent[key].body
