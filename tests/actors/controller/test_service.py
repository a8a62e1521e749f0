"""A served controller driven over the wire as brokers and operators drive it: every code,
its refusals, the leader's scan electing a new master and telling the group.

Rules: loopback only, port 0, `trio.fail_after` around every wait.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import trio

from actors.controller import ControllerConfig, open_controller
from actors.registry import RegistryConfig, open_registry
from protocol.bodies import BrokerReplicasInfo, ElectMasterResponseBody, SyncStateSet
from protocol.client import RemotingClient
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.connection import Connection, Dispatcher
from protocol.headers import (
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    CleanControllerBrokerDataRequestHeader,
    NotifyBrokerRoleChangedRequestHeader,
    decode_header,
)
from protocol.server import RemotingServer
from supervisors.config import parse_properties
from supervisors.config_file import ConfigFileError

from .helpers import (
    CLUSTER,
    GROUP,
    Beating,
    alter,
    call,
    elect,
    heartbeat,
    join,
    register,
    replica_info,
    sync_state_data,
)


def fast_config(store: str = "") -> ControllerConfig:
    """Port 0, a 0.1 s scan, state in memory (or in ``store``)."""
    return ControllerConfig(
        listen_port=0, scan_not_active_broker_interval=100, controller_store_path=store
    )


async def test_every_code_and_its_refusals() -> None:
    async with open_controller(fast_config()) as controller, RemotingClient() as client:
        address = controller.address
        assert await join(client, address) == 1
        assert await join(client, address) == 2
        # Another broker claiming id 1 is refused, naming the broker that holds it.
        taken = await call(
            client,
            address,
            RequestCode.CONTROLLER_APPLY_BROKER_ID,
            ApplyBrokerIdRequestHeader(
                cluster_name=CLUSTER,
                broker_name=GROUP,
                applied_broker_id=1,
                register_check_code="10.9.9.9:10911;7",
            ),
        )
        assert taken.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
        unknown = await register(client, address, 9)
        assert unknown.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED

        for broker_id in (1, 2):
            assert (await heartbeat(client, address, broker_id, timeout_ms=60_000)).code == 0
        first = await elect(client, address, 1)
        assert first.code == ResponseCode.SUCCESS, first.remark
        assert (first.field("masterBrokerId"), first.field("masterEpoch")) == ("1", "1")
        body = ElectMasterResponseBody.from_json(first.body or b"")
        assert body.sync_state_set == [1]
        still = await elect(client, address, 2)
        assert still.code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST
        assert still.field("masterBrokerId") == "1"
        registered = await register(client, address, 2)
        assert registered.field("masterAddress") == "127.0.0.1:20001"
        assert SyncStateSet.from_json(registered.body or b"").sync_state_set_epoch == 1

        # SyncStateSet changes: stale master epoch, stale set epoch, not the master, success.
        assert (await alter(client, address, 1, 0, [1, 2], 1)).code == (
            ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH
        )
        assert (await alter(client, address, 1, 1, [1, 2], 0)).code == (
            ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
        )
        assert (await alter(client, address, 2, 1, [1, 2], 1)).code == (
            ResponseCode.CONTROLLER_INVALID_MASTER
        )
        done = await alter(client, address, 1, 1, [1, 2], 1)
        assert done.code == 0 and done.field("newSyncStateSetEpoch") == "2"

        info = await replica_info(client, address)
        assert info.code == 0
        assert (info.field("masterBrokerId"), info.field("masterEpoch")) == ("1", "1")
        assert SyncStateSet.from_json(info.body or b"").sync_state_set == [1, 2]

        data = await sync_state_data(client, address, GROUP, "broker-unknown")
        table = BrokerReplicasInfo.from_json(data.body or b"").replicas_info_table
        assert list(table) == [GROUP]
        assert [(r.broker_id, r.alive) for r in table[GROUP].in_sync_replicas] == [
            (1, True),
            (2, True),
        ]

        meta = await call(client, address, RequestCode.CONTROLLER_GET_METADATA_INFO)
        assert meta.field("isLeader") == "true"
        assert meta.field("controllerLeaderAddress") == address
        config = await call(client, address, RequestCode.GET_CONTROLLER_CONFIG)
        properties = parse_properties((config.body or b"").decode())
        assert properties["scanNotActiveBrokerInterval"] == "100"

        # Designated by an operator: broker 2 is in sync and alive.
        designated = await elect(client, address, 2, designate=True)
        assert designated.code == 0 and designated.field("masterEpoch") == "2"

        # Cleaning a group that has a master is refused; a named live broker too.
        clean = CleanControllerBrokerDataRequestHeader(cluster_name=CLUSTER, broker_name=GROUP)
        refused = await call(client, address, RequestCode.CLEAN_BROKER_DATA, clean)
        assert refused.code == ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
        living = CleanControllerBrokerDataRequestHeader(
            cluster_name=CLUSTER, broker_name=GROUP, is_clean_living_broker=True
        )
        assert (await call(client, address, RequestCode.CLEAN_BROKER_DATA, living)).code == 0
        gone = await replica_info(client, address)
        assert gone.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST

        # Malformed requests get a clear answer, and the controller keeps serving.
        no_id = BrokerHeartbeatRequestHeader(
            cluster_name=CLUSTER, broker_addr="x:1", broker_name=GROUP
        )
        bad_beat = await call(client, address, RequestCode.BROKER_HEARTBEAT, no_id)
        assert bad_beat.code == ResponseCode.CONTROLLER_INVALID_REQUEST
        assert "brokerId" in (bad_beat.remark or "")
        bad_body = await call(
            client, address, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=b"{nope"
        )
        assert bad_body.code == ResponseCode.CONTROLLER_INVALID_REQUEST
        bad_alter = await call(
            client,
            address,
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
            None,
            b"[]",
        )
        assert bad_alter.code != ResponseCode.SUCCESS
        stats = controller.statistics()
        assert stats.is_leader and stats.heartbeats >= 2
        assert stats.elections[(CLUSTER, GROUP, "broker")] == 1
        assert stats.elections[(CLUSTER, GROUP, "admin")] == 1


class NoticeBox:
    """A fake broker's remoting port that records NOTIFY_BROKER_ROLE_CHANGED."""

    def __init__(self) -> None:
        self.dispatcher = Dispatcher()
        self.notices: list[tuple[NotifyBrokerRoleChangedRequestHeader, SyncStateSet]] = []
        self.dispatcher.register(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, self._notice)

    def _notice(self, conn: Connection, request: RemotingCommand) -> None:
        header = decode_header(NotifyBrokerRoleChangedRequestHeader, request.ext_fields)
        self.notices.append((header, SyncStateSet.from_json(request.body or b"")))

    async def wait_epoch(
        self, epoch: int
    ) -> tuple[NotifyBrokerRoleChangedRequestHeader, SyncStateSet]:
        """The first notice of ``epoch`` (polled: notices are oneway)."""
        while True:
            for header, members in self.notices:
                if header.master_epoch == epoch:
                    return header, members
            await trio.sleep(0.02)


