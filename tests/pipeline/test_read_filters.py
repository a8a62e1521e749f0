"""Batch reads that pick messages by store time (startingTimestamp / endingTimestamp) and by
tag (subExpression, and filters on ``tags``: applied by Spark with filter pushdown off, pushed
down to the broker with it on), against the real cluster.

Each test has topics of its own. The expected rows come from what the tests sent and from a
plain read of the whole topic (for the store times the brokers gave). What the brokers handed
over is read from their statistics (GROUP_GET_NUMS of topic@boltmq-spark-reader).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import EqualTo, In, IsNull

from client import Admin, Message, MQClientError, Producer
from pipeline.options import read_options
from pipeline.planning import QueueRange, plan_ranges
from pipeline.pulls import READER_GROUP
from pipeline.queue_reader import QueueRangeReader
from pipeline.reader import BoltMQPushdownReader, BoltMQReader
from pipeline.schema import SCHEMA
from pipeline.source import _READ_PLANNER, BoltMQDataSource
from protocol.bodies import MessageQueue
from protocol.message import tag_hash_code

from .helpers import (
    ClusterData,
    create_topic,
    filter_pushdown,
    read,
    rows_by_key,
    run,
    send_layout,
    wait_for,
)

# Room for the run's first Spark job and cluster start on a busy machine.
pytestmark = pytest.mark.timeout(300)

Key = tuple[str, str, int, int]

TIMED = "PipeTimed"
TAGGED = "PipeTagged"
TAG_CYCLE = ("Aa", "BB", "TagA", "TagC", None)  # "Aa" and "BB" share a Java hash code
TAGGED_QUEUES = (("broker-a", 0), ("broker-b", 0))
TAGGED_PER_QUEUE = 40


def ms(value: Any) -> int:
    """A timestamp column's value (a naive local datetime) as ms since the epoch."""
    return round(value.timestamp() * 1000)


@pytest.fixture(scope="module")
def timed(spark: SparkSession, data: ClusterData) -> dict[Key, int]:
    """PipeTimed's messages, five rounds of sends into three queues: key -> store time (ms)."""
    run(create_topic, data.namesrv, TIMED, {"broker-a": 2, "broker-b": 1})
    layout = {("broker-a", 0): 3, ("broker-a", 1): 5, ("broker-b", 0): 4}
    for _ in range(5):
        run(send_layout, data.namesrv, TIMED, layout)
    rows = rows_by_key(read(spark, data.namesrv, topic=TIMED))
    assert len(rows) == 5 * sum(layout.values())
    return {key: ms(row["storeTimestamp"]) for key, row in rows.items()}


def expected_ranges(
    timed: dict[Key, int], start_ms: int | None, end_ms: int | None
) -> dict[tuple[str, int], tuple[int, int]]:
    """The [start, end) of each queue holding messages stored in [start_ms, end_ms)."""
    found: dict[tuple[str, int], list[int]] = {}
    for (_, broker, queue_id, offset), stored in timed.items():
        found.setdefault((broker, queue_id), [])
        if (start_ms is None or stored >= start_ms) and (end_ms is None or stored < end_ms):
            found[(broker, queue_id)].append(offset)
    ranges = {}
    for queue, offsets in found.items():
        if offsets:
            # Store times never go down within a queue: the offsets are contiguous.
            assert offsets == list(range(min(offsets), max(offsets) + 1))
            ranges[queue] = (min(offsets), max(offsets) + 1)
    return ranges


def planned(namesrv: str, **options: str) -> dict[tuple[str, int], tuple[int, int]]:
    """The ranges a read with ``options`` plans, by queue."""
    given = {"namesrvAddr": namesrv, "topic": TIMED, **options}
    ranges: list[QueueRange] = trio.run(plan_ranges, read_options(given))
    return {(r.broker_name, r.queue_id): (r.start, r.end) for r in ranges}


