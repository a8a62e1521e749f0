"""The cluster launcher with real node processes: 2 registries, broker group a (SYNC_MASTER +
slave) and group b (ASYNC_MASTER) on fixed loopback ports, data in tmp_path.

Every wait has a deadline and polls a condition; node processes are checked by pid.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio

import boltmq
from boltmq.launcher import STATE_FILE, LaunchRefused, RestartRules
from protocol.bodies import ClusterInfo, KVTable, TopicRouteData
from protocol.client import RemotingClient
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import GetMaxOffsetRequestHeader, encode_header
from tests.actors.broker.ha.helpers import free_port_pair
from tests.actors.broker.helpers import pull_request, send_request
from tests.ports import free_port
from tests.support.remoting import call
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "LaunchTopic"

pytestmark = pytest.mark.timeout(180)


def write_spec(root: Path) -> tuple[Path, dict[str, int]]:
    """The issue's cluster on free ports; returns the spec file and each node's port."""
    ports = {
        "registry-1": free_port(),
        "registry-2": free_port(),
        "broker-a-0": free_port_pair(),
        "broker-a-1": free_port_pair(),
        "broker-b-0": free_port_pair(),
    }
    if len(set(ports.values())) < len(ports):
        pytest.fail(f"free ports collided: {ports}")
    text = f"""
