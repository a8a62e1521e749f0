"""The launcher with controller-mode nodes: a [[controller]] node as a process of its own,
started before the registries, restarted when it dies, answering the controller's codes; and
a controller-mode broker group whose master the controller elects (admin's controller verbs
against it).

Loopback, free ports, data in tmp_path; every wait has a deadline and polls a condition.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

import boltmq
from boltmq import cli
from boltmq.launcher import RestartRules
from client import Admin
from monitor import Collector, Model
from tests.ports import free_port, free_port_pair
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(180)


async def test_a_controller_node_starts_first_and_comes_back_after_a_kill(
    tmp_path: Path,
) -> None:
    controller_port, registry_port = free_port(), free_port()
    path = tmp_path / "cluster.toml"
    path.write_text(f"""
[[controller]]
listenPort = {controller_port}
[[registry]]
listenPort = {registry_port}
inProcess = true
""")
    rules = RestartRules(intensity=2, period=60.0, backoff_initial=0.05, backoff_max=0.2)
    async with boltmq.launch(path, restart_rules=rules) as cluster:
        assert cluster.spec.names() == ["controller-1", "registry-1"]
        address = cluster.address("controller-1")
        assert address == f"127.0.0.1:{controller_port}"
        async with Admin(namesrv_addr=cluster.namesrv_addr) as admin:
            meta = await admin.controller_metadata(address)
            assert (meta.is_leader, meta.controller_leader_address) == (True, address)
            first = cluster.pid("controller-1")
            cluster.kill("controller-1")
            state = cluster.states["controller-1"]
            await wait_until(
                lambda: state.restarts == 1 and state.status == "running", 30, "a restart"
            )
            assert cluster.pid("controller-1") not in (None, first)
            with trio.fail_after(30):
                meta = await admin.controller_metadata(address)
            assert meta.is_leader


async def test_a_launched_controller_mode_group_gets_a_master_and_its_epochs_show(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    controller_port, registry_port = free_port(), free_port()
    first, second = free_port_pair(), free_port_pair()
    path = tmp_path / "cluster.toml"
    path.write_text(f"""
[defaults]
fastPortEnable = false
mapedFileSizeCommitLog = {4 << 20}
brokerHeartbeatInterval = 300
controllerHeartBeatTimeoutMills = 3000
syncBrokerMetadataPeriod = 1000
checkSyncStateSetPeriod = 1000
[[controller]]
listenPort = {controller_port}
scanNotActiveBrokerInterval = 500
[[registry]]
listenPort = {registry_port}
[broker.broker-c]
controllerMode = true
[[broker.broker-c.node]]
listenPort = {first}
haListenPort = {first + 1}
[[broker.broker-c.node]]
listenPort = {second}
haListenPort = {second + 1}
""")
    async with boltmq.launch(path) as cluster:
        nodes = {cluster.address("broker-c-n1"), cluster.address("broker-c-n2")}
        controller = cluster.address("controller-1")
        async with Admin(namesrv_addr=cluster.namesrv_addr) as admin:
            # The controller elects one of the two; it registers as broker id 0.
            with trio.fail_after(60):
                while True:
                    groups = await admin.group_addresses(cluster="DefaultCluster")
                    master = groups.get("broker-c", {}).get(0)
                    if master is not None and len(groups["broker-c"]) == 2:
                        break
                    await trio.sleep(0.1)
            assert master in nodes and set(groups["broker-c"].values()) == nodes
            info = await admin.sync_state_data(controller, ["broker-c"])
            replicas = info.replicas_info_table["broker-c"]
            assert replicas.master_address == master and replicas.master_epoch >= 1
            cache = await admin.broker_epoch_cache(master)
            assert cache.broker_name == "broker-c" and cache.epoch_list
            assert cache.epoch_list[-1].epoch == replicas.master_epoch
            # The monitor finds the controller through the brokers' runtime info by itself.
            snapshot = Model().update(await Collector(admin.instance).sample())
            [row] = snapshot.controller_groups
            assert (row.broker_name, row.master_address) == ("broker-c", master)
            assert row.controller_leader == controller and len(row.sync_state_set) >= 1

        # The command line shows the same, as mqadmin prints it.
        def admin_cli(*argv: str) -> tuple[int, str, str]:
            code = cli.main(["admin", *argv, "-n", cluster.namesrv_addr])
            captured = capsys.readouterr()
            return code, captured.out, captured.err

        capsys.readouterr()
        code, out, err = await trio.to_thread.run_sync(
            admin_cli, "getBrokerEpoch", "-b", "broker-c"
        )
        assert code == 0, err
        assert "#brokerAddr" in out and master in out
        code, out, err = await trio.to_thread.run_sync(
            admin_cli, "getSyncStateSet", "-a", controller, "-c", "DefaultCluster"
        )
        assert code == 0, err
        assert "broker-c" in out and master in out


async def test_in_process_a_registry_embedding_the_controller_elects_a_groups_master(
    tmp_path: Path,
) -> None:
    registry_port, first, second = free_port(), free_port_pair(), free_port_pair()
    path = tmp_path / "cluster.toml"
    path.write_text(f"""
inProcess = true
[defaults]
fastPortEnable = false
mapedFileSizeCommitLog = {4 << 20}
brokerHeartbeatInterval = 300
controllerHeartBeatTimeoutMills = 3000
[[registry]]
listenPort = {registry_port}
enableControllerInNamesrv = true
[broker.broker-d]
controllerMode = true
[[broker.broker-d.node]]
listenPort = {first}
haListenPort = {first + 1}
[[broker.broker-d.node]]
listenPort = {second}
haListenPort = {second + 1}
""")
    async with boltmq.launch(path) as cluster, Admin(namesrv_addr=cluster.namesrv_addr) as admin:
        registry = cluster.address("registry-1")
        with trio.fail_after(60):
            while True:
                data = (await admin.cluster_info()).broker_addr_table.get("broker-d")
                if data is not None and 0 in data.broker_addrs:
                    break
                await trio.sleep(0.1)
        info = await admin.sync_state_data(registry, ["broker-d"])
        assert info.replicas_info_table["broker-d"].master_epoch >= 1
    # The embedded controller kept its state under the spec's data directory.
    assert (tmp_path / "data" / "registry-1" / "controller").is_dir()
