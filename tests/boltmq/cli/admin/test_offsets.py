"""consumerProgress, resetOffsetByTime (by time and --offset), skipAccumulatedMessage.

The resets move a live push consumer: it receives again from the new offsets.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest

from client import BlockingPushConsumer, ConsumeConcurrentlyStatus
from protocol.bodies import ConsumeFromWhere
from protocol.message import MessageExt
from tests.boltmq.cli.admin.helpers import (
    admin_json,
    commit_offsets,
    make_topic,
    run_admin,
    send_per_queue,
    wait_for,
)


def test_consumer_progress_json_and_table(
    cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, group = unique("ProgressT"), unique("progress-cg")
    broker = make_topic(cluster.namesrv, topic, 3)
    stamps = send_per_queue(cluster.namesrv, topic, broker, [2, 0, 5])
    commit_offsets(cluster.namesrv, cluster.broker, group, topic, [1, 0, 5])
    status = admin_json(capsys, cluster.namesrv, "topicStatus", "-t", topic)

    progress = admin_json(capsys, cluster.namesrv, "consumerProgress", "-g", group)
    first_time = progress["queues"][0].pop("lastTimestamp")
    assert stamps[0] - 10_000 < first_time <= stamps[0]  # the store time of offset 0
    assert progress == {
        "group": group,
        "consumeTps": 0.0,
        "diffTotal": 1,
        "queues": [
            {"topic": topic, "brokerName": broker, "queueId": 0, "brokerOffset": 2,
             "consumerOffset": 1, "clientIp": "", "diff": 1},
            {"topic": topic, "brokerName": broker, "queueId": 1, "brokerOffset": 0,
             "consumerOffset": 0, "clientIp": "", "diff": 0, "lastTimestamp": 0},
            {"topic": topic, "brokerName": broker, "queueId": 2, "brokerOffset": 5,
             "consumerOffset": 5, "clientIp": "", "diff": 0,
             "lastTimestamp": status[2]["lastUpdated"]},
        ],
    }  # fmt: skip
    assert admin_json(capsys, cluster.namesrv, "consumerProgress", "-g", group, "-t", topic) == {
        **progress, "queues": [{**progress["queues"][0], "lastTimestamp": first_time},
                               *progress["queues"][1:]],
    }  # fmt: skip

    code, out, _ = run_admin(capsys, cluster.namesrv, "consumerProgress", "-g", group)
    assert code == 0
    for title in ("Topic", "Broker Name", "QID", "Broker Offset", "Consumer Offset", "Client IP",
                  "Diff", "LastTime", "Consume TPS: 0.00", "Diff Total: 1"):  # fmt: skip
        assert title in out


def test_consumer_progress_of_an_unknown_group(
    cluster: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_admin(capsys, cluster.namesrv, "consumerProgress", "-g", "no-such-cg")
    assert (code, out) == (1, "")
    assert err == (
        "boltmq admin consumerProgress: consumer group no-such-cg has no offsets on any broker; "
        "check the group name (a group that never committed an offset has no progress)\n"
    )


class Received:
    """What a push consumer's listener got: bodies counted, under a lock (worker threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bodies: Counter[str] = Counter()

    def __call__(self, messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        with self.lock:
            self.bodies.update(m.body.decode() for m in messages)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def count(self, body: str) -> int:
        with self.lock:
            return self.bodies[body]


def test_resets_move_a_live_push_consumer(
    cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    topic, group = unique("ResetT"), unique("reset-cg")
    broker = make_topic(cluster.namesrv, topic, 2)
    send_per_queue(cluster.namesrv, topic, broker, [2, 2])  # offsets 0, 1 of each queue
    status = admin_json(capsys, cluster.namesrv, "topicStatus", "-t", topic)
    first_batch_end = max(row["lastUpdated"] for row in status)
    # A reset by time takes, per queue, the message stored nearest that time (RocketMQ's
    # rule): a time just before the second batch, seconds after the first, names offset 2.
    wait_for(lambda: int(time.time() * 1000), lambda now: now > first_batch_end + 3000, 10)
    reset_time = int(time.time() * 1000) - 1
    send_per_queue(cluster.namesrv, topic, broker, [2, 2], first=2)  # offsets 2, 3
    everything = [f"{q}-{o}" for q in range(2) for o in range(4)]

    received = Received()
    consumer = BlockingPushConsumer(
        group, received, namesrv_addr=cluster.namesrv,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        persist_consumer_offset_interval=0.2, offset_store_dir=str(tmp_path),
    )  # fmt: skip
    consumer.subscribe(topic)
    with consumer:
        wait_for(lambda: [received.count(b) for b in everything], lambda c: c == [1] * 8)
        client_ip = consumer.consumer.instance.client_id.split("@")[0]
        progress = wait_for(
            lambda: admin_json(capsys, cluster.namesrv, "consumerProgress", "-g", group),
            lambda p: p["diffTotal"] == 0,
        )
        assert [(q["queueId"], q["consumerOffset"], q["clientIp"]) for q in progress["queues"]
                if q["topic"] == topic] == [(0, 4, client_ip), (1, 4, client_ip)]  # fmt: skip

        # By time: every queue goes back to the first message of the second batch.
        rows = admin_json(capsys, cluster.namesrv, "resetOffsetByTime", "-g", group, "-t", topic,
                          "-s", str(reset_time))  # fmt: skip
        assert rows == [
            {"topic": topic, "brokerName": broker, "queueId": 0, "offset": 2},
            {"topic": topic, "brokerName": broker, "queueId": 1, "offset": 2},
        ]
        again = ["0-2", "0-3", "1-2", "1-3"]
        wait_for(lambda: [received.count(b) for b in again], lambda c: c == [2] * 4)
        assert [received.count(b) for b in ("0-0", "0-1", "1-0", "1-1")] == [1] * 4

        # An explicit offset on one queue.
        rows = admin_json(capsys, cluster.namesrv, "resetOffsetByTime", "-g", group, "-t", topic,
                          "--offset", "1", "-q", "1")  # fmt: skip
        assert rows == [{"topic": topic, "brokerName": broker, "queueId": 1, "offset": 1}]
        wait_for(lambda: [received.count(b) for b in ("1-1", "1-2", "1-3")],
                 lambda c: c == [2, 3, 3])  # fmt: skip
        assert received.count("1-0") == 1 and received.count("0-2") == 2

        # skipAccumulatedMessage on a live group: every queue at its end (the table mode).
        code, out, _ = run_admin(capsys, cluster.namesrv, "skipAccumulatedMessage", "-g", group,
                                 "-t", topic)  # fmt: skip
        assert code == 0
        for title in ("Topic", "Broker Name", "QID", "Offset"):
            assert title in out
        progress = wait_for(
            lambda: admin_json(capsys, cluster.namesrv, "consumerProgress", "-g", group,
                               "-t", topic),
            lambda p: p["diffTotal"] == 0,
        )  # fmt: skip
        assert [q["consumerOffset"] for q in progress["queues"]] == [4, 4]


def test_skip_accumulated_message_of_an_offline_group(
    cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, group = unique("SkipT"), unique("skip-cg")
    broker = make_topic(cluster.namesrv, topic, 2)
    send_per_queue(cluster.namesrv, topic, broker, [3, 1])
    commit_offsets(cluster.namesrv, cluster.broker, group, topic, [0, 0])
    rows = admin_json(capsys, cluster.namesrv, "skipAccumulatedMessage", "-g", group, "-t", topic)
    assert rows == [
        {"topic": topic, "brokerName": broker, "queueId": 0, "offset": 3},
        {"topic": topic, "brokerName": broker, "queueId": 1, "offset": 1},
    ]
    progress = admin_json(capsys, cluster.namesrv, "consumerProgress", "-g", group)
    assert progress["diffTotal"] == 0
    assert [q["consumerOffset"] for q in progress["queues"]] == [3, 1]


def test_reset_refusals(cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str]) -> None:
    topic, group = unique("RefuseT"), unique("refuse-cg")
    broker = make_topic(cluster.namesrv, topic, 1)
    send_per_queue(cluster.namesrv, topic, broker, [2])
    code, _, err = run_admin(capsys, cluster.namesrv, "resetOffsetByTime", "-g", group, "-t",
                             topic, "--offset", "9")  # fmt: skip
    assert code == 1
    assert "offset 9 of" in err and "outside the queue's [0, 2]" in err
    assert err.count("\n") == 1
    code, _, err = run_admin(capsys, cluster.namesrv, "resetOffsetByTime", "-g", group, "-t",
                             topic)  # fmt: skip
    assert code == 2 and "give either -s TIME or --offset N" in err
    code, _, err = run_admin(capsys, cluster.namesrv, "resetOffsetByTime", "-g", group, "-t",
                             topic, "-s", "yesterday")  # fmt: skip
    assert code == 2 and "-s 'yesterday' is not a time" in err
