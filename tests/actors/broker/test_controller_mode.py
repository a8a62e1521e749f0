"""Controller mode (RIP-44) on real parts: a registry, a controller and brokers on loopback.

The controller decides who is master: ids are assigned and kept in ``brokerIdentity``, the
master registers with the registry as broker id 0, a slave follows it, a dead master is
replaced in place (no process restart) and comes back as a slave, and a master cut from the
controller stops taking writes within controllerHeartBeatTimeoutMills/2 + one heartbeat.

Rules: loopback only, ephemeral ports, real stores in ``tmp_path``, every wait under a
deadline. The timings are short (200 ms heartbeats, 3 s heartbeat timeout, 300 ms scans)
with generous deadlines for a busy machine.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from actors.broker.broker import Broker
from actors.broker.config import BrokerConfig, ConfigError
from actors.broker.ha.controller_mode import ControllerRole, write_broker_identity
from actors.controller.config import ControllerConfig
from actors.controller.service import Controller, open_controller
from actors.registry import Registry
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.bodies import ClusterInfo, EpochEntryCache, KVTable
from storage import BrokerRole, FileMessageStore
from tests.actors.broker.ha.helpers import SMALL_FILES, commit_log_bytes, running_registry
from tests.actors.broker.helpers import call, send_request
from tests.ports import free_port
from tests.support.waiting import wait_until

HEARTBEAT_MS = 200
TIMEOUT_MS = 3000


def controller_config(port: int = 0, **settings: Any) -> ControllerConfig:
    """A single controller (no Raft) scanning every 300 ms, its state in memory only."""
    settings.setdefault("controller_store_path", "")
    return ControllerConfig(listen_port=port, scan_not_active_broker_interval=300, **settings)


def broker_config(root: Path, registry: str, controller: str, **settings: Any) -> BrokerConfig:
    """A controller-mode broker of ``broker-a`` (SYNC replication, every member of the
    SyncStateSet acknowledging) on an ephemeral port."""
    base: dict[str, Any] = {
        "listen_port": 0,
        "bind_address": "127.0.0.1",
        "fast_port_enable": False,
        "namesrv_addr": registry,
        "store_path_root_dir": str(root),
        "broker_role": BrokerRole.SYNC_MASTER,
        # Every member of the SyncStateSet acknowledges (a master alone, when it is alone).
        "all_ack_in_sync_state_set": True,
        "enable_controller_mode": True,
        "controller_addr": controller,
        "broker_heartbeat_interval": HEARTBEAT_MS,
        "controller_heart_beat_timeout_mills": TIMEOUT_MS,
        "sync_broker_metadata_period": 500,
        "check_sync_state_set_period": 500,
        **SMALL_FILES,
    }
    return BrokerConfig(**{**base, **settings})


class BrokerRunner:
    """One broker run in a task of ``nursery``, so a test can stop it and start it again."""

    def __init__(self, config: BrokerConfig, nursery: trio.Nursery) -> None:
        self.config, self.nursery = config, nursery
        self.scope = trio.CancelScope()
        self.broker: Broker | None = None

    async def start(self) -> Broker:
        self.scope = trio.CancelScope()
        self.broker = await self.nursery.start(self._run)
        return self.broker

    async def kill(self) -> None:
        """Stop it at once: cancelled, its heartbeats end (the controller notices later)."""
        self.scope.cancel()
        with trio.fail_after(20):
            while self.broker is not None:
                await trio.sleep(0.01)

    async def _run(self, *, task_status: trio.TaskStatus[Broker]) -> None:
        with self.scope:
            try:
                broker = Broker(self.config)
                async with trio.open_nursery() as nursery:
                    await nursery.start(broker.run)
                    task_status.started(broker)
                    await trio.sleep_forever()
            finally:
                self.broker = None


@asynccontextmanager
async def group_parts(
    **settings: Any,
) -> AsyncIterator[tuple[Registry, Controller, RemotingClient, trio.Nursery]]:
    async with (
        running_registry() as registry,
        open_controller(controller_config(**settings)) as controller,
        RemotingClient() as client,
        trio.open_nursery() as nursery,
    ):
        yield registry, controller, client, nursery
        nursery.cancel_scope.cancel()


async def route_master(client: RemotingClient, registry: str) -> str | None:
    """The address the registry names as broker-a's id 0."""
    answer = await call(
        client, registry, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
    )
    info = ClusterInfo.from_json(answer.body or b"{}")
    data = info.broker_addr_table.get("broker-a")
    return None if data is None else data.broker_addrs.get(0)


