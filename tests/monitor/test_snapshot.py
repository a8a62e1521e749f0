"""`boltmq monitor --json` and `--once` in a subprocess against an embedded cluster after known
traffic: message counts, lags, the live group's consume rate, the stalled group marked, and
`--fail-on-alert`'s exit code.

Loopback only, ephemeral ports; every wait has a deadline.
"""

from __future__ import annotations

import json
import socket
import subprocess
from typing import Any

import pytest
import trio

import boltmq
from client.instance import ClientInstance
from monitor.collector import Collector
from monitor.model import Model, Thresholds

from .helpers import (
    LIVE_GROUP,
    LIVE_RATE,
    LIVE_TOPIC,
    STALLED_GROUP,
    STALLED_OFFSET,
    STALLED_TOPIC,
    TOPICS,
    consume_live,
    make_traffic,
    monitor_command,
    monitor_env,
)

pytestmark = pytest.mark.timeout(180)


async def run_monitor(*args: str) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(90):
        return await trio.run_process(
            monitor_command(*args), capture_stdout=True, capture_stderr=True, check=False,
            env=monitor_env(),
        )  # fmt: skip


async def test_json_snapshot_after_known_traffic() -> None:
    async with boltmq.embedded() as cluster, trio.open_nursery() as nursery:
        namesrv = cluster.registry_address
        await make_traffic(namesrv, cluster.broker_address)
        stop = trio.Event()
        await nursery.start(consume_live, namesrv, stop)
        await trio.sleep(1.5)  # let the live group get going: its rate needs progress
        done = await run_monitor("-n", namesrv, "--json", "--interval", "2", "--fail-on-alert")
        stop.set()
    assert done.returncode == 1, done.stderr.decode()  # the stalled group is an alert
    snapshot: dict[str, Any] = json.loads(done.stdout)

    topics = {t["topic"]: t for t in snapshot["topics"]}
    assert set(TOPICS) <= set(topics)
    assert not any(name.startswith(("RMQ_SYS_", "%RETRY%")) or name == "TBW102"
                   for name in topics)  # fmt: skip
    for topic, (queues, sent) in TOPICS.items():
        assert topics[topic]["messages"] == sent, topics[topic]
        assert topics[topic]["max_offset"] == sent
        assert topics[topic]["queues"] == queues

    groups = {(g["group"], g["topic"]): g for g in snapshot["groups"]}
    stalled = groups[(STALLED_GROUP, STALLED_TOPIC)]
    assert stalled["lag"] == TOPICS[STALLED_TOPIC][1] - STALLED_OFFSET
    assert stalled["members"] == 0
    assert stalled["status"] == "stalled"
    live = groups[(LIVE_GROUP, LIVE_TOPIC)]
    assert live["members"] == 1
    assert live["status"] != "stalled"
    # The rate's order of magnitude: a busy machine may run the consumer slower than aimed.
    assert LIVE_RATE / 10 <= live["consume_tps"] <= LIVE_RATE * 5, live
    assert 0 < live["lag"] < TOPICS[LIVE_TOPIC][1]

    brokers = snapshot["brokers"]
    assert len(brokers) == 1 and brokers[0]["error"] is None
    assert brokers[0]["role"] == "MASTER" and brokers[0]["version"]
    assert brokers[0]["codecs"].split(" ")[0] in ("compiled", "pure")  # the broker's codec path
    assert brokers[0]["out_tps"] > 0
    header = snapshot["header"]
    assert list(header["registries"].values()) == [None]
    assert header["alerts"] == len(snapshot["alerts"]) >= 1
    kinds = {(a["kind"], a["subject"]) for a in snapshot["alerts"]}
    assert ("group stalled", f"{STALLED_GROUP} on {STALLED_TOPIC}") in kinds
    # A bounded number of requests: 1 registry + 4 broker-wide + the per-topic/group details.
    assert header["requests"] <= 1 + 4 + 200


async def test_once_prints_the_tables_without_colour() -> None:
    async with boltmq.embedded() as cluster:
        address = cluster.registry_address
        await make_traffic(address, cluster.broker_address)
        done = await run_monitor("-n", address, "--once", "--interval", "0.5")
        assert done.returncode == 0, done.stderr.decode()
        text = done.stdout.decode()
        assert "\x1b[" not in text  # not a terminal: no colour codes
        for title in ("brokers", "topics", "groups", "clients", "alerts"):
            assert title in text
        stalled_line = next(line for line in text.splitlines() if STALLED_GROUP in line)
        assert "stalled" in stalled_line
        assert "TBW102" not in text
        with_system = await run_monitor("-n", address, "--once", "--system", "--interval", "0.2")
        assert "TBW102" in with_system.stdout.decode()


async def test_registry_down_is_reported_not_raised() -> None:
    async with boltmq.embedded() as cluster:
        address = cluster.registry_address
    done = await run_monitor("-n", address, "--json", "--fail-on-alert", "--interval", "0.2")
    assert done.returncode == 1
    snapshot = json.loads(done.stdout)
    assert snapshot["header"]["registries"][address] is not None
    assert [a["kind"] for a in snapshot["alerts"]] == ["registry down"]


async def test_bad_options_get_one_clear_line() -> None:
    done = await run_monitor("--fail-on-alert")
    assert done.returncode != 0
    assert b"--fail-on-alert needs --once or --json" in done.stderr
    done = await run_monitor("--interval", "zero", "--json")
    assert done.returncode == 2
    assert b"'zero' is not a number of seconds" in done.stderr


async def test_brokers_keep_updating_while_no_registry_answers() -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{probe.getsockname()[1]}"
    async with boltmq.embedded() as cluster:
        await make_traffic(cluster.registry_address, cluster.broker_address)
        async with ClientInstance(cluster.registry_address, timeout=5) as instance:
            # No disk alert whatever the test machine's disk holds.
            collector, model = Collector(instance, timeout=5), Model(Thresholds(disk_ratio=1.0))
            with trio.fail_after(60):
                model.update(await collector.sample())
                instance.registries[:] = [dead]  # the only registry goes away
                snapshot = model.update(await collector.sample())
    assert snapshot.header.registries[dead] is not None
    assert [(b.broker_name, b.error) for b in snapshot.brokers] == [("broker-a", None)]
    topics = {t.topic: t.messages for t in snapshot.topics}
    assert topics[STALLED_TOPIC] == TOPICS[STALLED_TOPIC][1]
    assert {a.kind for a in snapshot.alerts} == {"registry down", "group stalled"}