dataDir = "data"
logDir = "logs"
[defaults]
fastPortEnable = false
mapedFileSizeCommitLog = {4 << 20}
[[registry]]
listenPort = {ports["registry-1"]}
[[registry]]
listenPort = {ports["registry-2"]}
[[broker.broker-a.node]]
brokerId = 0
brokerRole = "SYNC_MASTER"
listenPort = {ports["broker-a-0"]}
haListenPort = {ports["broker-a-0"] + 1}
[[broker.broker-a.node]]
brokerId = 1
brokerRole = "SLAVE"
slaveReadEnable = true
listenPort = {ports["broker-a-1"]}
haListenPort = {ports["broker-a-1"] + 1}
[[broker.broker-b.node]]
brokerId = 0
brokerRole = "ASYNC_MASTER"
listenPort = {ports["broker-b-0"]}
haListenPort = {ports["broker-b-0"] + 1}
"""
    path = root / "cluster.toml"
    path.write_text(text)
    return path, ports


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (ended, not yet reaped) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def send_ok(client: RemotingClient, address: str, body: bytes = b"body") -> None:
    """Send until SEND_OK: a SYNC_MASTER answers SLAVE_NOT_AVAILABLE (the message stored all
    the same) until its slave has linked up."""
    with trio.fail_after(30):
        while True:
            answer = await call(client, address, send_request(TOPIC, body))
            if answer.code == ResponseCode.SUCCESS:
                return
            assert answer.code == ResponseCode.SLAVE_NOT_AVAILABLE, answer.remark
            await trio.sleep(0.1)


async def cluster_info(client: RemotingClient, registry: str) -> ClusterInfo:
    request = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
    answer = await call(client, registry, request)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return ClusterInfo.from_json(answer.body or b"")


async def route(client: RemotingClient, registry: str, topic: str) -> TopicRouteData | None:
    request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    answer = await call(client, registry, request)
    if answer.code != ResponseCode.SUCCESS:
        return None
    return TopicRouteData.from_json(answer.body or b"")


async def max_offset(client: RemotingClient, broker: str, topic: str, queue_id: int) -> int:
    header = GetMaxOffsetRequestHeader(topic=topic, queue_id=queue_id)
    request = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, encode_header(header))
    answer = await call(client, broker, request)
    if answer.code != ResponseCode.SUCCESS:
        return -1
    return int((answer.ext_fields or {})["offset"])


async def test_a_spec_cluster_serves_as_specified(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path, ports = write_spec(tmp_path)
    async with boltmq.launch(path, follow=True) as cluster, RemotingClient() as client:
        assert [cluster.states[name].status for name in cluster.spec.names()] == ["running"] * 5
        pids = {name: cluster.pid(name) for name in ports}
        assert all(pid is not None and alive(pid) for pid in pids.values())
        assert len(set(pids.values())) == 5  # each node its own process
        # Both registries know exactly the spec's brokers, by id and address.
        expected = {
            "broker-a": {
                0: f"127.0.0.1:{ports['broker-a-0']}",
                1: f"127.0.0.1:{ports['broker-a-1']}",
            },
            "broker-b": {0: f"127.0.0.1:{ports['broker-b-0']}"},
        }
        for registry in ("registry-1", "registry-2"):
            address = cluster.address(registry)

            async def registered(address: str = address) -> dict[str, dict[int, str]]:
                info = await cluster_info(client, address)
                table = info.broker_addr_table
                return {name: dict(data.broker_addrs) for name, data in table.items()}

            with trio.fail_after(30):
                while await registered() != expected:
                    await trio.sleep(0.1)
            info = await cluster_info(client, address)
            assert list(info.cluster_addr_table) == ["DefaultCluster"]
            assert sorted(info.cluster_addr_table["DefaultCluster"]) == ["broker-a", "broker-b"]
        # A send to each master; the topic's route then names both groups, the slave too.
        for master in ("broker-a-0", "broker-b-0"):
            await send_ok(client, cluster.address(master), b"to " + master.encode())
        with trio.fail_after(30):
            while True:
                data = await route(client, cluster.address("registry-2"), TOPIC)
                if data is not None and len(data.broker_datas) == 2:
                    break
                await trio.sleep(0.1)
        assert {b.broker_name: dict(b.broker_addrs) for b in data.broker_datas} == expected
        # The slave has the master's message and serves a pull of it.
        slave = cluster.address("broker-a-1")
        with trio.fail_after(30):
            while await max_offset(client, slave, TOPIC, 0) < 1:
                await trio.sleep(0.1)
        # The slave learns the topic from its master's config sync (first after 3 s).
        with trio.fail_after(30):
            while True:
                answer = await call(client, slave, pull_request(TOPIC, 0))
                if answer.code == ResponseCode.SUCCESS:
                    break
                assert answer.code == ResponseCode.TOPIC_NOT_EXIST, answer.remark
                await trio.sleep(0.2)
        assert b"to broker-a-0" in (answer.body or b"")
    # Each node's log is in its own file and, with follow, on stdout behind its name.
    followed = capfd.readouterr().out
    for name in ports:
        log_text = (tmp_path / "logs" / f"{name}.log").read_text()
        assert "ready" in log_text, name
        assert any(
            line.startswith(f"{name} | ") and "ready" in line for line in followed.splitlines()
        ), name
    # The block's end stopped every node.
    assert not any(alive(pid) for pid in pids.values() if pid is not None)
    assert [cluster.states[name].status for name in cluster.spec.names()] == ["stopped"] * 5


async def test_a_killed_node_comes_back_alone_and_a_node_that_keeps_dying_is_given_up(
    tmp_path: Path,
) -> None:
    path, ports = write_spec(tmp_path)
    rules = RestartRules(intensity=2, period=60.0, backoff_initial=0.05, backoff_max=0.2)
    async with boltmq.launch(path, restart_rules=rules) as cluster, RemotingClient() as client:
        master = cluster.address("broker-b-0")
        answer = await call(client, master, send_request(TOPIC, b"before the kill"))
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        before = {name: cluster.pid(name) for name in ports}
        cluster.kill("broker-b-0")
        state = cluster.states["broker-b-0"]
        await wait_until(lambda: state.restarts == 1 and state.status == "running", 30, "a restart")
        assert cluster.pid("broker-b-0") not in (None, before["broker-b-0"])
        assert state.last_exit == "was killed by SIGKILL"
        # The others never stopped.
        assert {n: cluster.pid(n) for n in ports if n != "broker-b-0"} == {
            n: pid for n, pid in before.items() if n != "broker-b-0"
        }
        # Its store recovered: the message acknowledged before the kill is still there, and
        # it takes sends again.
        assert await max_offset(client, master, TOPIC, 0) == 1
        answer = await call(client, master, send_request(TOPIC, b"after the kill"))
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        # It registers again with both registries (it was dropped when its connection closed).
        for registry in ("registry-1", "registry-2"):
            address = cluster.address(registry)
            with trio.fail_after(30):
                while "broker-b" not in (await cluster_info(client, address)).broker_addr_table:
                    await trio.sleep(0.1)
        # Killed again and again: past 2 restarts in the period it is given up, loudly, and
        # the rest keep serving.
        for restarts in (2, 3):
            cluster.kill("broker-b-0")
            if restarts <= rules.intensity:
                await wait_until(
                    lambda r=restarts: state.restarts == r and state.status == "running",
                    30,
                    f"restart {restarts}",
                )
        await wait_until(lambda: state.status == "given up", 30, "the node given up")
        assert cluster.pid("broker-b-0") is None
        await send_ok(client, cluster.address("broker-a-0"), b"still")
        assert all(alive(cluster.pid(n) or 0) for n in ports if n != "broker-b-0")
        saved = json.loads((tmp_path / "data" / STATE_FILE).read_text())
        assert {n["name"]: n["status"] for n in saved["nodes"]}["broker-b-0"] == "given up"


async def test_a_port_in_use_is_refused_before_any_node_starts(tmp_path: Path) -> None:
    path, ports = write_spec(tmp_path)
    ha_port = ports["broker-a-1"] + 1
    with socket.socket() as foreign:  # another program listening on broker-a-1's HA port
        foreign.bind(("127.0.0.1", ha_port))
        foreign.listen()
        result = subprocess.run(
            [sys.executable, "-m", "boltmq.cli", "cluster", "-f", str(path)],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
            text=True, timeout=60,
        )  # fmt: skip
        with pytest.raises(LaunchRefused, match=f"node broker-a-1 haListenPort {ha_port}"):
            async with boltmq.launch(path):
                pytest.fail("the cluster started beside a foreign listener")
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert f"node broker-a-1 haListenPort {ha_port} (in use)" in line, line
    assert line.endswith("nothing started"), line
    # No node ever ran: none has a log file, none a state.
    assert not (tmp_path / "logs").exists()
    assert not (tmp_path / "data" / STATE_FILE).exists()


async def test_sigterm_stops_every_node_cleanly_in_reverse_order(tmp_path: Path) -> None:
    path, ports = write_spec(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    launcher = await trio.lowlevel.open_process(
        [sys.executable, "-m", "boltmq.cli", "cluster", "-f", str(path)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    state_file = tmp_path / "data" / STATE_FILE
    output = bytearray()

    async def read_output() -> None:
        assert launcher.stderr is not None
        async for chunk in launcher.stderr:
            output.extend(chunk)

    def running() -> bool:
        try:
            nodes = json.loads(state_file.read_text())["nodes"]
        except (FileNotFoundError, json.JSONDecodeError):
            return False
        return len(nodes) == 5 and all(node["status"] == "running" for node in nodes)

    async with trio.open_nursery() as nursery, RemotingClient() as client:
        nursery.start_soon(read_output)
        await wait_until(running, 60)
        pids = {node["name"]: node["pid"] for node in json.loads(state_file.read_text())["nodes"]}
        # An offset committed on a master must be on disk after the stop.
        request = RemotingCommand.request(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "LaunchGroup", "topic": TOPIC, "queueId": "0", "commitOffset": "7"},
        )
        answer = await call(client, f"127.0.0.1:{ports['broker-b-0']}", send_request(TOPIC))
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        answer = await call(client, f"127.0.0.1:{ports['broker-b-0']}", request)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        # Another process reads the launcher's state file.
        status = await trio.run_process(
            [sys.executable, "-m", "boltmq.cli", "cluster", "-f", str(path), "--status"],
            cwd=ROOT, env=env, capture_stdout=True, capture_stderr=True,
        )  # fmt: skip
        table = status.stdout.decode()
        for name, pid in pids.items():
            [row] = [line for line in table.splitlines() if f" {name} " in line]
            assert "running" in row and str(pid) in row, row
        assert "SYNC_MASTER" in table and "SLAVE" in table and "ASYNC_MASTER" in table
        launcher.send_signal(signal.SIGTERM)
        with trio.fail_after(90):
            code = await launcher.wait()
        nursery.cancel_scope.cancel()
    assert code == 0, output.decode(errors="replace")[-3000:]
    assert not [name for name, pid in pids.items() if alive(pid)]
    text = output.decode(errors="replace")
    stops = [
        line.split("node ")[1].split(" ")[0]
        for line in text.splitlines()
        if line.endswith(") stopped")
    ]
    assert stops == ["broker-a-1", "broker-b-0", "broker-a-0", "registry-2", "registry-1"]
    for name in ("broker-a-0", "broker-a-1", "broker-b-0"):
        assert not (tmp_path / "data" / name / "store" / "abort").exists(), name
    offsets = tmp_path / "data" / "broker-b-0" / "store" / "config" / "consumerOffset.json"
    assert b'"LaunchTopic@LaunchGroup":{0:7}' in offsets.read_bytes()


async def test_a_bad_spec_is_refused_and_nothing_starts(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[[registry]]\nlistenPort = 19876\nlistenport = 19877\n")
    result = subprocess.run(
        [sys.executable, "-m", "boltmq.cli", "cluster", "-f", str(path)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    why = "registry[1].listenport: unknown key (did you mean listenPort?)"
    assert f"{path}: {why}" in result.stderr
    assert "nothing started" in result.stderr
    assert not (tmp_path / "data").exists()


async def test_in_process_nodes_run_as_tasks_of_the_launcher(tmp_path: Path) -> None:
    path, ports = write_spec(tmp_path)
    path.write_text("inProcess = true\n" + path.read_text())
    async with boltmq.launch(path) as cluster, RemotingClient() as client:
        assert {cluster.pid(name) for name in ports} == {os.getpid()}
        await send_ok(client, cluster.address("broker-b-0"), b"in process")
        assert await max_offset(client, cluster.address("broker-b-0"), TOPIC, 0) == 1
        with pytest.raises(RuntimeError, match="no running process"):
            cluster.kill("broker-b-0")
    assert [cluster.states[name].status for name in cluster.spec.names()] == ["stopped"] * 5


def write_small_spec(root: Path) -> tuple[Path, dict[str, int]]:
    """A registry and group a's SYNC_MASTER and slave: the least that has a slave to wait on."""
    ports = {
        "registry-1": free_port(),
        "broker-a-0": free_port_pair(),
        "broker-a-1": free_port_pair(),
    }
    text = f"""
[defaults]
fastPortEnable = false
mapedFileSizeCommitLog = {4 << 20}
[[registry]]
listenPort = {ports["registry-1"]}
[[broker.broker-a.node]]
brokerId = 0
brokerRole = "SYNC_MASTER"
listenPort = {ports["broker-a-0"]}
haListenPort = {ports["broker-a-0"] + 1}
[[broker.broker-a.node]]
brokerId = 1
brokerRole = "SLAVE"
listenPort = {ports["broker-a-1"]}
haListenPort = {ports["broker-a-1"] + 1}
"""
    path = root / "cluster.toml"
    path.write_text(text)
    return path, ports