def linked_slaves(master: Broker) -> set[int]:
    """Broker ids of the slaves linked to ``master``'s HA service."""
    service = master.ha.service
    assert service is not None
    return {c.slave_broker_id for c in service.connections.values() if c.slave_broker_id}


def role(broker: Broker) -> ControllerRole | None:
    link = broker.controller
    return None if link is None else link.role


async def send_ok(client: RemotingClient, broker: Broker, body: bytes) -> bool:
    response = await call(client, broker.address, send_request("FailoverTopic", body))
    return response.code == ResponseCode.SUCCESS


# -- start-time refusals -------------------------------------------------------------------


def test_bad_controller_mode_configs_are_refused_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="controllerAddr"):
        BrokerConfig(enable_controller_mode=True)
    with pytest.raises(ConfigError, match="storeType"):
        BrokerConfig(enable_controller_mode=True, controller_addr="127.0.0.1:9878",
                     store_type="memory")  # fmt: skip
    with pytest.raises(ConfigError, match="minInSyncReplicas"):
        BrokerConfig(enable_controller_mode=True, controller_addr="127.0.0.1:9878",
                     all_ack_in_sync_state_set=True, min_in_sync_replicas=2)  # fmt: skip
    # The group may say how big it is: then two in-sync replicas can be asked for.
    BrokerConfig(enable_controller_mode=True, controller_addr="127.0.0.1:9878",
                 all_ack_in_sync_state_set=True, min_in_sync_replicas=2,
                 total_replicas=2)  # fmt: skip

    write_broker_identity(tmp_path / "brokerIdentity", "DefaultCluster", "broker-b", 3)
    config = broker_config(tmp_path, "", "127.0.0.1:9878")
    with pytest.raises(ConfigError, match=r"brokerName.*broker-b"):
        Broker(config)
    write_broker_identity(tmp_path / "brokerIdentity", "OtherCluster", "broker-a", 3)
    with pytest.raises(ConfigError, match=r"brokerClusterName.*OtherCluster"):
        Broker(broker_config(tmp_path, "", "127.0.0.1:9878"))


# -- a group of two: election, failover in place, the old master back as a slave -----------


async def test_master_dies_the_slave_takes_over_and_the_old_master_follows(
    tmp_path: Path,
) -> None:
    async with group_parts() as (registry, controller, client, nursery):
        runners = [
            BrokerRunner(broker_config(tmp_path / name, registry.address, controller.address),
                         nursery)
            for name in ("a", "b")
        ]  # fmt: skip
        with trio.fail_after(60):
            first = await runners[0].start()
            await wait_until(lambda: role(first) is ControllerRole.MASTER, 20, "a master")
            second = await runners[1].start()
            await wait_until(lambda: role(second) is ControllerRole.SLAVE, 20, "a slave")
            ids = {r.config.broker_identity_path.read_text() for r in runners}
            assert ids == {"DefaultCluster#broker-a#1", "DefaultCluster#broker-a#2"}
            await wait_until(lambda: route_master(client, registry.address), 20, "a route master")
            assert await route_master(client, registry.address) == first.address

            await wait_until(lambda: linked_slaves(first) == {2}, 20, "the slave linked")
            # Reported to the controller: the slave may now be elected, and every put waits
            # for it (allAckInSyncStateSet).
            link = first.controller
            assert link is not None
            await wait_until(lambda: link.sync_state_set == {1, 2}, 20, "the slave in sync")
            stats = first.statistics().controller
            assert stats is not None and (stats.role, stats.master_epoch) == ("master", 1)
            assert stats.sync_state_set == (1, 2) and not stats.fenced
            info = await call(
                client, first.address, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
            )
            table = KVTable.from_json(info.body or b"{}").table
            assert (table["controllerRole"], table["masterEpoch"]) == ("master", "1")
            assert table["syncStateSet"] == "1,2"
            for i in range(20):
                assert await send_ok(client, first, b"before %d" % i)
            assert second.store.get_max_phy_offset() == first.store.get_max_phy_offset()
            refused = await call(client, second.address, send_request("FailoverTopic", b"x"))
            assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert "slave" in (refused.remark or "")
            before = first.store.get_max_phy_offset()

            # The master dies: the slave is elected in place and takes writes as id 0.
            await runners[0].kill()
            await wait_until(lambda: role(second) is ControllerRole.MASTER, 20, "a new master")
            assert second.controller is not None and second.controller.master_epoch == 2
            await wait_until(
                lambda: route_master_is(client, registry.address, second.address), 20,
                "the new master as id 0 in the route",
            )  # fmt: skip
            await wait_until(lambda: send_ok(client, second, b"after"), 20, "a send taken")
            epochs = await call(
                client, second.address, RemotingCommand.request(RequestCode.GET_BROKER_EPOCH_CACHE)
            )
            cache = EpochEntryCache.from_json(epochs.body or b"{}")
            assert [(e.epoch, e.start_offset) for e in cache.epoch_list] == [(1, 0), (2, before)]

            # The old master comes back with its id and follows the new one.
            again = await runners[0].start()
            assert again.controller is not None
            await wait_until(lambda: role(again) is ControllerRole.SLAVE, 20, "old master follows")
            assert again.controller.broker_controller_id == 1
            await wait_until(
                lambda: again.store.get_max_phy_offset() == second.store.get_max_phy_offset(),
                20, "the old master caught up",
            )  # fmt: skip
            assert again.controller.epochs.last_epoch() == 2