async def test_scan_elects_when_the_master_goes_silent_and_tells_the_group() -> None:
    box = NoticeBox()
    server = RemotingServer(box.dispatcher)
    async with (
        open_controller(fast_config()) as controller,
        RemotingClient() as client,
        trio.open_nursery() as nursery,
    ):
        port = await nursery.start(server.serve_tcp, 0, "127.0.0.1")
        slave_addr = f"127.0.0.1:{port}"
        address = controller.address
        beating = Beating(client, [address])
        master = await join(client, address)
        slave = await join(client, address, broker_addr=slave_addr)
        beating.add(master, max_offset=5000)
        beating.add(slave, slave_addr, max_offset=4000)
        await beating.beat_once()
        nursery.start_soon(beating.run)
        assert (await elect(client, address, master)).code == 0
        with trio.fail_after(10):  # every election is told to the group's live brokers
            first, _ = await box.wait_epoch(1)
        assert first.master_broker_id == master
        assert (await alter(client, address, master, 1, [master, slave], 1)).code == 0

        beating.silence(master)
        with trio.fail_after(15):
            header, members = await box.wait_epoch(2)
        assert (header.master_broker_id, header.master_address) == (slave, slave_addr)
        assert header.master_epoch == 2 and members.sync_state_set == [slave]
        info = await replica_info(client, address)
        assert (info.field("masterBrokerId"), info.field("masterEpoch")) == (str(slave), "2")
        record = controller.election_log[-1]
        assert record.trigger == "scan" and record.old_master_broker_id == master
        assert (record.old_master_max_offset, record.new_master_max_offset) == (5000, 4000)
        assert record.may_lose == 1000

        # The last broker goes silent too: no candidate, so no master (epoch unchanged).
        beating.silence(slave)
        with trio.fail_after(15):
            while (await replica_info(client, address)).field("masterBrokerId") is not None:
                await trio.sleep(0.05)
        assert (await replica_info(client, address)).field("masterEpoch") == "2"
        nursery.cancel_scope.cancel()


async def test_get_sync_state_data_body_must_name_broker_names() -> None:
    async with open_controller(fast_config()) as controller, RemotingClient() as client:
        reply = await call(
            client,
            controller.address,
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
            body=orjson.dumps({"brokerName": GROUP}),
        )
        assert reply.code == ResponseCode.CONTROLLER_INVALID_REQUEST
        assert "JSON list" in (reply.remark or "")


