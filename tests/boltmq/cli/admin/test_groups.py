"""updateSubGroup, deleteSubGroup, consumerConnection, producerConnection, cloneGroupOffset."""

from __future__ import annotations

from typing import Any

import pytest

from client import BlockingProducer, BlockingPushConsumer, ConsumeConcurrentlyStatus, Message
from protocol import names
from protocol.message import MessageExt
from tests.boltmq.cli.admin.helpers import (
    admin_json,
    commit_offsets,
    make_topic,
    run_admin,
    run_async,
    send_per_queue,
)


def _groups(namesrv: str, broker_addr: str) -> dict[str, Any]:
    async def fetch(admin: Any) -> dict[str, Any]:
        return dict((await admin.all_group_config(broker_addr)).subscription_group_table)

    result: dict[str, Any] = run_async(fetch, namesrv)
    return result


def test_update_and_delete_sub_group(
    cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    group = unique("sub-cg")
    done = admin_json(capsys, cluster.namesrv, "updateSubGroup", "-b", cluster.broker, "-g", group,
                      "-r", "3", "-q", "2", "-m", "false")  # fmt: skip
    assert done == {
        "group": {
            "groupName": group, "consumeEnable": True, "consumeFromMinEnable": False,
            "consumeBroadcastEnable": True, "retryQueueNums": 2, "retryMaxTimes": 3,
            "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
            "notifyConsumerIdsChangedEnable": True,
        },
        "brokers": [cluster.broker],
    }  # fmt: skip
    stored = _groups(cluster.namesrv, cluster.broker)[group]
    assert (stored.retry_max_times, stored.retry_queue_nums, stored.consume_from_min_enable) == (
        3, 2, False,
    )  # fmt: skip

    code, out, _ = run_admin(capsys, cluster.namesrv, "deleteSubGroup", "-c", "DefaultCluster",
                             "-g", group)  # fmt: skip
    assert code == 0
    assert out == f"consumer group {group} deleted from {cluster.broker}\n"
    assert group not in _groups(cluster.namesrv, cluster.broker)

    code, _, err = run_admin(capsys, cluster.namesrv, "updateSubGroup", "-g", group, "-r", "x")
    assert code == 2 and "invalid int value: 'x'" in err


def _ok(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def test_consumer_and_producer_connections(
    cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    topic, group, producer_group = unique("ConnT"), unique("conn-cg"), unique("conn-pg")
    make_topic(cluster.namesrv, topic, 2)
    consumer = BlockingPushConsumer(group, _ok, namesrv_addr=cluster.namesrv,
                                    offset_store_dir=str(tmp_path))  # fmt: skip
    consumer.subscribe(topic, "TagA || TagB")
    producer = BlockingProducer(producer_group, namesrv_addr=cluster.namesrv)
    with consumer, producer:
        producer.send(Message(topic, b"hello"))  # the producer's heartbeat reaches the broker
        client_id = consumer.consumer.instance.client_id
        found = admin_json(capsys, cluster.namesrv, "consumerConnection", "-g", group)
        assert len(found["connections"]) == 1
        connection = found["connections"][0]
        assert connection["clientId"] == client_id
        assert connection["clientAddr"].startswith("127.0.0.1:")
        assert connection["language"] == "JAVA"
        assert isinstance(connection["version"], int)
        assert found == {
            "group": group,
            "connections": [connection],
            "subscriptions": [{"topic": names.retry_topic(group), "subExpression": "*"},
                              {"topic": topic, "subExpression": "TagA || TagB"}],
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
        }  # fmt: skip
        code, out, _ = run_admin(capsys, cluster.namesrv, "consumerConnection", "-g", group)
        assert code == 0
        for title in ("Client Id", "Client Addr", "Language", "Version", "Topic",
                      "Sub Expression", "messageModel: CLUSTERING"):  # fmt: skip
            assert title in out

        producers = admin_json(capsys, cluster.namesrv, "producerConnection", "-g",
                               producer_group, "-t", topic)  # fmt: skip
        assert [p["clientId"] for p in producers] == [producer.producer.instance.client_id]
        assert list(producers[0]) == ["clientId", "clientAddr", "language", "version"]
        code, out, _ = run_admin(capsys, cluster.namesrv, "producerConnection", "-g",
                                 producer_group, "-t", topic)  # fmt: skip
        assert code == 0 and producers[0]["clientId"] in out
        for title in ("Client Id", "Client Addr", "Language", "Version"):
            assert title in out

    code, _, err = run_admin(capsys, cluster.namesrv, "consumerConnection", "-g", unique("none"))
    assert code == 1
    assert "is not online" in err and "check the group name and that its clients run" in err
    code, _, err = run_admin(capsys, cluster.namesrv, "producerConnection", "-g", "none-pg",
                             "-t", topic)  # fmt: skip
    assert code == 1 and "producer group none-pg is not online" in err


def test_clone_group_offset(cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str]) -> None:
    topic, source, dest = unique("CloneT"), unique("clone-src"), unique("clone-dst")
    broker = make_topic(cluster.namesrv, topic, 2)
    send_per_queue(cluster.namesrv, topic, broker, [4, 3])
    commit_offsets(cluster.namesrv, cluster.broker, source, topic, [3, 1])
    done = admin_json(capsys, cluster.namesrv, "cloneGroupOffset", "-s", source, "-d", dest,
                      "-t", topic)  # fmt: skip
    assert done == {"srcGroup": source, "destGroup": dest, "topic": topic,
                    "brokers": [cluster.broker]}  # fmt: skip
    progress = admin_json(capsys, cluster.namesrv, "consumerProgress", "-g", dest)
    assert [(q["queueId"], q["consumerOffset"], q["diff"]) for q in progress["queues"]] == [
        (0, 3, 1), (1, 1, 2),
    ]  # fmt: skip
    assert progress["diffTotal"] == 3