async def ha_connection_count(client: RemotingClient, master: str) -> int:
    answer = await call(
        client, master, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
    )
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return int(KVTable.from_json(answer.body or b"{}").table["haConnectionCount"])


async def test_the_launcher_says_each_event_in_one_line_and_holds_its_data_directory(
    tmp_path: Path,
) -> None:
    path, ports = write_small_spec(tmp_path)
    master = f"127.0.0.1:{ports['broker-a-0']}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    launcher = await trio.lowlevel.open_process(
        [sys.executable, "-m", "boltmq.cli", "cluster", "-f", str(path)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    lines: list[str] = []
    count_when_up: list[int] = []

    async with trio.open_nursery() as nursery, RemotingClient() as client:

        async def read_lines() -> None:
            assert launcher.stderr is not None
            pending = b""
            async for chunk in launcher.stderr:
                pending += chunk
                *complete, pending = pending.split(b"\n")
                for line in complete:
                    lines.append(line.decode(errors="replace"))
                    if "cluster of 3 nodes up" in lines[-1]:
                        # Asked as soon as the line is out: the slave must be linked by then.
                        count_when_up.append(await ha_connection_count(client, master))

        nursery.start_soon(read_lines)
        await wait_until(lambda: count_when_up, 60, "the cluster up")
        assert count_when_up == [1], lines
        # Every node said it was ready before the line ("running" is logged on its ready line).
        up = next(i for i, line in enumerate(lines) if "cluster of 3 nodes up" in line)
        assert sum(") running: pid " in line for line in lines[:up]) == 3, lines

        # A second launcher on the same spec (so the same data directory) is refused at once.
        second = await trio.run_process(
            [sys.executable, "-m", "boltmq.cli", "cluster", "-f", str(path)],
            cwd=ROOT, env=env, capture_stdout=True, capture_stderr=True, check=False,
        )  # fmt: skip
        assert second.returncode == 1
        [refusal] = second.stderr.decode().splitlines()
        assert f"in use by the launcher with pid {launcher.pid}" in refusal, refusal
        state = json.loads((tmp_path / "data" / STATE_FILE).read_text())
        assert state["pid"] == launcher.pid  # its state file untouched

        # kill -9 of a node: one line on the launcher's stderr, then it is back.
        pids = {node["name"]: node["pid"] for node in state["nodes"]}
        seen = len(lines)
        os.kill(pids["broker-a-1"], signal.SIGKILL)

        def back() -> bool:
            return any("node broker-a-1 " in line and ") running: pid" in line
                       for line in lines[seen:])  # fmt: skip

        await wait_until(back, 60, "broker-a-1 running again")
        about_it = [line for line in lines[seen:] if "broker-a-1" in line]
        assert len(about_it) == 2, about_it
        assert "was killed by SIGKILL; restarting it" in about_it[0], about_it
        assert alive(pids["broker-a-0"]) and alive(pids["registry-1"])
        launcher.send_signal(signal.SIGTERM)
        with trio.fail_after(60):
            code = await launcher.wait()
        nursery.cancel_scope.cancel()
    text = "\n".join(lines)
    assert code == 0, text[-3000:]
    assert "Traceback" not in text and "ExceptionGroup" not in text, text


async def test_a_node_that_fails_to_start_is_given_up_with_its_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, _ports = write_small_spec(tmp_path)
    (tmp_path / "not-a-directory").write_text("a file where the slave's store should be\n")
    path.write_text(path.read_text() + 'storePathRootDir = "not-a-directory"\n')
    caplog.set_level("INFO", logger="boltmq.launcher")
    async with boltmq.launch(path) as cluster:
        assert cluster.states["broker-a-1"].status == "given up"
        assert cluster.states["broker-a-0"].status == "running"
    [given_up] = [r.message for r in caplog.records if ") given up: " in r.message]
    assert given_up.startswith("node broker-a-1 (SLAVE"), given_up
    assert "exited with code 1 before it was ready: " in given_up, given_up
    assert "not-a-directory" in given_up, given_up
    assert not any("cluster of 3 nodes up" in r.message for r in caplog.records)
    assert any(
        "cluster of 3 nodes started incomplete: node broker-a-1 given up" in r.message
        for r in caplog.records
    )
