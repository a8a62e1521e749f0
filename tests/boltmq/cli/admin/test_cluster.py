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
