"""The controller's replicated state as plain functions: ids, registration, SyncStateSet
changes and their refusals, and elections (order, unclean, no candidate, designated)."""

from __future__ import annotations

from typing import Any

import attrs

from actors.controller.heartbeat import BrokerLiveInfo, HeartbeatTable
from actors.controller.replicas import (
    ElectMasterEvent,
    ReplicaTable,
    Result,
)
from protocol.bodies import ElectMasterResponseBody, SyncStateSet
from protocol.codes import ResponseCode

CLUSTER, GROUP = "DefaultCluster", "broker-a"


@attrs.define
class Live:
    """A liveness view over a heartbeat table at a fixed instant."""

    table: HeartbeatTable = attrs.field(factory=HeartbeatTable)
    now: float = 100.0

    def beat(
        self, broker_id: int, *, epoch: int = 0, max_offset: int = 0, priority: int = 0
    ) -> None:
        self.table.beat(
            BrokerLiveInfo(
                CLUSTER, GROUP, broker_id, f"10.0.0.{broker_id}:10911", self.now, 10.0,
                epoch, max_offset, 0, priority,
            )
        )  # fmt: skip

    def is_alive(self, cluster_name: str, broker_name: str, broker_id: int) -> bool:
        return self.table.is_alive(cluster_name, broker_name, broker_id, self.now)

    def get(self, cluster_name: str, broker_name: str, broker_id: int) -> BrokerLiveInfo | None:
        return self.table.get(cluster_name, broker_name, broker_id)


def hdr(result: Result) -> Any:
    """The typed response header of a result."""
    return result.header


def commit(table: ReplicaTable, result: Result) -> Result:
    table.apply_all(result.events)
    return result


def group_of(*ids: int) -> ReplicaTable:
    """A table whose broker-a has the given ids applied (addresses 10.0.0.<id>)."""
    table = ReplicaTable()
    for broker_id in ids:
        code = f"10.0.0.{broker_id}:10911;{broker_id}"
        assert commit(table, table.apply_broker_id(CLUSTER, GROUP, broker_id, code)).ok
    return table


def elect(table: ReplicaTable, live: Live, broker_id: int | None, **kw: bool) -> Result:
    designate = kw.get("designate", False)
    unclean = kw.get("unclean", False)
    return commit(
        table,
        table.elect_master(GROUP, broker_id, designate=designate, liveness=live, unclean=unclean),
    )


def test_ids_are_handed_out_and_kept() -> None:
    table = ReplicaTable()
    first = table.get_next_broker_id(CLUSTER, GROUP)
    assert hdr(first).next_broker_id == 1
    # The first claim must be id 1: another id for an unknown group is refused.
    refused = table.apply_broker_id(CLUSTER, GROUP, 2, "10.0.0.2:10911;1")
    assert refused.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID and not refused.events
    assert commit(table, table.apply_broker_id(CLUSTER, GROUP, 1, "10.0.0.1:10911;5")).ok
    assert hdr(table.get_next_broker_id(CLUSTER, GROUP)).next_broker_id == 2
    # The same check code may claim its id again (a broker that lost the answer retries) ...
    assert table.apply_broker_id(CLUSTER, GROUP, 1, "10.0.0.1:10911;5").ok
    # ... another broker may not.
    taken = table.apply_broker_id(CLUSTER, GROUP, 1, "10.0.0.9:10911;6")
    assert taken.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
    assert "10.0.0.1:10911" in (taken.remark or "")
    assert table.groups[GROUP].addresses == {1: "10.0.0.1:10911"}


def test_register_answers_the_live_master_and_updates_an_address() -> None:
    table, live = group_of(1, 2), Live()
    unknown = table.register_broker(CLUSTER, GROUP, 3, "10.0.0.3:10911", live)
    assert unknown.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    no_master = table.register_broker(CLUSTER, GROUP, 1, "10.0.0.1:10911", live)
    assert no_master.ok and hdr(no_master).master_broker_id is None
    live.beat(1)
    assert elect(table, live, 1).ok
    moved = commit(table, table.register_broker(CLUSTER, GROUP, 2, "10.0.0.22:10911", live))
    assert hdr(moved).master_broker_id == 1
    assert hdr(moved).master_epoch == 1
    assert SyncStateSet.from_json(moved.body or b"").sync_state_set == [1]
    assert table.groups[GROUP].addresses[2] == "10.0.0.22:10911"
    live.now += 60  # the master went silent: not named to a registering broker any more
    assert (
        hdr(table.register_broker(CLUSTER, GROUP, 2, "10.0.0.22:10911", live)).master_broker_id
        is None
    )


