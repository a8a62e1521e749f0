"""getNamesrvConfig, updateKvConfig, deleteKvConfig, wipeWritePerm, addWritePerm."""

from __future__ import annotations

from typing import Any

import pytest

from tests.boltmq.cli.admin.helpers import admin_json, make_topic, run_admin, run_async


def test_get_namesrv_config(cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    configs = admin_json(capsys, cluster.namesrv, "getNamesrvConfig")
    assert list(configs) == [cluster.namesrv]
    config = configs[cluster.namesrv]
    assert config["listenPort"] == "0"  # as the cluster process was started
    assert "kvConfigPath" in config
    code, out, _ = run_admin(capsys, cluster.namesrv, "getNamesrvConfig")
    assert code == 0 and "Name Server" in out and "kvConfigPath" in out


def test_kv_config(cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str]) -> None:
    key = unique("Orders")

    def value() -> Any:
        return run_async(lambda admin: admin.get_kv_config("ORDER_TOPIC_CONFIG", key),
                         cluster.namesrv)  # fmt: skip

    done = admin_json(capsys, cluster.namesrv, "updateKvConfig", "-s", "ORDER_TOPIC_CONFIG",
                      "-k", key, "-v", "broker-a:4")  # fmt: skip
    assert done == {"namespace": "ORDER_TOPIC_CONFIG", "key": key, "value": "broker-a:4"}
    assert value() == "broker-a:4"
    done = admin_json(capsys, cluster.namesrv, "deleteKvConfig", "-s", "ORDER_TOPIC_CONFIG",
                      "-k", key)  # fmt: skip
    assert done == {"namespace": "ORDER_TOPIC_CONFIG", "key": key}
    assert value() is None


def test_wipe_and_add_write_perm(
    cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = unique("PermT")
    broker = make_topic(cluster.namesrv, topic, 1)
    topics = len(admin_json(capsys, cluster.namesrv, "topicList"))
    try:
        wiped = admin_json(capsys, cluster.namesrv, "wipeWritePerm", "-b", broker)
        assert len(wiped) == 1
        assert wiped[0]["namesrvAddr"] == cluster.namesrv
        assert wiped[0]["brokerName"] == broker
        # Every topic of the only broker, less the ones the registry lists without queues here.
        assert 1 <= wiped[0]["topicCount"] <= topics
        route = admin_json(capsys, cluster.namesrv, "topicRoute", "-t", topic)
        assert route["queueDatas"][0]["perm"] == 4
    finally:
        added = admin_json(capsys, cluster.namesrv, "addWritePerm", "-b", broker)
    assert added == [{**wiped[0], "topicCount": wiped[0]["topicCount"]}]
    route = admin_json(capsys, cluster.namesrv, "topicRoute", "-t", topic)
    assert route["queueDatas"][0]["perm"] == 6

    code, _, err = run_admin(capsys, cluster.namesrv, "wipeWritePerm", "-b", "no-such-broker")
    assert code == 1
    assert err == (
        f"boltmq admin wipeWritePerm: no broker named no-such-broker in the registry; "
        f"known: {broker}\n"
    )
