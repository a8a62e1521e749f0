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