async def route_master_is(client: RemotingClient, registry: str, address: str) -> bool:
    return await route_master(client, registry) == address


async def no_route_master(client: RemotingClient, registry: str) -> bool:
    return await route_master(client, registry) is None


# -- fencing -------------------------------------------------------------------------------


async def test_a_master_cut_from_the_controller_stops_taking_writes_within_the_bound(
    tmp_path: Path,
) -> None:
    port = free_port()
    async with (
        running_registry() as registry,
        RemotingClient() as client,
        trio.open_nursery() as nursery,
    ):
        controller_scope = trio.CancelScope()

        async def run_controller(*, task_status: trio.TaskStatus[None]) -> None:
            with controller_scope:
                async with open_controller(controller_config(port)):
                    task_status.started()
                    await trio.sleep_forever()

        await nursery.start(run_controller)
        config = broker_config(tmp_path, registry.address, f"127.0.0.1:{port}")
        runner = BrokerRunner(config, nursery)
        with trio.fail_after(60):
            broker = await runner.start()
            await wait_until(lambda: role(broker) is ControllerRole.MASTER, 20, "a master")
            await wait_until(
                lambda: route_master_is(client, registry.address, broker.address), 20,
                "the master as id 0",
            )  # fmt: skip
            assert await send_ok(client, broker, b"while the controller answers")

            controller_scope.cancel()
            cut = trio.current_time()
            link = broker.controller
            assert link is not None
            await wait_until(lambda: link.fenced, 20, "the master fenced")
            bound = (TIMEOUT_MS / 2 + HEARTBEAT_MS) / 1000
            # From the last heartbeat answer, at most one interval before the cut.
            assert trio.current_time() - cut <= bound + 1.0  # scheduling slack
            refused = await call(client, broker.address, send_request("FailoverTopic", b"x"))
            assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert "fenced" in (refused.remark or "")
            await wait_until(
                lambda: no_route_master(client, registry.address), 20,
                "the fenced master no longer id 0",
            )  # fmt: skip

            # A controller again (its state lost: one controller keeps it in memory):
            # the broker claims its id, is elected, and takes writes again.
            controller_scope = trio.CancelScope()
            await nursery.start(run_controller)
            await wait_until(lambda: link.is_master, 20, "master again")
            await wait_until(lambda: send_ok(client, broker, b"back"), 20, "writes again")
        nursery.cancel_scope.cancel()


# -- truncation ------------------------------------------------------------------------------


