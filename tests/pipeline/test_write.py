"""Batch writes: rows become messages (per-row topics or the topic option), read back exactly;
rows and columns that cannot be written, and sends the cluster refuses, fail by name."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pytest
from pyspark.sql import SparkSession

from client import Admin
from pipeline.sender import BATCH_BYTES
from protocol.bodies import PERM_READ

from .helpers import ClusterData, create_topic, read, run, wait_for

WRITE_SCHEMA = "topic string, body binary, tags string, keys string, properties map<string,string>"

# Room for the run's first Spark job and cluster start on a busy machine.
pytestmark = pytest.mark.timeout(300)


def fields(row: dict[str, Any]) -> tuple[Any, ...]:
    """What a write carries over, comparable across write and read."""
    return (bytes(row["body"]), row["tags"], row["keys"], tuple(sorted(row["properties"].items())))


def test_rows_written_to_two_topics_read_back_exactly(
    spark: SparkSession, data: ClusterData
) -> None:
    topics = ["PipeWriteA", "PipeWriteB"]
    for topic in topics:
        run(create_topic, data.namesrv, topic, {"broker-a": 2, "broker-b": 2})
    rows = [
        (
            topics[i % 2],
            f"row {i}".encode(),
            ("blue", "green", None)[i % 3],
            f"id-{i} batch-{i // 50}" if i % 7 else None,
            {"n": str(i), "parity": "even" if i % 2 == 0 else "odd"} if i % 5 else {},
        )
        for i in range(300)
    ]
    # One body larger than a whole batch: sent on its own, compressed, read back inflated.
    rows.append(("PipeWriteB", b"L" * (BATCH_BYTES + 1000), "large", "big-one", {"size": "xl"}))
    df = spark.createDataFrame(rows, WRITE_SCHEMA).repartition(3)
    df.write.format("boltmq").mode("append").option("namesrvAddr", data.namesrv).save()
    for topic in topics:
        expected = Counter(
            fields(dict(zip(["topic", "body", "tags", "keys", "properties"], row, strict=True)))
            for row in rows if row[0] == topic
        )  # fmt: skip
        found = read(spark, data.namesrv, topic=topic).collect()
        assert Counter(fields(row.asDict()) for row in found) == expected


def test_tasks_spread_their_sends_over_the_queues(spark: SparkSession, data: ClusterData) -> None:
    topic = "PipeWriteSpread"
    run(create_topic, data.namesrv, topic, {"broker-a": 2, "broker-b": 2})
    # 16 tasks of about one row each: were every task to start at the topic's first queue,
    # all would land there.
    df = spark.createDataFrame([(f"r{i}".encode(),) for i in range(16)], "body binary")
    (df.repartition(16).write.format("boltmq").mode("append")
     .option("namesrvAddr", data.namesrv).option("topic", topic).save())  # fmt: skip
    found = read(spark, data.namesrv, topic=topic).collect()
    assert sorted(r["body"] for r in found) == sorted(f"r{i}".encode() for i in range(16))
    queues = {(r["brokerName"], r["queueId"]) for r in found}
    assert len(queues) >= 3 and {b for b, _ in queues} == {"broker-a", "broker-b"}, queues


def test_string_bodies_and_the_topic_option(spark: SparkSession, data: ClusterData) -> None:
    topic = "PipeWriteText"
    run(create_topic, data.namesrv, topic, {"broker-a": 1})
    df = spark.createDataFrame([(f"text {i} ✓",) for i in range(20)], "body string")
    (df.write.format("boltmq").mode("append").option("namesrvAddr", data.namesrv)
     .option("topic", topic).save())  # fmt: skip
    found = read(spark, data.namesrv, topic=topic).collect()
    assert sorted(row["body"] for row in found) == sorted(f"text {i} ✓".encode() for i in range(20))
    assert all(row["tags"] is None and row["properties"] == {} for row in found)


def test_a_read_can_be_written_back_to_another_topic(
    spark: SparkSession, data: ClusterData
) -> None:
    source, target = "PipeWriteSource", "PipeWriteCopy"
    run(create_topic, data.namesrv, source, {"broker-a": 2})
    run(create_topic, data.namesrv, target, {"broker-b": 1})
    rows = [(f"copy me {i}".encode(), "t" if i % 2 else None, {"i": str(i)}) for i in range(10)]
    df = spark.createDataFrame(rows, "body binary, tags string, properties map<string,string>")
    (df.write.format("boltmq").mode("append").option("namesrvAddr", data.namesrv)
     .option("topic", source).save())  # fmt: skip
    # Every column of a read goes in: the topic option wins over the topic column, and the
    # read's own columns (queueId, msgId, ...) are ignored.
    original = read(spark, data.namesrv, topic=source)
    (original.write.format("boltmq").mode("append").option("namesrvAddr", data.namesrv)
     .option("topic", target).save())  # fmt: skip
    copied = read(spark, data.namesrv, topic=target).collect()
    assert Counter(fields(r.asDict()) for r in copied) == Counter(
        fields(r.asDict()) for r in original.collect()
    )
    assert len(copied) == 10 and {r["topic"] for r in copied} == {target}


def write_fails(spark: SparkSession, namesrv: str, rows: list[Any], schema: str,
                **options: str) -> str:  # fmt: skip
    """The text of the error a write of ``rows`` fails with."""
    writer = spark.createDataFrame(rows, schema).write.format("boltmq").mode("append")
    writer = writer.option("namesrvAddr", namesrv)
    for name, value in options.items():
        writer = writer.option(name, value)
    with pytest.raises(Exception) as caught:
        writer.save()
    return str(caught.value)


def test_writes_that_cannot_work_are_refused_by_name(
    spark: SparkSession, data: ClusterData
) -> None:
    namesrv = data.namesrv
    text = write_fails(spark, namesrv, [(b"x",)], "body binary")
    assert "OptionError: a write needs a topic: give option topic, or a topic column" in text
    text = write_fails(spark, namesrv, [(b"x", "t")], "body binary, tag string", topic="T")
    assert "boltmq cannot write column 'tag'; a write takes body, topic, tags, keys, " in text
    text = write_fails(spark, namesrv, [("T",)], "topic string")
    assert "a write needs a body column (binary or string)" in text
    text = write_fails(spark, namesrv, [(b"x", 3)], "body binary, keys int", topic="T")
    assert "column keys must be string, not int" in text
    text = write_fails(spark, namesrv, [(b"x",)], "body binary", topic="T",
                       startingOffsets="earliest")  # fmt: skip
    assert "option startingOffsets applies to reads only" in text
    overwrite = spark.createDataFrame([(b"x",)], "body binary").write.format("boltmq")
    with pytest.raises(Exception, match="boltmq cannot overwrite a topic"):
        overwrite.mode("overwrite").option("namesrvAddr", namesrv).option("topic", "T").save()


def test_rows_that_cannot_be_messages_fail_the_task_by_name(
    spark: SparkSession, data: ClusterData
) -> None:
    namesrv = data.namesrv
    text = write_fails(spark, namesrv, [("PipeWriteText", b"")], "topic string, body binary")
    assert "WriteError: row 1 of this partition (topic PipeWriteText) has an empty body" in text
    text = write_fails(spark, namesrv, [(None, b"x")], "topic string, body binary")
    assert "row 1 of this partition has no topic" in text
    schema = "body binary, properties map<string,string>"
    text = write_fails(spark, namesrv, [(b"x", {"KEYS": "k"})], schema, topic="PipeWriteText")
    assert "properties KEYS are reserved by RocketMQ; use the tags and keys columns" in text


def test_a_send_the_cluster_refuses_fails_the_task(spark: SparkSession, data: ClusterData) -> None:
    topic = "PipeReadOnly"
    run(create_topic, data.namesrv, topic, {"broker-a": 1})

    async def forbid_writes() -> None:
        async with Admin(namesrv_addr=data.namesrv) as admin:
            masters = await admin.masters()
            await admin.create_topic(topic, broker_addr=masters["broker-a"], queue_nums=1,
                                     perm=PERM_READ)  # fmt: skip

    async def read_only() -> bool:
        async with Admin(namesrv_addr=data.namesrv) as admin:
            return all(q.perm == PERM_READ for q in (await admin.route(topic)).queue_datas)

    run(forbid_writes)
    wait_for(lambda: run(read_only), f"the route of {topic} to say read-only", timeout=60)
    rows = [(f"m{i}".encode(),) for i in range(3)]
    text = write_fails(spark, data.namesrv, rows, "body binary", topic=topic)
    assert re.search(rf"WriteError: send of [123] message\(s\) to topic {topic} failed: "
                     rf"TOPIC_NOT_EXIST: topic {topic} has no writable queue", text)