async def test_embedded_in_the_registry_serves_on_the_registry_port() -> None:
    registry_config = RegistryConfig(
        listen_port=0,
        bind_address="127.0.0.1",
        kv_config_path=None,
        enable_controller_in_namesrv=True,
    )
    async with (
        open_registry(registry_config, fast_config()) as registry,
        RemotingClient() as client,
    ):
        address = registry.address
        assert registry.controller is not None and registry.controller.address == address
        broker_id = await join(client, address)
        assert (await heartbeat(client, address, broker_id, timeout_ms=60_000)).code == 0
        elected = await elect(client, address, broker_id)
        assert elected.code == 0 and elected.field("masterBrokerId") == str(broker_id)
        meta = await call(client, address, RequestCode.CONTROLLER_GET_METADATA_INFO)
        assert meta.field("controllerLeaderAddress") == address
        # The registry's own codes are still served on the same port.
        cluster = await call(client, address, RequestCode.GET_BROKER_CLUSTER_INFO)
        assert cluster.code == ResponseCode.SUCCESS


async def test_a_registry_without_the_key_serves_no_controller_code() -> None:
    config = RegistryConfig(listen_port=0, bind_address="127.0.0.1", kv_config_path=None)
    async with open_registry(config) as registry, RemotingClient() as client:
        assert registry.controller is None
        reply = await call(client, registry.address, RequestCode.CONTROLLER_GET_METADATA_INFO)
        assert reply.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


async def test_a_restarted_controller_keeps_its_state_file(tmp_path: Path) -> None:
    store = str(tmp_path / "controller")
    async with open_controller(fast_config(store)) as controller, RemotingClient() as client:
        broker_id = await join(client, controller.address)
        await heartbeat(client, controller.address, broker_id, timeout_ms=60_000)
        assert (await elect(client, controller.address, broker_id)).code == 0
    assert (tmp_path / "controller" / "replicas.json").exists()
    async with open_controller(fast_config(store)) as controller, RemotingClient() as client:
        # The id stays the broker's: registering works at once, the epoch is kept.
        assert (await register(client, controller.address, broker_id)).code == 0
        info = await replica_info(client, controller.address)
        assert (info.field("masterBrokerId"), info.field("masterEpoch")) == (str(broker_id), "1")
        assert await join(client, controller.address) == broker_id + 1


async def test_a_state_file_that_does_not_parse_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / "replicas.json").write_bytes(b"{broken")
    (tmp_path / "replicas.json.bak").write_bytes(b"[]")
    with pytest.raises(ConfigFileError, match=r"replicas\.json"):
        async with open_controller(fast_config(str(tmp_path))):
            pass


async def test_an_embedded_controller_keeps_its_state_beside_the_kv_config(
    tmp_path: Path,
) -> None:
    config = RegistryConfig(
        listen_port=0,
        bind_address="127.0.0.1",
        kv_config_path=str(tmp_path / "namesrv" / "kvConfig.json"),
        enable_controller_in_namesrv=True,
    )
    async with open_registry(config) as registry, RemotingClient() as client:
        assert await join(client, registry.address) == 1
    assert (tmp_path / "namesrv" / "controller" / "replicas.json").exists()


async def test_update_controller_config_changes_runtime_keys_only() -> None:
    async with open_controller(fast_config()) as controller, RemotingClient() as client:
        address = controller.address

        async def update(text: str) -> RemotingCommand:
            return await call(
                client, address, RequestCode.UPDATE_CONTROLLER_CONFIG, body=text.encode()
            )

        done = await update("enableElectUncleanMaster=true\nscanNotActiveBrokerInterval=250\n")
        assert done.code == ResponseCode.SUCCESS, done.remark
        assert controller.config.enable_elect_unclean_master
        assert controller.config.scan_not_active_broker_interval == 250
        fixed = await update("listenPort=1")
        assert fixed.code == ResponseCode.NO_PERMISSION and "listenPort" in (fixed.remark or "")
        bad = await update("scanNotActiveBrokerInterval=-5")
        assert bad.code == ResponseCode.SYSTEM_ERROR
        assert "scanNotActiveBrokerInterval" in (bad.remark or "")
        assert controller.config.scan_not_active_broker_interval == 250  # nothing changed
        unknown = await update("noSuchKey=1")
        assert unknown.code == ResponseCode.SYSTEM_ERROR and "noSuchKey" in (unknown.remark or "")
        text = (await call(client, address, RequestCode.GET_CONTROLLER_CONFIG)).body or b""
        assert parse_properties(text.decode())["enableElectUncleanMaster"] == "true"
