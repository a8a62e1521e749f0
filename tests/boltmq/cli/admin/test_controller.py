"""The controller verbs (getControllerMetaData, getSyncStateSet, electMaster) against a real
controller, and the admin client's controller calls.

The controller runs on a loopback ephemeral port in a thread of its own (the command line runs
its own trio loop). Brokers join it as a controller-mode broker does, over the wire (next id,
apply, register, heartbeat, elect, SyncStateSet change); nothing listens at their addresses.
A stand-in follower answers CONTROLLER_NOT_LEADER naming the leader, as a Raft follower does.
Every wait has a deadline.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from actors.controller import ControllerConfig, open_controller
from client import Admin, MQClientError
from protocol.client import RemotingClient
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.connection import Connection, Dispatcher
from protocol.server import RemotingServer
from tests.actors.controller.helpers import CLUSTER, GROUP, alter, elect, heartbeat, join
from tests.boltmq.cli.admin.helpers import admin_json, run_admin
from tests.ports import free_port


class ControllerThread:
    """A controller served by a trio loop in a thread; its group broker-a has brokers 1
    (master) and 2, both in the SyncStateSet, alive for a minute."""

    def __init__(self) -> None:
        self.address = ""
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)

    def __enter__(self) -> ControllerThread:
        self._thread.start()
        assert self._ready.wait(30), "the controller did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None and self._stop is not None
        trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(30)

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        config = ControllerConfig(
            listen_port=0, scan_not_active_broker_interval=60_000, controller_store_path=""
        )
        async with open_controller(config) as controller, RemotingClient() as client:
            address = self.address = controller.address
            with trio.fail_after(20):
                for _ in range(2):
                    broker_id = await join(client, address)
                    assert (
                        await heartbeat(client, address, broker_id, timeout_ms=60_000)
                    ).code == 0
                assert (await elect(client, address, 1)).code == ResponseCode.SUCCESS
                added = await alter(client, address, master=1, epoch=1, members=[1, 2], set_epoch=1)
                assert added.code == ResponseCode.SUCCESS, added.remark
            self._ready.set()
            await self._stop.wait()


@pytest.fixture
def controller() -> Iterator[ControllerThread]:
    with ControllerThread() as running:
        yield running


def test_get_controller_metadata(controller: ControllerThread, capsys: Any) -> None:
    meta = admin_json(capsys, "127.0.0.1:1", "getControllerMetaData", "-a", controller.address)
    assert meta["isLeader"] is True
    assert meta["controllerLeaderAddress"] == controller.address
    code, out, err = run_admin(capsys, None, "getControllerMetaData", "-a", controller.address)
    assert code == 0, err
    assert "#ControllerLeaderAddress" in out and controller.address in out


def test_get_sync_state_set_shows_master_epochs_and_replicas(
    controller: ControllerThread, capsys: Any
) -> None:
    groups = admin_json(capsys, "127.0.0.1:1", "getSyncStateSet", "-a", controller.address,
                        "-b", GROUP)  # fmt: skip
    assert len(groups) == 1
    group = groups[0]
    assert (group["brokerName"], group["masterBrokerId"], group["masterEpoch"]) == (GROUP, 1, 1)
    assert group["syncStateSetEpoch"] == 2 and group["syncStateSetNums"] == 2
    assert {(r["brokerId"], r["state"], r["alive"]) for r in group["replicas"]} == {
        (1, "InSyncReplica", True), (2, "InSyncReplica", True),
    }  # fmt: skip
    code, out, err = run_admin(capsys, None, "getSyncStateSet", "-a", controller.address,
                               "-b", GROUP)  # fmt: skip
    assert code == 0, err
    assert "#MasterBrokerId" in out and "InSyncReplica" in out


def test_elect_master_moves_the_master_and_bumps_the_epoch(
    controller: ControllerThread, capsys: Any
) -> None:
    elected = admin_json(capsys, "127.0.0.1:1", "electMaster", "-a", controller.address,
                         "-c", CLUSTER, "-bn", GROUP, "-b", "2")  # fmt: skip
    assert (elected["masterBrokerId"], elected["masterEpoch"]) == (2, 2)
    assert elected["brokerMasterAddr"] == "127.0.0.1:20002"
    assert elected["syncStateSet"] == [2]
    after = admin_json(capsys, "127.0.0.1:1", "getSyncStateSet", "-a", controller.address,
                       "-b", GROUP)  # fmt: skip
    assert (after[0]["masterBrokerId"], after[0]["masterEpoch"]) == (2, 2)


def test_clear_errors(controller: ControllerThread, capsys: Any) -> None:
    code, _, err = run_admin(capsys, None, "getSyncStateSet", "-a", controller.address,
                             "-b", "no-such-group")  # fmt: skip
    assert code == 1 and "no-such-group" in err, err
    dead = f"127.0.0.1:{free_port()}"
    code, _, err = run_admin(capsys, None, "getControllerMetaData", "-a", dead)
    assert code == 1 and "no controller answered" in err and dead in err, err
    code, _, err = run_admin(capsys, None, "getSyncStateSet", "-a", controller.address)
    assert code == 2 and "-b BROKER_NAME or -c CLUSTER" in err, err
    # A broker id the controller does not know is refused with its reason.
    code, _, err = run_admin(capsys, None, "electMaster", "-a", controller.address,
                             "-c", CLUSTER, "-bn", GROUP, "-b", "9")  # fmt: skip
    assert code == 1 and "CONTROLLER_" in err, err


async def test_an_election_sent_to_a_follower_goes_to_the_leader_it_names() -> None:
    config = ControllerConfig(
        listen_port=0, scan_not_active_broker_interval=60_000, controller_store_path=""
    )
    async with open_controller(config) as controller, RemotingClient() as client:
        leader = controller.address
        with trio.fail_after(20):
            for _ in range(2):
                broker_id = await join(client, leader)
                assert (await heartbeat(client, leader, broker_id, timeout_ms=60_000)).code == 0
            assert (await elect(client, leader, 1)).code == ResponseCode.SUCCESS
            assert (await alter(client, leader, 1, 1, [1, 2], 1)).code == ResponseCode.SUCCESS
            follower = serve_follower(leader)
            async with trio.open_nursery() as nursery:
                port = await nursery.start(follower.serve_tcp, 0, "127.0.0.1")
                stand_in = f"127.0.0.1:{port}"
                async with Admin(namesrv_addr="127.0.0.1:1") as admin:
                    # The first address is gone, the second a follower: the leader answers.
                    dead = f"127.0.0.1:{free_port()}"
                    header, body = await admin.elect_master(f"{dead};{stand_in}", CLUSTER, GROUP, 2)
                    assert (header.master_broker_id, header.master_epoch) == (2, 2)
                    assert body.sync_state_set == [2]
                    with pytest.raises(MQClientError) as refused:
                        await admin.sync_state_data(leader, ["nope"])
                    assert "nope" in str(refused.value)
                nursery.cancel_scope.cancel()


def serve_follower(leader: str) -> RemotingServer:
    """A stand-in Raft follower: every write is answered CONTROLLER_NOT_LEADER, its remark
    naming the leader's address."""
    dispatcher = Dispatcher()

    def not_leader(_connection: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(
            ResponseCode.CONTROLLER_NOT_LEADER, f"not the controller leader; the leader is {leader}"
        )

    dispatcher.register(RequestCode.CONTROLLER_ELECT_MASTER, not_leader)
    return RemotingServer(dispatcher)
