"""clusterList, brokerStatus, getBrokerConfig, updateBrokerConfig against a live cluster."""

from __future__ import annotations

from typing import Any

import pytest

from tests.boltmq.cli.admin.helpers import admin_json, make_topic, run_admin, send_per_queue


def test_cluster_list_json_and_table(
    cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = unique("ClusterListT")
    broker_name = make_topic(cluster.namesrv, topic, 1)
    send_per_queue(cluster.namesrv, topic, broker_name, [3])
    rows = admin_json(capsys, cluster.namesrv, "clusterList")
    assert len(rows) == 1
    row = rows[0]
    assert list(row) == [
        "cluster", "brokerName", "brokerId", "address", "version", "inTps", "outTps",
        "retentionHours", "diskRatio",
    ]  # fmt: skip
    assert row["cluster"] == "DefaultCluster"
    assert row["brokerName"] == cluster.found["broker_name"] == broker_name
    assert row["brokerId"] == 0
    assert row["address"] == cluster.broker
    assert row["version"] == "V4_9_8"
    assert row["retentionHours"] == 0  # the store's first message is minutes old
    assert 0.0 < row["diskRatio"] < 1.0
    assert row["inTps"] >= 0.0 and row["outTps"] >= 0.0

    code, out, _ = run_admin(capsys, cluster.namesrv, "clusterList")
    assert code == 0
    for title in ("Cluster Name", "Broker Name", "BID", "Addr", "Version", "InTPS", "OutTPS",
                  "Hour", "SPACE"):  # fmt: skip
        assert title in out
    assert cluster.broker in out and "V4_9_8" in out

    again = admin_json(capsys, cluster.namesrv, "clusterList", "-c", "DefaultCluster")
    steady = ("cluster", "brokerName", "brokerId", "address", "version")  # not disk or TPS
    assert [{k: r[k] for k in steady} for r in again] == [{k: row[k] for k in steady}]
    code, _, err = run_admin(capsys, cluster.namesrv, "clusterList", "-c", "NoSuchCluster")
    assert code == 1
    assert err.strip() == (
        "boltmq admin clusterList: no cluster named NoSuchCluster; known: DefaultCluster"
    )


def test_broker_status(cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str]) -> None:
    topic = unique("StatusCountT")
    broker_name = make_topic(cluster.namesrv, topic, 1)
    before = admin_json(capsys, cluster.namesrv, "brokerStatus", "-b", cluster.broker)
    send_per_queue(cluster.namesrv, topic, broker_name, [4])
    after = admin_json(capsys, cluster.namesrv, "brokerStatus", "-b", cluster.broker)
    assert after["brokerVersionDesc"] == "V4_9_8"
    assert int(after["msgPutTotalTodayNow"]) == int(before["msgPutTotalTodayNow"]) + 4
    assert int(after["putMessageTimesTotal"]) == int(before["putMessageTimesTotal"]) + 4
    assert int(after["commitLogMaxOffset"]) > int(before["commitLogMaxOffset"])

    by_cluster = admin_json(capsys, cluster.namesrv, "brokerStatus", "-c", "DefaultCluster")
    assert list(by_cluster) == [cluster.broker]
    assert by_cluster[cluster.broker]["msgPutTotalTodayNow"] == after["msgPutTotalTodayNow"]

    code, out, _ = run_admin(capsys, cluster.namesrv, "brokerStatus", "-b", cluster.broker)
    assert code == 0
    assert "Key" in out and "Value" in out and "brokerVersionDesc" in out


def test_get_and_update_broker_config(cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    config = admin_json(capsys, cluster.namesrv, "getBrokerConfig", "-b", cluster.broker)
    assert config["brokerName"] == cluster.found["broker_name"]
    assert config["brokerClusterName"] == "DefaultCluster"
    assert config["listenPort"] == cluster.broker.rsplit(":", 1)[1]
    code, out, _ = run_admin(capsys, cluster.namesrv, "getBrokerConfig", "-c", "DefaultCluster")
    assert code == 0
    for title in ("Broker", "Key", "Value", cluster.broker, "brokerClusterName"):
        assert title in out
    old = config["shortPollingTimeMills"]
    new = str(int(old) + 7)
    try:
        done = admin_json(capsys, cluster.namesrv, "updateBrokerConfig", "-b", cluster.broker,
                          "-k", "shortPollingTimeMills", "-v", new)  # fmt: skip
        assert done == {"key": "shortPollingTimeMills", "value": new, "brokers": [cluster.broker]}
        by_cluster = admin_json(capsys, cluster.namesrv, "getBrokerConfig", "-c", "DefaultCluster")
        assert by_cluster[cluster.broker]["shortPollingTimeMills"] == new
    finally:
        admin_json(capsys, cluster.namesrv, "updateBrokerConfig", "-c", "DefaultCluster",
                   "-k", "shortPollingTimeMills", "-v", old)  # fmt: skip
    code, _, err = run_admin(capsys, cluster.namesrv, "updateBrokerConfig", "-b", cluster.broker,
                             "-k", "listenPort", "-v", "1")  # fmt: skip
    assert code == 1
    assert err.startswith("boltmq admin updateBrokerConfig: refused: ")
    assert "listenPort cannot change while the broker runs" in err and err.count("\n") == 1
