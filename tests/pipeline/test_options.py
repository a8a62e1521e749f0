"""Options: checked and typed, every refusal naming the option (pure checks first, then the
same refusals as Spark shows them at load())."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import SparkSession

from pipeline.errors import OptionError
from pipeline.options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    ReadOptions,
    StreamOptions,
    WriteOptions,
    check_read_options,
    read_options,
    stream_options,
    write_options,
)

from .helpers import ORDERS, ClusterData, read

BASE = {"namesrvaddr": "127.0.0.1:9876", "topic": "Orders"}

# Room for the run's first Spark job and cluster start on a busy machine.
pytestmark = pytest.mark.timeout(300)


def test_defaults_and_spark_s_lower_cased_names() -> None:
    assert read_options(BASE) == ReadOptions(
        namesrv_addr="127.0.0.1:9876", topics=("Orders",),
        starting=OffsetSpec("startingOffsets", EARLIEST),
        ending=OffsetSpec("endingOffsets", LATEST),
        min_partitions=None, pull_batch_size=32, fail_on_data_loss=True,
    )  # fmt: skip
    given = {
        "namesrvAddr": "a:1;b:2", "TOPICS": "A, B", "startingoffsets": "latest",
        "endingOffsets": "LATEST", "minpartitions": "8", "pullBatchSize": "5",
        "failondataloss": "False",
    }  # fmt: skip
    options = read_options(given)
    assert options.namesrv_addr == "a:1;b:2"
    assert options.topics == ("A", "B")
    assert options.starting.default == LATEST and options.ending.default == LATEST
    assert (options.min_partitions, options.pull_batch_size) == (8, 5)
    assert options.fail_on_data_loss is False
    assert write_options({"namesrvaddr": "h:1"}) == WriteOptions("h:1", None)
    assert write_options({**BASE}).topic == "Orders"


def test_json_offsets() -> None:
    spec = {"Orders": {"broker-a": {"0": 5, "1": -2}, "broker-b": {"3": -1}}}
    options = read_options({**BASE, "startingoffsets": json.dumps(spec)})
    assert options.starting.queues == {
        ("Orders", "broker-a", 0): 5, ("Orders", "broker-a", 1): EARLIEST,
        ("Orders", "broker-b", 3): LATEST,
    }  # fmt: skip
    assert options.starting.requested("Orders", "broker-b", 3) == LATEST
    assert options.starting.requested("Orders", "broker-b", 4) == EARLIEST  # the default


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingOffset": "latest"},
         "unknown boltmq option 'startingOffset'; a batch read takes: "
         "namesrvAddr, topic, topics, startingOffsets, endingOffsets, startingTimestamp, "
         "endingTimestamp, subExpression, minPartitions, pullBatchSize, failOnDataLoss"),
        ({"path": "x"}, "unknown boltmq option 'path' (boltmq takes no path"),
        ({"namesrvaddr": " "}, "option namesrvAddr is required"),
        ({"namesrvaddr": "localhost"}, "option namesrvAddr: 'localhost' is not host:port"),
        ({"topics": "A"}, "give either topic or topics, not both"),
        ({"topic": "bad topic"}, "option topic: 'bad topic' is not a topic name"),
        ({"topic": None, "topics": "A,,A"}, "option topics names a topic twice"),
        ({"topic": None}, "a read needs option topic (one topic) or topics"),
        ({"minpartitions": "abc"},
         "option minPartitions must be a positive whole number, not 'abc'"),
        ({"pullbatchsize": "0"}, "option pullBatchSize must be a positive whole number, not '0'"),
        ({"failondataloss": "maybe"}, "option failOnDataLoss must be true or false, not 'maybe'"),
        ({"startingoffsets": "{oops"}, "option startingOffsets must be earliest, latest or JSON"),
        ({"endingoffsets": "[1]"}, "option endingOffsets must be earliest, latest or JSON"),
        ({"startingoffsets": '{"Other": {}}'},
         "option startingOffsets names topic 'Other', which this read does not read"),
        ({"startingoffsets": '{"Orders": {"b": {"x": 1}}}'},
         "option startingOffsets: queue id 'x' is not a number"),
        ({"endingoffsets": '{"Orders": {"b": {"0": -3}}}'},
         "option endingOffsets: offset -3 of Orders/b/0 must be a whole number >= 0"),
        ({"endingoffsets": '{"Orders": {"b": {"0": true}}}'},
         "option endingOffsets: offset True of Orders/b/0"),
    ],
)  # fmt: skip
def test_bad_read_options_are_refused_by_name(options: dict[str, str | None], message: str) -> None:
    given = {k: v for k, v in {**BASE, **options}.items() if v is not None}
    with pytest.raises(OptionError) as caught:
        read_options(given)
    assert message in str(caught.value)


def test_stream_options_defaults_and_values() -> None:
    assert stream_options(BASE) == StreamOptions(
        namesrv_addr="127.0.0.1:9876", topics=("Orders",),
        starting=OffsetSpec("startingOffsets", LATEST), max_offsets_per_trigger=None,
        group_id=None, min_partitions=None, pull_batch_size=32, fail_on_data_loss=True,
    )  # fmt: skip
    options = stream_options({
        **BASE, "maxoffsetspertrigger": "500", "groupid": " cg-1 ", "startingoffsets": "earliest",
        "minpartitions": "4", "pullbatchsize": "8", "failondataloss": "false",
    })  # fmt: skip
    assert (options.max_offsets_per_trigger, options.group_id) == (500, "cg-1")
    assert options.starting.default == EARLIEST
    assert (options.min_partitions, options.pull_batch_size) == (4, 8)
    assert options.fail_on_data_loss is False


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"endingoffsets": "latest"}, "option endingOffsets applies to batch reads only; a "
         "streaming read takes: namesrvAddr, topic, topics, startingOffsets, "
         "startingTimestamp, subExpression, maxOffsetsPerTrigger, minOffsetsPerTrigger, "
         "maxTriggerDelay, groupId, minPartitions, pullBatchSize, failOnDataLoss"),
        ({"endingtimestamp": "5"}, "option endingTimestamp applies to batch reads only"),
        ({"minoffsetspertrigger": "-1"},
         "option minOffsetsPerTrigger must be a positive whole number, not '-1'"),
        ({"maxtriggerdelay": "soon"},
         "option maxTriggerDelay must be a duration such as 500ms, 30s, 5m or 1h, not 'soon'"),
        ({"maxOffsetPerTrigger": "5"}, "unknown boltmq option 'maxOffsetPerTrigger'; a "
         "streaming read takes"),
        ({"maxoffsetspertrigger": "0"},
         "option maxOffsetsPerTrigger must be a positive whole number, not '0'"),
        ({"groupid": "a b"}, "option groupId: 'a b' is not a group name"),
        ({"groupid": ""}, "option groupId is empty"),
    ],
)  # fmt: skip
def test_bad_stream_options_are_refused_by_name(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError) as caught:
        stream_options({**BASE, **options})
    assert message in str(caught.value)


def test_options_of_one_kind_of_read_are_refused_for_the_other() -> None:
    for name in ("maxOffsetsPerTrigger", "groupId"):
        with pytest.raises(OptionError, match=f"option {name} applies to streaming reads only; "
                           "a batch read takes: namesrvAddr"):  # fmt: skip
            read_options({**BASE, name.lower(): "5"})
    # Before Spark says which kind of read it is (at load()), either kind's options pass, but
    # not a mix, nor an unknown one, nor a bad value.
    check_read_options({**BASE, "endingoffsets": "latest"})
    check_read_options({**BASE, "maxoffsetspertrigger": "5", "groupid": "g"})
    with pytest.raises(OptionError, match="option endingOffsets applies to batch reads only "
                       "and option maxOffsetsPerTrigger to streaming reads only"):  # fmt: skip
        check_read_options({**BASE, "endingoffsets": "latest", "maxoffsetspertrigger": "5"})
    with pytest.raises(OptionError, match=r"unknown boltmq option 'x'; a batch read takes: .*; "
                       r"a streaming read takes: .*maxOffsetsPerTrigger"):  # fmt: skip
        check_read_options({**BASE, "x": "1"})
    with pytest.raises(OptionError, match="option groupId: 'a/b' is not a group name"):
        check_read_options({**BASE, "groupid": "a/b"})


def test_read_options_are_refused_for_a_write() -> None:
    with pytest.raises(OptionError, match="option startingOffsets applies to reads only; a "
                       "write takes: namesrvAddr, topic"):  # fmt: skip
        write_options({**BASE, "startingoffsets": "earliest"})
    with pytest.raises(OptionError, match="unknown boltmq option 'tpoic'; a write takes"):
        write_options({**BASE, "tpoic": "x"})


def test_spark_shows_the_refusal_at_load(spark: SparkSession, data: ClusterData) -> None:
    with pytest.raises(Exception) as caught:
        read(spark, data.namesrv, topic=ORDERS, startingOffset="latest")
    text = str(caught.value)
    # Spark lower-cases option names before the source sees them.
    assert "OptionError: unknown boltmq option 'startingoffset'; a batch read takes: " in text
    assert "startingOffsets" in text
    with pytest.raises(Exception, match="option pullBatchSize must be a positive whole number"):
        read(spark, data.namesrv, topic=ORDERS, pullBatchSize="-1")


def test_spark_refuses_an_option_of_the_other_kind_of_read(
    spark: SparkSession, data: ClusterData
) -> None:
    # Spark does not say at load() which kind of read it is: the refusal comes when it asks
    # for the batch reader (the first action) or the stream reader (start()).
    df = read(spark, data.namesrv, topic=ORDERS, maxOffsetsPerTrigger="5")
    with pytest.raises(Exception, match="option maxOffsetsPerTrigger applies to streaming "
                       "reads only"):  # fmt: skip
        df.collect()
    stream = spark.readStream.format("boltmq").option("namesrvAddr", data.namesrv) \
        .option("topic", ORDERS).option("endingOffsets", "latest").load()  # fmt: skip
    with pytest.raises(Exception, match="option endingOffsets applies to batch reads only"):
        query = stream.writeStream.format("memory").queryName("refused_stream").start()
        try:
            query.awaitTermination(60)
        finally:
            query.stop()


def test_queues_and_topics_are_checked_against_the_cluster(
    spark: SparkSession, data: ClusterData
) -> None:
    with pytest.raises(Exception, match="topic NoSuchTopic does not exist"):
        read(spark, data.namesrv, topic="NoSuchTopic").collect()
    starting = json.dumps({ORDERS: {"broker-x": {"0": 1}}})
    with pytest.raises(Exception) as caught:
        read(spark, data.namesrv, topic=ORDERS, startingOffsets=starting).collect()
    assert (
        f"option startingOffsets names queue 0 of broker broker-x in topic {ORDERS}, which has "
        "no such queue; its queues: broker-a/0, broker-a/1, broker-a/2, broker-a/3, "
        "broker-b/0, broker-b/1, broker-b/2"
    ) in str(caught.value)
    ending = json.dumps({ORDERS: {"broker-a": {"0": 1}}})
    starting = json.dumps({ORDERS: {"broker-a": {"0": 3}}})
    with pytest.raises(Exception, match=r"startingOffsets 3 \(3\) is after endingOffsets 1"):
        read(spark, data.namesrv, topic=ORDERS, startingOffsets=starting,
             endingOffsets=ending).collect()  # fmt: skip
