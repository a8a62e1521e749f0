"""Spark reads what the official C++ client sent: a batch read of a topic whose queues sit on
two brokers gives every message once, with its body, keys, tags, properties and queue offset.

The cluster is launched from a spec (a registry and two masters, loopback, free ports); the
Spark session is the test run's one (local[2]), shared with tests/pipeline.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.actors.broker.ha.helpers import free_port_pair
from tests.pipeline.helpers import (
    ClusterThread,
    create_topic,
    read,
    run,
    spark_session,
    wait_for_brokers,
)

from .cpp_client import rocketmq, send_sync_with_route

# Room for the run's first Spark job and the cluster's start on a busy machine.
pytestmark = pytest.mark.timeout(300)

MESSAGES = 40


def two_broker_spec(root: Path) -> Path:
    registry, broker_a, broker_b = (free_port_pair() for _ in range(3))
    nodes = "".join(
        f"""
[[broker.{name}.node]]
brokerId = 0
brokerRole = "ASYNC_MASTER"
listenPort = {port}
haListenPort = {port + 1}
"""
        for name, port in (("broker-a", broker_a), ("broker-b", broker_b))
    )
    path = root / "cluster.toml"
    path.write_text(
        f"""
dataDir = "data"
logDir = "logs"
[defaults]
fastPortEnable = false
bindAddress = "127.0.0.1"
mapedFileSizeCommitLog = {4 << 20}
[[registry]]
listenPort = {registry}
bindAddress = "127.0.0.1"
{nodes}"""
    )
    return path


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    # The run's one session (getOrCreate); tests/pipeline's fixture stops it at the end.
    return spark_session()


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    thread = ClusterThread(two_broker_spec(tmp_path_factory.mktemp("cpp-spark")))
    cluster = thread.start()
    try:
        run(wait_for_brokers, cluster.namesrv_addr, {"broker-a", "broker-b"})
        yield cluster.namesrv_addr
    finally:
        thread.stop()


def send_with_cpp_client(namesrv: str, topic: str) -> dict[str, dict[str, Any]]:
    """``MESSAGES`` messages from the C++ producer; what each carried, by its msgId."""
    producer = rocketmq.Producer(f"PG_{uuid.uuid4().hex[:8]}")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    sent: dict[str, dict[str, Any]] = {}
    try:
        for i in range(MESSAGES):
            body = f"cpp message {i} \u2713".encode()
            message = rocketmq.Message(topic)
            message.set_tags(("TagA", "TagB", "TagC")[i % 3])
            message.set_keys(f"key-{i}")
            message.set_body(body)
            message.set_property("ORIGIN", f"cpp-{i}")
            result = send_sync_with_route(producer, message)
            assert result.status == rocketmq.SendStatus.OK
            msg_id = result.msg_id.decode() if isinstance(result.msg_id, bytes) else result.msg_id
            sent[msg_id] = {
                "body": body, "tags": ("TagA", "TagB", "TagC")[i % 3], "keys": f"key-{i}",
                "origin": f"cpp-{i}", "queueOffset": result.offset,
            }  # fmt: skip
    finally:
        producer.shutdown()
    return sent


def test_a_batch_read_gives_exactly_what_the_cpp_client_sent(
    spark: SparkSession, namesrv: str
) -> None:
    topic = f"CppSpark_{uuid.uuid4().hex[:8]}"
    run(create_topic, namesrv, topic, {"broker-a": 3, "broker-b": 2})
    sent = send_with_cpp_client(namesrv, topic)
    rows = [row.asDict() for row in read(spark, namesrv, topic=topic).collect()]

    assert len(rows) == MESSAGES
    by_id = {row["msgId"]: row for row in rows}
    assert set(by_id) == set(sent)  # every message once, none else
    for msg_id, expected in sent.items():
        row = by_id[msg_id]
        assert row["topic"] == topic
        assert bytes(row["body"]) == expected["body"]
        assert (row["tags"], row["keys"]) == (expected["tags"], expected["keys"])
        assert row["properties"]["ORIGIN"] == expected["origin"]
        assert row["queueOffset"] == expected["queueOffset"]
        assert row["reconsumeTimes"] == 0 and row["storeTimestamp"] >= row["bornTimestamp"]
    # Spread over every queue of both brokers, each queue's offsets dense from 0.
    queues = Counter((row["brokerName"], row["queueId"]) for row in rows)
    assert set(queues) == {("broker-a", q) for q in range(3)} | {("broker-b", q) for q in range(2)}
    for (broker, queue_id), count in queues.items():
        offsets = sorted(
            r["queueOffset"] for r in rows if (r["brokerName"], r["queueId"]) == (broker, queue_id)
        )
        assert offsets == list(range(count))