def test_timestamps_pick_exactly_the_messages_stored_in_between(
    spark: SparkSession, data: ClusterData, timed: dict[Key, int]
) -> None:
    times = sorted(set(timed.values()))
    assert len(times) >= 5, "the sends all got one store time"
    middle = times[len(times) // 2]
    # Before everything, each distinct store time (messages of one batch share one), and
    # past the end.
    for stamp in [times[0] - 60_000, *times, times[-1] + 1]:
        assert planned(data.namesrv, startingTimestamp=str(stamp)) == expected_ranges(
            timed, stamp, None), f"startingTimestamp {stamp}"  # fmt: skip
        assert planned(data.namesrv, endingTimestamp=str(stamp)) == expected_ranges(
            timed, None, stamp), f"endingTimestamp {stamp}"  # fmt: skip
    low, high = times[1], times[-2]
    assert planned(data.namesrv, startingTimestamp=str(low), endingTimestamp=str(high)) == \
        expected_ranges(timed, low, high)  # fmt: skip
    # The same through Spark, rows and all.
    rows = rows_by_key(read(spark, data.namesrv, topic=TIMED, startingTimestamp=str(middle),
                            endingTimestamp=str(high)))  # fmt: skip
    assert sorted(rows) == sorted(k for k, t in timed.items() if middle <= t < high)
    assert all(middle <= ms(row["storeTimestamp"]) < high for row in rows.values())


def test_timestamps_and_offsets_for_one_end_are_refused_by_name(
    spark: SparkSession, data: ClusterData
) -> None:
    with pytest.raises(Exception, match="options startingOffsets and startingTimestamp both"):
        read(spark, data.namesrv, topic=TIMED, startingOffsets="earliest",
             startingTimestamp="0")  # fmt: skip
    with pytest.raises(Exception, match="options endingOffsets and endingTimestamp both"):
        read(spark, data.namesrv, topic=TIMED, endingOffsets="latest", endingTimestamp="0")
    with pytest.raises(Exception, match="option startingTimestamp 9 is after endingTimestamp 5"):
        read(spark, data.namesrv, topic=TIMED, startingTimestamp="9", endingTimestamp="5")
    with pytest.raises(Exception, match="option endingTimestamp must be milliseconds"):
        read(spark, data.namesrv, topic=TIMED, endingTimestamp="yesterday")


# -- tags ---------------------------------------------------------------------------------------


async def send_tagged(
    namesrv: str, topic: str = TAGGED, cycle: tuple[str | None, ...] = TAG_CYCLE
) -> dict[Key, str | None]:
    """TAGGED_PER_QUEUE messages into each queue, tags going round ``cycle``: key -> tag."""
    sent: dict[Key, str | None] = {}
    async with Producer("pipeline-test-producer", namesrv_addr=namesrv) as producer:
        for broker, queue_id in TAGGED_QUEUES:
            queue = MessageQueue(topic=topic, broker_name=broker, queue_id=queue_id)
            tags = [cycle[i % len(cycle)] for i in range(TAGGED_PER_QUEUE)]
            batch = [Message(topic, f"{broker}/{queue_id}/{i}".encode(), tags=tag)
                     for i, tag in enumerate(tags)]  # fmt: skip
            result = await producer.send_batch(batch, queue=queue)
            for i, tag in enumerate(tags):
                sent[(topic, broker, queue_id, result.queue_offset + i)] = tag
    return sent


@pytest.fixture(scope="module")
def tagged(data: ClusterData) -> dict[Key, str | None]:
    """PipeTagged's messages: key -> tag."""
    run(create_topic, data.namesrv, TAGGED, {"broker-a": 1, "broker-b": 1})
    return run(send_tagged, data.namesrv)


# Topics read once each with a filter on tags, so that their brokers' statistics count that
# one read: with pushdown off (Spark filters) and on (the broker filters). No two tags of
# FILTER_CYCLE share a hash code, so the broker hands over exactly the tags asked for.
SPARK_FILTERS = "PipeTagsSparkFilters"
BROKER_FILTERS = "PipeTagsBrokerFilters"
FILTER_CYCLE = ("TagA", "TagB", None)


@pytest.fixture(scope="module")
def filtered(data: ClusterData) -> dict[str, dict[Key, str | None]]:
    """SPARK_FILTERS' and BROKER_FILTERS' messages: topic -> key -> tag."""
    sent = {}
    for topic in (SPARK_FILTERS, BROKER_FILTERS):
        run(create_topic, data.namesrv, topic, {"broker-a": 1, "broker-b": 1})
        sent[topic] = run(send_tagged, data.namesrv, topic, FILTER_CYCLE)
    return sent


async def handed_over(namesrv: str, topic: str) -> int:
    """Messages of ``topic`` the brokers handed to the data source's pulls in the last minute
    (their GROUP_GET_NUMS, sampled every 10 s; 0 before a broker's first sample)."""
    total = 0
    async with Admin(namesrv_addr=namesrv) as admin:
        for address in (await admin.masters()).values():
            try:
                stats = await admin.broker_stats(address, "GROUP_GET_NUMS",
                                                 f"{topic}@{READER_GROUP}")  # fmt: skip
            except MQClientError:  # not counted (or not sampled) yet
                continue
            total += stats.stats_minute.sum
    return total


def wait_for_handed_over(namesrv: str, topic: str, at_least: int) -> int:
    """What the brokers handed over of ``topic``, once their statistics show ``at_least``:
    the count only grows for a minute after the read, so a larger one is final too."""
    seen: list[int] = []

    def counted() -> bool:
        seen.append(run(handed_over, namesrv, topic))
        return seen[-1] >= at_least

    wait_for(counted, f"the brokers' statistics to count {at_least} messages of {topic} "
             f"(seen: {seen[-1:]})", timeout=45)  # fmt: skip
    return seen[-1]


@pytest.fixture
def with_pushdown(spark: SparkSession) -> Iterator[None]:
    """Filter pushdown on for the test."""
    with filter_pushdown(spark, True):
        yield


def with_tags(sent: dict[Key, str | None], *tags: str) -> list[Key]:
    """The keys of the messages with one of ``tags``, sorted."""
    return sorted(key for key, tag in sent.items() if tag in tags)


def test_sub_expression_keeps_its_tags_even_against_a_hash_collision(
    spark: SparkSession, data: ClusterData, tagged: dict[Key, str | None]
) -> None:
    assert tag_hash_code("Aa") == tag_hash_code("BB")
    rows = rows_by_key(read(spark, data.namesrv, topic=TAGGED, subExpression="Aa"))
    assert sorted(rows) == with_tags(tagged, "Aa")
    rows = rows_by_key(read(spark, data.namesrv, topic=TAGGED, subExpression="TagA || TagC"))
    assert sorted(rows) == with_tags(tagged, "TagA", "TagC")
    assert {row["tags"] for row in rows.values()} == {"TagA", "TagC"}
    assert read(spark, data.namesrv, topic=TAGGED, subExpression="*").count() == len(tagged)
    with pytest.raises(Exception, match="option subExpression must be"):
        read(spark, data.namesrv, topic=TAGGED, subExpression="TagA ||")


def test_with_pushdown_off_spark_filters_the_tags_on_the_executors(
    spark: SparkSession, data: ClusterData, filtered: dict[str, dict[Key, str | None]]
) -> None:
    sent = filtered[SPARK_FILTERS]
    with filter_pushdown(spark, False):
        df = read(spark, data.namesrv, topic=SPARK_FILTERS).filter(F.col("tags") == "TagA")
        # Spark kept the filter above the scan...
        assert "TagA" in df._jdf.queryExecution().executedPlan().toString()
        assert sorted(rows_by_key(df)) == with_tags(sent, "TagA")
    # ... and the broker handed over every message of the topic.
    assert wait_for_handed_over(data.namesrv, SPARK_FILTERS, len(sent)) == len(sent)


def test_with_pushdown_on_the_broker_filters_the_tags(
    spark: SparkSession, data: ClusterData, filtered: dict[str, dict[Key, str | None]]
) -> None:
    sent = filtered[BROKER_FILTERS]
    with filter_pushdown(spark, True):
        df = read(spark, data.namesrv, topic=BROKER_FILTERS).filter(F.col("tags") == "TagA")
        assert sorted(rows_by_key(df)) == with_tags(sent, "TagA")
    # Only the messages with the tag left the broker.
    wanted = len(with_tags(sent, "TagA"))
    assert 0 < wanted < len(sent)
    assert wait_for_handed_over(data.namesrv, BROKER_FILTERS, wanted) == wanted


def test_filters_on_tags_give_the_same_rows_with_pushdown_off_and_on(
    spark: SparkSession, data: ClusterData, tagged: dict[Key, str | None]
) -> None:
    for enabled in (False, True):
        with filter_pushdown(spark, enabled):
            df = read(spark, data.namesrv, topic=TAGGED).filter(F.col("tags").isin("Aa", "TagC"))
            assert sorted(rows_by_key(df)) == with_tags(tagged, "Aa", "TagC"), enabled
            # The option still goes to the broker, and the filter narrows it.
            df = read(spark, data.namesrv, topic=TAGGED, subExpression="Aa || TagA") \
                .filter(F.col("tags").isin("Aa", "TagC"))  # fmt: skip
            assert sorted(rows_by_key(df)) == with_tags(tagged, "Aa"), enabled


@pytest.mark.usefixtures("with_pushdown")
def test_a_filter_on_tags_is_pushed_down_and_stays_exact(
    spark: SparkSession, data: ClusterData, tagged: dict[Key, str | None]
) -> None:
    df = read(spark, data.namesrv, topic=TAGGED).filter(F.col("tags") == "TagA")
    # Spark handed the filter to the source: no Filter on the tag left above the scan (only
    # the isnotnull(tags) Spark infers from it).
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "Filter" in plan and "TagA" not in plan, plan
    assert sorted(rows_by_key(df)) == with_tags(tagged, "TagA")
    # IN, and a collision the executors must drop ("BB" hashes as "Aa").
    df = read(spark, data.namesrv, topic=TAGGED).filter(F.col("tags").isin("Aa", "TagC"))
    assert sorted(rows_by_key(df)) == with_tags(tagged, "Aa", "TagC")
    # Pushed filters narrow subExpression's tags: the intersection.
    df = read(spark, data.namesrv, topic=TAGGED, subExpression="Aa || TagA") \
        .filter(F.col("tags").isin("Aa", "TagC"))  # fmt: skip
    assert sorted(rows_by_key(df)) == with_tags(tagged, "Aa")
    df = read(spark, data.namesrv, topic=TAGGED, subExpression="TagA") \
        .filter(F.col("tags") == "TagC")  # fmt: skip
    assert df.count() == 0
    # A filter the broker cannot take stays with Spark, and still holds.
    df = read(spark, data.namesrv, topic=TAGGED).filter(F.col("tags").isNull())
    assert "isnull(tags" in df._jdf.queryExecution().executedPlan().toString()
    assert df.count() == len([t for t in tagged.values() if t is None])


def test_the_broker_filters_and_ranges_still_end_where_planned(
    spark: SparkSession, data: ClusterData, tagged: dict[Key, str | None]
) -> None:
    df = read(
        spark,
        data.namesrv,
        topic=TAGGED,
        subExpression="TagA",
        startingOffsets=f'{{"{TAGGED}": {{"broker-a": {{"0": 3}}}}}}',
        endingOffsets=f'{{"{TAGGED}": {{"broker-a": {{"0": 17}}, "broker-b": {{"0": 9}}}}}}',
    )
    inside = {("broker-a", 0): (3, 17), ("broker-b", 0): (0, 9)}
    expected = [key for key in with_tags(tagged, "TagA")
                if inside[key[1:3]][0] <= key[3] < inside[key[1:3]][1]]  # fmt: skip
    assert sorted(rows_by_key(df)) == expected
    # What the broker handed over: only the tag hash codes asked for.
    whole = QueueRange(TAGGED, "broker-a", 0, address(data), 0, TAGGED_PER_QUEUE)
    for tags, handed_over in ((["TagA"], ["TagA"]), (["Aa"], ["Aa", "BB"])):
        rows, pulled = run(pull_all, data.namesrv, whole, tags)
        queue = [(key, tag) for key, tag in tagged.items() if key[1:3] == ("broker-a", 0)]
        assert pulled == sum(1 for _, tag in queue if tag in handed_over)
        assert sorted(row[3] for row in rows) == [k[3] for k, tag in sorted(queue)
                                                  if tag == tags[0]]  # fmt: skip


def address(data: ClusterData) -> str:
    """broker-a's master address."""
    return run(_masters, data.namesrv)["broker-a"]


async def _masters(namesrv: str) -> dict[str, str]:
    async with Admin(namesrv_addr=namesrv) as admin:
        return await admin.masters()


async def pull_all(
    namesrv: str, whole: QueueRange, tags: list[str]
) -> tuple[list[tuple[Any, ...]], int]:
    """Every row of ``whole`` with ``tags``, and how many messages the broker handed over."""
    rows: list[tuple[Any, ...]] = []
    reader = QueueRangeReader(whole, namesrv_addr=namesrv, pull_batch_size=4,
                              fail_on_data_loss=True, tags=tags)  # fmt: skip
    async with reader:
        while (batch := await reader.next_rows()) is not None:
            rows += batch
    return rows, reader.pulled


def test_push_filters_takes_only_what_a_tag_expression_can_carry() -> None:
    reader = BoltMQPushdownReader(read_options({"namesrvAddr": "h:1", "topic": "T",
                                        "subExpression": "A || B || C"}))  # fmt: skip
    kept = [
        EqualTo(("tags",), "A"),
        In(("tags",), ("A", "B")),
        EqualTo(("keys",), "A"),  # another column
        In(("tags",), ("A", None)),  # null is no tag
        EqualTo(("tags",), "A||B"),  # not one tag
        IsNull(("tags",)),
    ]
    left = list(reader.pushFilters(kept))
    assert left == kept[2:] and all(a is b for a, b in zip(left, kept[2:], strict=True))
    assert reader.tags == frozenset({"A"})
    assert reader.pushed == [kept[0], kept[1]]
    reader = BoltMQPushdownReader(read_options({"namesrvAddr": "h:1", "topic": "T"}))
    assert list(reader.pushFilters([EqualTo(("tags",), "X"), EqualTo(("tags",), "Y")])) == []
    assert reader.tags == frozenset()  # X and Y at once: nothing, and no pull is made
    assert [type(p).__name__ for p in reader.partitions()] == ["InputPartition"]


def test_the_read_planner_gets_the_reader_without_push_filters() -> None:
    # The module Spark's read planner runs as; a PySpark that moved it fails here by name.
    assert importlib.util.find_spec(_READ_PLANNER) is not None
    source = BoltMQDataSource({"namesrvAddr": "h:1", "topic": "T"})
    assert type(source.reader(SCHEMA)) is BoltMQPushdownReader
    # Called from a function of the planner's module (the reads above with pushdown off go
    # through the real one).
    planner: dict[str, Any] = {"__name__": _READ_PLANNER, "source": source, "SCHEMA": SCHEMA}
    exec("def plan():\n    return source.reader(SCHEMA)\n", planner)
    assert type(planner["plan"]()) is BoltMQReader
