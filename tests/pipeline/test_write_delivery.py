"""The delayLevel and deliverTimeMs columns: a delayed row is stored in its topic once its
delay is over, a timed row once its time has come; bad values fail the task by name."""

from __future__ import annotations

import time

import pytest
from pyspark.sql import SparkSession

from .helpers import ClusterData, create_topic, queue_offsets, read, run, wait_for
from .test_write import write_fails

pytestmark = pytest.mark.timeout(300)

SCHEMA = "body binary, delayLevel int, deliverTimeMs bigint"


def test_delayed_and_timed_rows_arrive_after_their_time(
    spark: SparkSession, data: ClusterData
) -> None:
    topic = "PipeWriteDelivery"
    run(create_topic, data.namesrv, topic, {"broker-a": 2})
    deliver_at = int(time.time() * 1000) + 2000
    rows = [(f"now {i}".encode(), None, None) for i in range(5)]
    rows += [(f"level 1 {i}".encode(), 1, None) for i in range(5)]  # 1 s, the first level
    rows += [(f"timed {i}".encode(), 0, deliver_at) for i in range(5)]
    (spark.createDataFrame(rows, SCHEMA).repartition(2).write.format("boltmq")
     .mode("append").option("namesrvAddr", data.namesrv).option("topic", topic).save())  # fmt: skip

    def delivered() -> bool:
        offsets = run(queue_offsets, data.namesrv, topic)
        return sum(high for _, high in offsets.values()) == len(rows)

    wait_for(delivered, "the delayed and timed rows to be delivered", timeout=120)
    found = {bytes(r["body"]): r for r in read(spark, data.namesrv, topic=topic).collect()}
    assert set(found) == {row[0] for row in rows}
    for body, row in found.items():
        born = row["bornTimestamp"].timestamp() * 1000
        stored = row["storeTimestamp"].timestamp() * 1000
        if body.startswith(b"level 1"):
            assert stored - born >= 1000, (body, stored - born)
        elif body.startswith(b"timed"):
            assert stored >= deliver_at, (body, stored, deliver_at)


def test_bad_delivery_values_fail_the_task_by_name(
    spark: SparkSession, data: ClusterData
) -> None:
    namesrv, topic = data.namesrv, "PipeWriteDelivery"
    text = write_fails(spark, namesrv, [(b"x", -1, None)], SCHEMA, topic=topic)
    assert "row 1 of this partition (topic PipeWriteDelivery): delayLevel -1 is negative" in text
    text = write_fails(spark, namesrv, [(b"x", 2, 1_900_000_000_000)], SCHEMA, topic=topic)
    assert "give delayLevel or deliverTimeMs, not both" in text
    text = write_fails(spark, namesrv, [(b"x", "2")], "body binary, delayLevel string",
                       topic=topic)  # fmt: skip
    assert "column delayLevel must be int or bigint, not string" in text