def test_first_election_takes_the_asker_then_the_master_stays() -> None:
    table, live = group_of(1, 2), Live()
    live.beat(1)
    live.beat(2)
    first = elect(table, live, 2)
    assert first.ok and hdr(first).master_broker_id == 2
    body = ElectMasterResponseBody.from_json(first.body or b"")
    assert body.sync_state_set == [2] and body.broker_member_group is not None
    assert body.broker_member_group.broker_addrs == {1: "10.0.0.1:10911", 2: "10.0.0.2:10911"}
    again = elect(table, live, 1)
    assert again.code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST
    assert hdr(again).master_broker_id == 2 and not again.events
    group = table.groups[GROUP]
    assert (group.master_broker_id, group.master_epoch, group.sync_state_set_epoch) == (2, 1, 1)


def in_sync(table: ReplicaTable, live: Live, members: list[int]) -> None:
    group = table.groups[GROUP]
    proposed = SyncStateSet(sync_state_set=members, sync_state_set_epoch=group.sync_state_set_epoch)
    result = table.alter_sync_state_set(
        GROUP, group.master_broker_id or 0, group.master_epoch, proposed, live
    )
    assert commit(table, result).ok, result.remark


def test_alter_sync_state_set_refusals() -> None:
    table, live = group_of(1, 2, 3), Live()
    for broker_id in (1, 2):
        live.beat(broker_id)
    elect(table, live, 1)  # epoch 1, SyncStateSet {1} at epoch 1

    def alter(master: int, epoch: int, members: list[int], set_epoch: int) -> Result:
        proposed = SyncStateSet(sync_state_set=members, sync_state_set_epoch=set_epoch)
        return table.alter_sync_state_set(GROUP, master, epoch, proposed, live)

    assert alter(2, 1, [1, 2], 1).code == ResponseCode.CONTROLLER_INVALID_MASTER
    assert alter(1, 0, [1, 2], 1).code == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH
    assert alter(1, 1, [1, 2], 0).code == ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    assert alter(1, 1, [1, 7], 1).code == ResponseCode.CONTROLLER_INVALID_REPLICAS
    assert alter(1, 1, [1, 3], 1).code == ResponseCode.CONTROLLER_BROKER_NOT_ALIVE  # 3 silent
    assert alter(1, 1, [2], 1).code == ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    assert alter(1, 1, [1], 1).code == ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    unknown = table.alter_sync_state_set("nope", 1, 1, SyncStateSet(), live)
    assert unknown.code == ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    done = commit(table, alter(1, 1, [1, 2], 1))
    assert done.ok and hdr(done).new_sync_state_set_epoch == 2
    assert table.groups[GROUP].sync_state_set == {1, 2}
    # The set just built on epoch 1 is now stale.
    assert alter(1, 1, [1], 1).code == ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH


def test_election_order_epoch_then_offset_then_priority_then_id() -> None:
    table, live = group_of(1, 2, 3, 4, 5), Live()
    for broker_id in (1, 2, 3, 4, 5):
        live.beat(broker_id)
    elect(table, live, 1)
    in_sync(table, live, [1, 2, 3, 4, 5])
    live.now += 60  # everyone silent; then all but the master return with their figures
    live.beat(2, epoch=1, max_offset=500, priority=1)
    live.beat(3, epoch=1, max_offset=900, priority=5)
    live.beat(4, epoch=1, max_offset=900, priority=2)
    live.beat(5, epoch=0, max_offset=9_999, priority=0)  # longest log, but an older epoch
    assert table.groups_needing_election(live) == [GROUP]
    result = elect(table, live, None)
    assert result.ok and hdr(result).master_broker_id == 4
    group = table.groups[GROUP]
    assert (group.master_epoch, group.sync_state_set, group.sync_state_set_epoch) == (2, {4}, 3)
    # Same figures everywhere: the lowest id wins.
    table2, live2 = group_of(1, 2, 3), Live()
    for broker_id in (1, 2, 3):
        live2.beat(broker_id)
    elect(table2, live2, 1)
    in_sync(table2, live2, [1, 2, 3])
    live2.now += 60
    live2.beat(3)
    live2.beat(2)
    assert hdr(elect(table2, live2, None)).master_broker_id == 2