async def test_an_old_master_with_a_longer_tail_truncates_it_before_following(
    tmp_path: Path,
) -> None:
    # ASYNC replication, and the controller may elect a replica that is not in sync: the
    # old master's last sends never reach the new one (what an ASYNC master can lose).
    async with group_parts(enable_elect_unclean_master=True) as parts:
        registry, controller, client, nursery = parts
        runners = [
            BrokerRunner(broker_config(tmp_path / name, registry.address, controller.address,
                                       broker_role=BrokerRole.ASYNC_MASTER), nursery)
            for name in ("a", "b")
        ]  # fmt: skip
        with trio.fail_after(60):
            first = await runners[0].start()
            await wait_until(lambda: role(first) is ControllerRole.MASTER, 20, "a master")
            second = await runners[1].start()
            await wait_until(lambda: role(second) is ControllerRole.SLAVE, 20, "a slave")
            for i in range(5):
                assert await send_ok(client, first, b"shared %d" % i)
            await wait_until(
                lambda: second.store.get_max_phy_offset() == first.store.get_max_phy_offset(),
                20, "the slave caught up",
            )  # fmt: skip
            shared = second.store.get_max_phy_offset()

            # The slave goes; the master takes three more that nobody else has, then goes.
            await runners[1].kill()
            for i in range(3):
                assert await send_ok(client, first, b"tail %d" % i)
            tail = first.store.get_max_phy_offset()
            assert tail > shared
            await runners[0].kill()

            # The slave returns and is elected; the old master returns and cuts its tail.
            second = await runners[1].start()
            await wait_until(lambda: role(second) is ControllerRole.MASTER, 20, "b elected")
            assert await send_ok(client, second, b"on the new master")
            again = await runners[0].start()
            old = again.controller
            assert old is not None
            await wait_until(lambda: role(again) is ControllerRole.SLAVE, 20, "a follows")
            assert old.truncations == 1
            await wait_until(
                lambda: again.store.get_max_phy_offset() == second.store.get_max_phy_offset(),
                20, "a caught up",
            )  # fmt: skip
            ours, theirs = again.store, second.store
            assert isinstance(ours, FileMessageStore) and isinstance(theirs, FileMessageStore)
            assert commit_log_bytes(ours) == commit_log_bytes(theirs)
            assert old.epochs.last_epoch() == 2


# -- three controllers (Raft) --------------------------------------------------------------


class ControllerNode:
    """One controller of a Raft group in a cancel scope of its own (so it can be stopped)."""

    def __init__(self, config: ControllerConfig) -> None:
        self.controller = Controller(config)
        self.scope = trio.CancelScope()

    @property
    def address(self) -> str:
        return self.controller.address

    async def start(self, nursery: trio.Nursery) -> None:
        async def run(*, task_status: trio.TaskStatus[Controller]) -> None:
            with self.scope:
                await self.controller.run(task_status=task_status)

        await nursery.start(run)

    def leads(self) -> bool:
        journal = self.controller.journal
        return journal.is_leader() and journal.leader_address() == self.address


async def leader_of(nodes: list[ControllerNode]) -> ControllerNode:
    """The node that leads and knows its own address as the leader's, within 30 s."""
    await wait_until(lambda: any(node.leads() for node in nodes), 30, "a Raft leader")
    return next(node for node in nodes if node.leads())


async def test_brokers_find_the_raft_leader_and_fail_over_after_losing_it(
    tmp_path: Path,
) -> None:
    peers = ";".join(f"n{i}-127.0.0.1:{free_port()}" for i in range(3))
    nodes = [
        ControllerNode(controller_config(
            controller_dleger_self_id=f"n{i}", controller_dleger_peers=peers,
            controller_store_path=str(tmp_path / f"n{i}"),
        ))
        for i in range(3)
    ]  # fmt: skip
    async with (
        running_registry() as registry,
        RemotingClient() as client,
        trio.open_nursery() as nursery,
    ):
        for node in nodes:
            await node.start(nursery)
        leader = await leader_of(nodes)
        # Followers first: the brokers' writes are refused there and move to the leader.
        addresses = ";".join(n.address for n in sorted(nodes, key=lambda n: n is leader))
        runners = [
            BrokerRunner(broker_config(tmp_path / name, registry.address, addresses),
                         nursery)
            for name in ("a", "b")
        ]  # fmt: skip
        with trio.fail_after(90):
            first = await runners[0].start()
            await wait_until(lambda: role(first) is ControllerRole.MASTER, 30, "a master")
            second = await runners[1].start()
            link = first.controller
            assert link is not None and link.leader == leader.address
            await wait_until(lambda: link.sync_state_set == {1, 2}, 30, "the slave in sync")

            # The leader goes: the master keeps (or takes back) its role at its epoch.
            leader.scope.cancel()
            others = [n for n in nodes if n is not leader]
            new_leader = await leader_of(others)
            await wait_until(lambda: link.leader == new_leader.address, 30, "leader found")
            await wait_until(lambda: send_ok(client, first, b"x"), 30, "writes go on")
            assert link.master_epoch == 1

            # Then the master dies: the new leader elects the slave.
            await runners[0].kill()
            await wait_until(lambda: role(second) is ControllerRole.MASTER, 30, "b elected")
            await wait_until(lambda: send_ok(client, second, b"y"), 30, "b takes writes")
        nursery.cancel_scope.cancel()
