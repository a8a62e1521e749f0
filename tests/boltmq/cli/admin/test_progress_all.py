"""consumerProgress without -g: one row per consumer group of the cluster.

The cluster is shared with other tests, so the assertions pick this test's own groups out of
the listing (and the system groups, which every broker has).
"""

from __future__ import annotations

from typing import Any

import pytest

from boltmq.cli.admin.offsets import version_desc
from client import BlockingPushConsumer
from protocol import names
from protocol.bodies import ConsumeFromWhere
from tests.boltmq.cli.admin.helpers import (
    admin_json,
    commit_offsets,
    make_topic,
    run_admin,
    send_per_queue,
    wait_for,
)
from tests.boltmq.cli.admin.test_offsets import Received


def _mine(rows: list[dict[str, Any]], *groups: str) -> list[dict[str, Any]]:
    return [row for row in rows if row["group"] in groups]


def test_progress_of_every_group(
    cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    topic = unique("ProgressAllT")
    offline, live = unique("all-offline-cg"), unique("all-live-cg")
    broker = make_topic(cluster.namesrv, topic, 2)
    send_per_queue(cluster.namesrv, topic, broker, [4, 3])
    commit_offsets(cluster.namesrv, cluster.broker, offline, topic, [1, 2])  # diff 3 + 1

    received = Received()
    consumer = BlockingPushConsumer(
        live, received, namesrv_addr=cluster.namesrv,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        persist_consumer_offset_interval=0.2, offset_store_dir=str(tmp_path),
    )  # fmt: skip
    consumer.subscribe(topic)
    with consumer:
        everything = [f"{q}-{o}" for q, n in ((0, 4), (1, 3)) for o in range(n)]
        wait_for(lambda: [received.count(b) for b in everything], lambda c: c == [1] * 7)
        rows = wait_for(
            lambda: _mine(admin_json(capsys, cluster.namesrv, "consumerProgress"), offline, live),
            lambda rows: len(rows) == 2 and rows[0]["diffTotal"] == 0,
        )
        tps = rows[0].pop("consumeTps")
        assert tps >= 0.0
        # The live group first (more consumers online), then the offline one.
        assert rows == [
            {"group": live, "count": 1, "version": "V4_9_8", "type": "PUSH",
             "model": "CLUSTERING", "diffTotal": 0},
            {"group": offline, "count": 0, "version": "OFFLINE", "type": None, "model": None,
             "consumeTps": 0.0, "diffTotal": 4},
        ]  # fmt: skip

        code, out, _ = run_admin(capsys, cluster.namesrv, "consumerProgress")
        assert code == 0
        for title in ("Group", "Count", "Version", "Type", "Model", "TPS", "Diff Total"):
            assert title in out
        lines = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
        assert lines[live][1:5] == ["1", "V4_9_8", "PUSH", "CLUSTERING"]
        assert lines[offline][1:3] == ["0", "OFFLINE"] and lines[offline][-1] == "4"

    # System groups (every broker has TOOLS_CONSUMER) only with --system.
    plain = admin_json(capsys, cluster.namesrv, "consumerProgress")
    system = (names.TOOLS_CONSUMER_GROUP, names.SELF_TEST_CONSUMER_GROUP)
    assert not [row for row in plain if row["group"] in system]
    everything_listed = admin_json(capsys, cluster.namesrv, "consumerProgress", "--system")
    groups = [row["group"] for row in everything_listed]
    assert set(system) <= set(groups)
    assert offline in groups and live in groups
    assert list(everything_listed[0]) == [
        "group", "count", "version", "type", "model", "consumeTps", "diffTotal",
    ]  # fmt: skip


def test_progress_flags_that_do_not_fit(cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_admin(capsys, cluster.namesrv, "consumerProgress", "-t", "Orders")
    assert (code, out) == (2, "")
    assert err == (
        "boltmq admin consumerProgress: -t goes with -g: give the group whose progress on it "
        "to show\n"
    )
    code, _, err = run_admin(capsys, cluster.namesrv, "consumerProgress", "-g", "cg", "--system")
    assert code == 2 and "--system lists groups: give it without -g" in err
    code, out, _ = run_admin(capsys, None, "consumerProgress", "--help")
    assert code == 0 and "boltmq admin consumerProgress -n 127.0.0.1:9876 [--system]" in out


@pytest.mark.parametrize(
    ("ordinal", "name"),
    [(409, "V4_9_8"), (401, "V4_9_4"), (393, "V4_9_0"), (333, "V4_6_0"), (317, "V4_5_2"),
     (213, "V4_0_0"), (212, "V4_0_0_SNAPSHOT"), (413, "V5_0_0"), (433, "V5_1_0"), (37, "37")],
)  # fmt: skip
def test_version_names(ordinal: int, name: str) -> None:
    # The ordinals Java, C++ and Go clients send (MQVersion.Version), as mqadmin names them.
    assert version_desc(ordinal) == name