def test_no_candidate_leaves_the_group_without_master_until_one_returns() -> None:
    table, live = group_of(1, 2), Live()
    live.beat(1)
    live.beat(2)
    elect(table, live, 1)  # SyncStateSet {1}: broker 2 is not in sync
    live.now += 60
    live.beat(2)
    result = elect(table, live, None)
    assert result.code == ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE
    assert result.events == (ElectMasterEvent(GROUP, None),)
    group = table.groups[GROUP]
    assert (group.master_broker_id, group.master_epoch) == (None, 1)
    assert table.groups_needing_election(live) == []  # no master: nothing more to scan for
    info = table.get_replica_info(GROUP)
    assert hdr(info).master_broker_id is None
    # Broker 2 asks to be elected: still not in sync, refused.
    assert elect(table, live, 2).code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED
    # The old master returns and asks: it is in the SyncStateSet, so it is master again.
    live.beat(1)
    back = elect(table, live, 1)
    assert back.ok and hdr(back).master_broker_id == 1 and hdr(back).master_epoch == 2


def test_unclean_election_takes_any_live_broker() -> None:
    table, live = group_of(1, 2), Live()
    live.beat(1)
    live.beat(2)
    elect(table, live, 1)
    live.now += 60
    live.beat(2, max_offset=10)
    result = elect(table, live, None, unclean=True)
    assert result.ok and hdr(result).master_broker_id == 2


def test_designated_election() -> None:
    table, live = group_of(1, 2, 3), Live()
    for broker_id in (1, 2, 3):
        live.beat(broker_id)
    elect(table, live, 1)
    in_sync(table, live, [1, 2])
    refused = elect(table, live, 3, designate=True)  # alive but not in sync
    assert refused.code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED
    moved = elect(table, live, 2, designate=True)  # the master is alive, but the admin says 2
    assert moved.ok and hdr(moved).master_broker_id == 2
    assert table.groups[GROUP].master_epoch == 2
    unknown = table.elect_master("nope", 1, designate=True, liveness=live, unclean=False)
    assert unknown.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED


def test_sync_state_data_and_clean() -> None:
    table, live = group_of(1, 2), Live()
    live.beat(1)
    elect(table, live, 1)
    info = table.sync_state_data([GROUP, "unknown"], live).replicas_info_table
    assert list(info) == [GROUP]
    replicas = info[GROUP]
    assert [(r.broker_id, r.alive) for r in replicas.in_sync_replicas] == [(1, True)]
    assert [(r.broker_id, r.alive) for r in replicas.not_in_sync_replicas] == [(2, False)]
    code = ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    assert table.clean_broker_data(GROUP, None, False, None, live).code == code  # has a master
    assert table.clean_broker_data(GROUP, "1", False, None, live).code == code  # 1 is alive
    assert table.clean_broker_data(GROUP, "x", False, None, live).code == code
    assert commit(table, table.clean_broker_data(GROUP, "2", False, None, live)).ok
    assert table.groups[GROUP].addresses == {1: "10.0.0.1:10911"}
    assert commit(table, table.clean_broker_data(GROUP, None, True, None, live)).ok
    assert GROUP not in table.groups
    assert table.get_replica_info(GROUP).code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST


def test_heartbeat_table_scan_keeps_the_last_word() -> None:
    beats = HeartbeatTable()
    info = BrokerLiveInfo(CLUSTER, GROUP, 1, "a:1", 10.0, 3.0, 1, 42)
    assert beats.beat(info)
    assert not beats.beat(attrs.evolve(info, last_update=11.0))
    assert beats.is_alive(CLUSTER, GROUP, 1, 14.0)
    assert beats.scan(14.0) == []
    gone = beats.scan(14.5)
    assert [g.broker_id for g in gone] == [1]
    assert beats.get(CLUSTER, GROUP, 1) is None
    last = beats.last_known(CLUSTER, GROUP, 1)
    assert last is not None and last.max_offset == 42
