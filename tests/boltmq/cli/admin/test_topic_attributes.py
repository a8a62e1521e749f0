"""updateTopic -a (mqadmin 5.x's attributes flag) and topicConfig, which shows them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.boltmq.cli.admin.helpers import admin_json, run_admin, wait_for


def test_update_topic_with_attributes_then_show_them(
    cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = unique("AttrCli")
    done = admin_json(capsys, cluster.namesrv, "updateTopic", "-b", cluster.broker, "-t", topic,
                      "-r", "2", "-w", "2", "-a", "+message.type=FIFO")  # fmt: skip
    assert done["attributes"] == "+message.type=FIFO"
    shown = wait_for(
        lambda: run_admin(capsys, cluster.namesrv, "topicConfig", "-t", topic, "--json"),
        lambda result: result[0] == 0,
        timeout=10,
    )
    [(broker_name, document)] = json.loads(shown[1]).items()
    assert document["attributes"] == {"message.type": "FIFO"}
    assert document["readQueueNums"] == 2
    code, out, _ = run_admin(capsys, cluster.namesrv, "topicConfig", "-t", topic)
    assert code == 0
    assert "Message Type" in out and "FIFO" in out and broker_name in out
    # topicStatus reads as before.
    rows = admin_json(capsys, cluster.namesrv, "topicStatus", "-t", topic)
    assert [row["queueId"] for row in rows] == [0, 1]


def test_bad_attributes_are_refused_with_a_clear_line(
    cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = unique("AttrCliBad")
    code, out, err = run_admin(capsys, cluster.namesrv, "updateTopic", "-b", cluster.broker,
                               "-t", topic, "-a", "+message.type=SOMETIMES")  # fmt: skip
    assert code == 1 and out == ""
    assert "message.type=SOMETIMES is refused" in err and "FIFO" in err
    code, _, err = run_admin(capsys, cluster.namesrv, "topicConfig", "-t", topic)
    assert code == 1 and "no route" in err
