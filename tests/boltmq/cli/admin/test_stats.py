"""statsAll: messages in per topic, out and accumulation per group (brokers sample every 10 s)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.boltmq.cli.admin.helpers import (
    admin_json,
    commit_offsets,
    make_topic,
    run_admin,
    send_per_queue,
    wait_for,
)


def test_stats_all(cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str]) -> None:
    topic, group = unique("StatsT"), unique("stats-cg")
    broker = make_topic(cluster.namesrv, topic, 2)
    send_per_queue(cluster.namesrv, topic, broker, [3, 2])
    commit_offsets(cluster.namesrv, cluster.broker, group, topic, [1, 0])
    rows = wait_for(
        lambda: admin_json(capsys, cluster.namesrv, "statsAll", "-t", topic),
        lambda rows: rows[0]["inMsg24Hour"] == 5,
    )
    assert len(rows) == 1
    in_tps = rows[0].pop("inTps")
    assert in_tps >= 0.0
    assert rows == [{"topic": topic, "consumerGroup": group, "accumulation": 4, "outTps": 0.0,
                     "inMsg24Hour": 5, "outMsg24Hour": 0}]  # fmt: skip
    assert any(r["topic"] == topic for r in admin_json(capsys, cluster.namesrv, "statsAll", "-a"))

    code, out, _ = run_admin(capsys, cluster.namesrv, "statsAll", "-t", topic)
    assert code == 0
    for title in ("Topic", "Consumer Group", "Accumulation", "InTPS", "OutTPS", "InMsg24Hour",
                  "OutMsg24Hour"):  # fmt: skip
        assert title in out
    code, _, err = run_admin(capsys, cluster.namesrv, "statsAll", "-t", "NoSuchTopic_s1")
    assert code == 1 and "no route for topic NoSuchTopic_s1" in err


def test_stats_all_active_topics_only(
    cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    busy, idle = unique("StatsBusyT"), unique("StatsIdleT")
    broker = make_topic(cluster.namesrv, busy, 1)
    make_topic(cluster.namesrv, idle, 1)
    send_per_queue(cluster.namesrv, busy, broker, [2])
    wait_for(
        lambda: admin_json(capsys, cluster.namesrv, "statsAll", "-t", busy, "-a"),
        lambda rows: len(rows) == 1 and rows[0]["inMsg24Hour"] == 2,
    )
    # -t with an idle topic: one row of zeros; with -a as well: nothing.
    assert admin_json(capsys, cluster.namesrv, "statsAll", "-t", idle) == [
        {"topic": idle, "consumerGroup": "", "accumulation": 0, "inTps": 0.0, "outTps": 0.0,
         "inMsg24Hour": 0, "outMsg24Hour": 0},
    ]  # fmt: skip
    assert admin_json(capsys, cluster.namesrv, "statsAll", "-t", idle, "-a") == []
    # -a over every topic: the busy one is listed, the idle one is not.
    topics = {row["topic"] for row in admin_json(capsys, cluster.namesrv, "statsAll", "-a")}
    assert busy in topics and idle not in topics
    code, out, _ = run_admin(capsys, None, "statsAll", "--help")
    assert code == 0 and "boltmq admin statsAll -n 127.0.0.1:9876 [-t Orders] [-a]" in out
