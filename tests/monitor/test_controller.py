"""The monitor in controller mode: each broker group's master, epochs and SyncStateSet from a
real controller, and an alert when a group's master changes (an election).

A registry and broker ``broker-a`` run in this process (boltmq.embedded, memory store), and a
controller beside them; the group's controller-mode members join the controller over the wire
as brokers do (ids 1 and 2 at addresses where nothing listens). Loopback, ephemeral ports,
a deadline on every wait.
"""

from __future__ import annotations

import io
from pathlib import Path

import trio
from rich.console import Console

import boltmq
from actors.controller import ControllerConfig, open_controller
from client import ClientInstance
from monitor import Collector, Model
from monitor.views import snapshot_renderable
from protocol.client import RemotingClient
from protocol.codes import ResponseCode
from tests.actors.controller.helpers import alter, elect, heartbeat, join
from tests.ports import free_port


def render(snapshot: object) -> str:
    """The ``--once`` text of a snapshot."""
    out = io.StringIO()
    Console(file=out, width=220, color_system=None).print(snapshot_renderable(snapshot))  # type: ignore[arg-type]
    return out.getvalue()


async def test_groups_epochs_and_an_election_alert(tmp_path: Path) -> None:
    config = ControllerConfig(
        listen_port=0, scan_not_active_broker_interval=60_000, controller_store_path=""
    )
    async with (
        boltmq.embedded(tmp_path, store="memory", grpc=False, broker_name="broker-a") as cluster,
        open_controller(config) as controller,
        RemotingClient() as client,
        ClientInstance(cluster.registry_address) as instance,
    ):
        address = controller.address
        with trio.fail_after(30):
            for _ in range(2):
                broker_id = await join(client, address)
                assert (await heartbeat(client, address, broker_id, timeout_ms=60_000)).code == 0
            assert (await elect(client, address, 1)).code == ResponseCode.SUCCESS
            assert (await alter(client, address, 1, 1, [1, 2], 1)).code == ResponseCode.SUCCESS

            collector = Collector(instance, controller_addr=address)
            model = Model()
            first = model.update(await collector.sample())
            [row] = first.controller_groups
            assert (row.broker_name, row.master_broker_id, row.master_epoch) == ("broker-a", 1, 1)
            assert row.master_address == "127.0.0.1:20001"
            assert (row.sync_state_set, row.sync_state_set_epoch) == ([1, 2], 2)
            assert row.controller_leader == address
            assert not [a for a in first.alerts if a.kind == "master elected"]
            text = render(first)
            assert "controller" in text and "{1, 2}" in text

            # An operator moves the master: the next refresh shows it and alerts once.
            moved = await elect(client, address, 2, designate=True)
            assert moved.code == ResponseCode.SUCCESS, moved.remark
            second = model.update(await collector.sample())
            [row] = second.controller_groups
            assert (row.master_broker_id, row.master_epoch, row.sync_state_set) == (2, 2, [2])
            [alert] = [a for a in second.alerts if a.kind == "master elected"]
            assert alert.subject == "broker-a"
            assert alert.message == "master now 2 (127.0.0.1:20002), epoch 2"
            assert "master now 2 (127.0.0.1:20002), epoch 2" in render(second)
            assert second.to_dict()["controller_groups"][0]["master_epoch"] == 2
            # The alert stays for election_alert_seconds, not for ever (sample's wall clock).
            third = model.update(await collector.sample())
            assert [a.message for a in third.alerts if a.kind == "master elected"] == [
                alert.message
            ]


async def test_a_controller_that_does_not_answer_is_an_alert(tmp_path: Path) -> None:
    dead = f"127.0.0.1:{free_port()}"
    async with (
        boltmq.embedded(tmp_path, store="memory", grpc=False) as cluster,
        ClientInstance(cluster.registry_address, timeout=2.0) as instance,
    ):
        with trio.fail_after(30):
            snapshot = Model().update(await Collector(instance, controller_addr=dead).sample())
    [row] = snapshot.controller_groups
    assert row.error is not None and "no controller answered" in row.error
    assert [a.subject for a in snapshot.alerts if a.kind == "controller not answering"] == [dead]
    # Without a controller the snapshot has no controller rows at all.
    assert snapshot.header.brokers == 1
