"""failOnDataLoss against real retention: broker-r deletes its old commit-log files, so its
queue's min offset is above 0 and a read from offset 0 asks for deleted messages.

Also the other end: a starting offset past the max (messages never written), and an ending
offset past the max (always refused: a batch read reads what is written).
"""

from __future__ import annotations

import json

import pytest
from pyspark.sql import SparkSession

from .helpers import (
    AGED,
    ORDERS,
    ClusterData,
    queue_offsets,
    read,
    rows_by_key,
    run,
)

# Room for the run's first Spark job and cluster start on a busy machine.
pytestmark = pytest.mark.timeout(300)


def test_a_start_below_the_min_offset_fails_naming_the_queue_and_offsets(
    spark: SparkSession, data: ClusterData, aged_min: int
) -> None:
    starting = json.dumps({AGED: {"broker-r": {"0": 0}}})
    with pytest.raises(Exception) as caught:
        read(spark, data.namesrv, topic=AGED, startingOffsets=starting).collect()
    text = str(caught.value)
    assert "DataLossError" in text
    assert (
        f"topic {AGED}, broker broker-r, queue 0: startingOffsets 0 is below the queue's min "
        f"offset {aged_min}"
    ) in text
    assert "failOnDataLoss" in text


def test_without_fail_on_data_loss_the_read_starts_at_the_min_offset(
    spark: SparkSession, data: ClusterData, aged_min: int
) -> None:
    starting = json.dumps({AGED: {"broker-r": {"0": 0}}})
    df = read(spark, data.namesrv, topic=AGED, startingOffsets=starting, failOnDataLoss="false")
    rows = rows_by_key(df)
    # Retention only ever moves the min offset up: read it again after the read.
    low, high = run(queue_offsets, data.namesrv, AGED)[("broker-r", 0)]
    offsets = sorted(k[3] for k in rows)
    assert offsets == list(range(offsets[0], high))
    assert aged_min <= offsets[0] <= low
    for (_, _, _, offset), row in rows.items():
        assert row["body"].startswith(b"%05d." % offset)
    # earliest is the min offset: the same rows, no error.
    assert read(spark, data.namesrv, topic=AGED).count() == high - low


def test_a_start_past_the_max_offset_is_data_loss_too(
    spark: SparkSession, data: ClusterData
) -> None:
    starting = json.dumps({ORDERS: {"broker-b": {"2": 50}}})
    with pytest.raises(Exception, match="startingOffsets 50 is past the queue's max offset 1"):
        read(spark, data.namesrv, topic=ORDERS, startingOffsets=starting).collect()
    df = read(spark, data.namesrv, topic=ORDERS, startingOffsets=starting,
              failOnDataLoss="false")  # fmt: skip
    rows = rows_by_key(df)
    assert sorted(rows) == sorted(
        s.key() for s in data.orders if (s.broker_name, s.queue_id) != ("broker-b", 2)
    )


def test_an_end_past_the_max_offset_is_refused_either_way(
    spark: SparkSession, data: ClusterData
) -> None:
    ending = json.dumps({ORDERS: {"broker-a": {"0": 8}}})
    for fail in ("true", "false"):
        with pytest.raises(Exception, match="endingOffsets 8 of topic PipeOrders, broker "
                           "broker-a, queue 0 is past the queue's max offset 7"):  # fmt: skip
            read(spark, data.namesrv, topic=ORDERS, endingOffsets=ending,
                 failOnDataLoss=fail).collect()  # fmt: skip
