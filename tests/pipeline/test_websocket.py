"""The data source over websocket: namesrvAddr ws://host:port/ reads and writes the same
messages as over TCP (the client then reaches the brokers over websocket too)."""

from __future__ import annotations

from collections import Counter

import pytest
from pyspark.sql import SparkSession

from .helpers import ORDERS, ClusterData, create_topic, read, rows_by_key, run

# Room for the run's first Spark job and cluster start on a busy machine.
pytestmark = pytest.mark.timeout(300)


def test_a_read_over_websocket_gives_the_rows_a_tcp_read_gives(
    spark: SparkSession, data: ClusterData
) -> None:
    over_tcp = rows_by_key(read(spark, data.namesrv, topic=ORDERS))
    over_websocket = rows_by_key(read(spark, data.namesrv_websocket, topic=ORDERS))
    assert len(over_websocket) == len(data.orders)
    assert over_websocket == over_tcp


def test_rows_written_over_websocket_read_back_over_tcp(
    spark: SparkSession, data: ClusterData
) -> None:
    topic = "PipeWebsocketWrite"
    run(create_topic, data.namesrv, topic, {"broker-a": 2, "broker-b": 1})
    rows = [(f"ws {i}".encode(), ("red", "blue")[i % 2]) for i in range(120)]
    df = spark.createDataFrame(rows, "body binary, tags string").repartition(2)
    df.write.format("boltmq").mode("append").option("namesrvAddr", data.namesrv_websocket) \
        .option("topic", topic).save()  # fmt: skip
    found = read(spark, data.namesrv, topic=topic).collect()
    assert Counter((bytes(row["body"]), row["tags"]) for row in found) == Counter(rows)
