"""The leader's scan at RocketMQ's default timings, on trio's mock clock: a master that stops
beating is replaced no sooner than its heartbeat timeout (10 s) and no later than the timeout
plus one scan interval (5 s). No socket is used: the handlers' own calls drive it."""

from __future__ import annotations

from functools import partial

import trio
import trio.testing

from actors.controller import BrokerLiveInfo, Controller, ControllerConfig
from actors.controller.heartbeat import DEFAULT_HEARTBEAT_TIMEOUT
from actors.controller.journal import LocalJournal
from actors.controller.replicas import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    ElectMasterEvent,
    ReplicaTable,
)
from protocol.bodies import SyncStateSet

CLUSTER, GROUP = "DefaultCluster", "broker-a"


def beat(controller: Controller, broker_id: int, max_offset: int) -> None:
    controller.heartbeats.beat(
        BrokerLiveInfo(
            CLUSTER, GROUP, broker_id, f"10.0.0.{broker_id}:10911", controller.now(),
            10.0, 1, max_offset,
        )
    )  # fmt: skip


async def test_election_at_default_timings(autojump_clock: trio.testing.MockClock) -> None:
    config = ControllerConfig(controller_store_path="", notify_broker_role_changed=False)
    assert config.scan_not_active_broker_interval == 5000
    controller = Controller(config)

    def table() -> ReplicaTable:
        return controller.journal.table

    async with trio.open_nursery() as nursery:
        await nursery.start(partial(controller.run, address="127.0.0.1:9"))
        for broker_id in (1, 2):
            code = f"10.0.0.{broker_id}:10911;0"
            await controller.write(
                lambda _, b=broker_id, c=code: table().apply_broker_id(CLUSTER, GROUP, b, c)
            )
            beat(controller, broker_id, 1000)
        await controller.write(
            lambda live: table().elect_master(
                GROUP, 1, designate=False, liveness=live, unclean=False
            )
        )
        both = SyncStateSet(sync_state_set=[1, 2], sync_state_set_epoch=1)
        await controller.write(lambda live: table().alter_sync_state_set(GROUP, 1, 1, both, live))

        async def slave_beats() -> None:
            while True:
                beat(controller, 2, 1000)
                await trio.sleep(1)

        nursery.start_soon(slave_beats)
        stopped = trio.current_time()  # the master's last beat
        with trio.fail_after(60):
            while controller.journal.table.groups[GROUP].master_broker_id != 2:
                await trio.sleep(0.1)
        took = trio.current_time() - stopped
        assert 10.0 <= took <= 15.0 + 0.2, took
        assert controller.journal.table.groups[GROUP].master_epoch == 2
        record = controller.election_log[-1]
        assert (record.trigger, record.old_master_broker_id, record.may_lose) == ("scan", 1, 0)
        nursery.cancel_scope.cancel()


async def test_a_fresh_controller_waits_before_deposing_an_unheard_master(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The state says broker 1 is master of {1, 2}, as a restarted controller's file would.
    journal = LocalJournal()
    journal.table.apply_all(
        [
            ApplyBrokerIdEvent(CLUSTER, GROUP, "10.0.0.1:10911", 1, "a;0"),
            ApplyBrokerIdEvent(CLUSTER, GROUP, "10.0.0.2:10911", 2, "b;0"),
            ElectMasterEvent(GROUP, 1),
            AlterSyncStateSetEvent(GROUP, frozenset({1, 2})),
        ]
    )
    controller = Controller(
        ControllerConfig(controller_store_path="", notify_broker_role_changed=False), journal
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(controller.run, address="127.0.0.1:9"))
        started = trio.current_time()

        async def slave_beats() -> None:
            while True:
                beat(controller, 2, 1000)
                await trio.sleep(1)

        nursery.start_soon(slave_beats)
        with trio.fail_after(60):
            while journal.table.groups[GROUP].master_broker_id != 2:
                await trio.sleep(0.1)
        # Not before one heartbeat timeout: the master might have been about to beat.
        assert trio.current_time() - started >= DEFAULT_HEARTBEAT_TIMEOUT
        nursery.cancel_scope.cancel()
