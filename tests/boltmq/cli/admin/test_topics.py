"""topicList, topicRoute, topicStatus, updateTopic, deleteTopic, updateTopicPerm."""

from __future__ import annotations

from typing import Any

import pytest

from tests.boltmq.cli.admin.helpers import admin_json, make_topic, run_admin, send_per_queue


def test_topic_status_json_and_table(
    cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = unique("StatusT")
    broker_name = make_topic(cluster.namesrv, topic, 3)
    stamps = send_per_queue(cluster.namesrv, topic, broker_name, [2, 0, 5])
    rows = admin_json(capsys, cluster.namesrv, "topicStatus", "-t", topic)
    last = [row.pop("lastUpdated") for row in rows]
    assert rows == [
        {"brokerName": broker_name, "queueId": 0, "minOffset": 0, "maxOffset": 2},
        {"brokerName": broker_name, "queueId": 1, "minOffset": 0, "maxOffset": 0},
        {"brokerName": broker_name, "queueId": 2, "minOffset": 0, "maxOffset": 5},
    ]
    assert last[1] == 0
    # A store timestamp lies between the send's start and the moment its answer arrived.
    assert stamps[0] - 10_000 < last[0] <= stamps[1]
    assert stamps[2] - 10_000 < last[2] <= stamps[-1]

    code, out, _ = run_admin(capsys, cluster.namesrv, "topicStatus", "-t", topic)
    assert code == 0
    for title in ("Broker Name", "QID", "Min Offset", "Max Offset", "Last Updated"):
        assert title in out
    assert out.count(broker_name) == 3


def test_topic_status_of_an_unknown_topic(cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_admin(capsys, cluster.namesrv, "topicStatus", "-t", "NoSuchTopic_x1")
    assert code == 1 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("boltmq admin topicStatus: no route for topic NoSuchTopic_x1")
    assert "topicList" in err
