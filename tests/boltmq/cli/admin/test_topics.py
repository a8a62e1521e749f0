"""topicList, topicRoute, topicStatus, updateTopic, deleteTopic, updateTopicPerm."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.boltmq.cli.admin.helpers import (
    admin_json,
    make_topic,
    run_admin,
    send_per_queue,
    wait_for,
)


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


def _route(capsys: pytest.CaptureFixture[str], namesrv: str, topic: str) -> Any:
    return admin_json(capsys, namesrv, "topicRoute", "-t", topic)


def test_topic_list_route_update_perm_delete(
    cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = unique("LifeT")
    done = admin_json(capsys, cluster.namesrv, "updateTopic", "-b", cluster.broker, "-t", topic,
                      "-r", "2", "-w", "3")  # fmt: skip
    assert done == {"topic": topic, "readQueueNums": 2, "writeQueueNums": 3, "perm": 6,
                    "order": False, "brokers": [cluster.broker]}  # fmt: skip
    route = wait_for(
        lambda: run_admin(capsys, cluster.namesrv, "topicRoute", "-t", topic, "--json"),
        lambda result: result[0] == 0,
    )
    broker = cluster.found["broker_name"]
    assert json.loads(route[1]) == {
        "brokerDatas": [{"brokerAddrs": {"0": cluster.broker}, "brokerName": broker,
                         "cluster": "DefaultCluster"}],
        "filterServerTable": {},
        "queueDatas": [{"brokerName": broker, "perm": 6, "readQueueNums": 2, "topicSynFlag": 0,
                        "topicSysFlag": 0, "writeQueueNums": 3}],
    }  # fmt: skip
    assert topic in admin_json(capsys, cluster.namesrv, "topicList")
    code, out, _ = run_admin(capsys, cluster.namesrv, "topicRoute", "-t", topic)
    assert code == 0
    for title in ("Cluster", "Broker Name", "BID", "Addr", "Read Queues", "Write Queues", "Perm",
                  "RW-"):  # fmt: skip
        assert title in out

    changed = admin_json(capsys, cluster.namesrv, "updateTopicPerm", "-c", "DefaultCluster",
                         "-t", topic, "-p", "4")  # fmt: skip
    assert changed == [{"brokerName": broker, "address": cluster.broker, "oldPerm": 6, "perm": 4}]
    wait_for(lambda: _route(capsys, cluster.namesrv, topic)["queueDatas"][0]["perm"],
             lambda perm: perm == 4)  # fmt: skip
    assert _route(capsys, cluster.namesrv, topic)["queueDatas"][0]["readQueueNums"] == 2

    done = admin_json(capsys, cluster.namesrv, "deleteTopic", "-c", "DefaultCluster", "-t", topic)
    assert done == {"topic": topic, "cluster": "DefaultCluster"}
    assert topic not in admin_json(capsys, cluster.namesrv, "topicList")
    code, _, err = run_admin(capsys, cluster.namesrv, "deleteTopic", "-c", "DefaultCluster",
                             "-t", topic)  # fmt: skip
    assert code == 1 and f"no route for topic {topic}" in err

    code, out, _ = run_admin(capsys, cluster.namesrv, "topicList")
    assert code == 0 and "Topic" in out


def test_update_topic_refusals(cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_admin(capsys, cluster.namesrv, "updateTopic", "-t", "T", "-p", "5",
                             "-c", "DefaultCluster")  # fmt: skip
    assert code == 2 and "invalid choice: 5" in err
    code, _, err = run_admin(capsys, cluster.namesrv, "updateTopic", "-t", "T")
    assert code == 2 and "give either -b BROKER_ADDR or -c CLUSTER" in err
    code, _, err = run_admin(capsys, cluster.namesrv, "updateTopic", "-t", "bad topic!",
                             "-b", cluster.broker)  # fmt: skip
    assert code == 1
    assert err.startswith("boltmq admin updateTopic: UPDATE_AND_CREATE_TOPIC at ")
    assert "the topic name 'bad topic!' has characters outside" in err
    assert err.endswith(" (SYSTEM_ERROR)\n")
