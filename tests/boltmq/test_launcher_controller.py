"""The launcher with controller-mode nodes: a [[controller]] node as a process of its own,
started before the registries, restarted when it dies, answering the controller's codes.

Loopback, free ports, data in tmp_path; every wait has a deadline and polls a condition.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

import boltmq
from boltmq.launcher import RestartRules
from client import Admin
from tests.ports import free_port
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
