"""The controller's replicated state: broker groups, their masters, epochs and SyncStateSets.

Plain state with no I/O and no clock, in the shape of RocketMQ 5's ReplicasInfoManager: every
change is asked in two steps. An operation (`ReplicaTable.elect_master`, ...) reads the state
and the caller's liveness view and returns a `Result`: the answer to send and the events that
make the change, without changing anything. `ReplicaTable.apply` then applies those events.
Only events go through the Raft log (`actors.controller.raft`), so every controller applies
the same events in the same order and holds the same state, while the liveness each decision
used stays the leader's own.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Protocol

import attrs
import orjson

from actors.controller.heartbeat import BrokerLiveInfo
from protocol.bodies import (
    BrokerMemberGroup,
    BrokerReplicasInfo,
    ElectMasterResponseBody,
    ReplicaIdentity,
    ReplicasInfo,
    SyncStateSet,
)
from protocol.codes import ResponseCode
from protocol.headers import (
    AlterSyncStateSetResponseHeader,
    ApplyBrokerIdResponseHeader,
    ElectMasterResponseHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoResponseHeader,
    RegisterBrokerToControllerResponseHeader,
)

__all__ = [
    "FIRST_BROKER_CONTROLLER_ID",
    "AlterSyncStateSetEvent",
    "ApplyBrokerIdEvent",
    "BrokerGroup",
    "CleanBrokerDataEvent",
    "ControllerAddressEvent",
    "ElectMasterEvent",
    "Event",
    "Liveness",
    "ReplicaTable",
    "Result",
    "UpdateBrokerAddressEvent",
]

#: The first id a group hands out (0 is the registry's "master" id, never a controller id).
FIRST_BROKER_CONTROLLER_ID = 1


class Liveness(Protocol):
    """What an operation may ask about brokers' heartbeats (the caller binds the time)."""

    def is_alive(self, cluster_name: str, broker_name: str, broker_id: int) -> bool:
        """True when the broker beats within its timeout."""
        ...

    def get(self, cluster_name: str, broker_name: str, broker_id: int) -> BrokerLiveInfo | None:
        """The broker's last heartbeat."""
        ...


# ----------------------------------------------------------------------------- events


@attrs.frozen
class ApplyBrokerIdEvent:
    """A broker claimed an id (the group is created by its first claim)."""

    cluster_name: str
    broker_name: str
    broker_address: str
    broker_id: int
    register_check_code: str


@attrs.frozen
class UpdateBrokerAddressEvent:
    """A registered broker came back at another address."""

    cluster_name: str
    broker_name: str
    broker_address: str
    broker_id: int


@attrs.frozen
class ElectMasterEvent:
    """A group got a new master (SyncStateSet = {it}, both epochs + 1), or lost its master
    with no one to take over (None: no master; epochs unchanged)."""

    broker_name: str
    new_master_broker_id: int | None


@attrs.frozen
class AlterSyncStateSetEvent:
    """The master's new SyncStateSet (its epoch + 1)."""

    broker_name: str
    sync_state_set: frozenset[int]


@attrs.frozen
class CleanBrokerDataEvent:
    """Forget brokers of a group (the whole group when ``broker_ids`` is None)."""

    broker_name: str
    broker_ids: frozenset[int] | None


@attrs.frozen
class ControllerAddressEvent:
    """A controller's remoting address, so followers can name the leader's to brokers."""

    peer_id: str
    address: str


Event = (
    ApplyBrokerIdEvent
    | UpdateBrokerAddressEvent
    | ElectMasterEvent
    | AlterSyncStateSetEvent
    | CleanBrokerDataEvent
    | ControllerAddressEvent
)


@attrs.frozen
class Result:
    """An operation's answer (code, remark, typed response header, body) and its events."""

    code: int = ResponseCode.SUCCESS
    remark: str | None = None
    header: object | None = None
    body: bytes | None = None
    events: tuple[Event, ...] = ()

    @property
    def ok(self) -> bool:
        """True for a SUCCESS answer."""
        return self.code == ResponseCode.SUCCESS


# ----------------------------------------------------------------------------- state


@attrs.define
class BrokerGroup:
    """One broker group (brokerName): its members, master, epochs and SyncStateSet."""

    cluster_name: str
    broker_name: str
    #: broker id -> address
    addresses: dict[int, str] = attrs.field(factory=dict)
    #: broker id -> registerCheckCode (``address;epoch ms``) it applied with
    check_codes: dict[int, str] = attrs.field(factory=dict)
    master_broker_id: int | None = None
    master_epoch: int = 0
    sync_state_set: set[int] = attrs.field(factory=set)
    sync_state_set_epoch: int = 0

    @property
    def next_broker_id(self) -> int:
        """The id the next new broker should apply for."""
        return max(self.addresses, default=FIRST_BROKER_CONTROLLER_ID - 1) + 1

    @property
    def master_address(self) -> str | None:
        """The master's address (None without a master)."""
        if self.master_broker_id is None:
            return None
        return self.addresses.get(self.master_broker_id)

    def sync_state_set_body(self) -> bytes:
        """The SyncStateSet as its wire body."""
        return SyncStateSet(
            sync_state_set=sorted(self.sync_state_set),
            sync_state_set_epoch=self.sync_state_set_epoch,
        ).to_json()

    def member_group(self) -> BrokerMemberGroup:
        """The group's members as CONTROLLER_ELECT_MASTER's body names them."""
        return BrokerMemberGroup(
            cluster=self.cluster_name,
            broker_name=self.broker_name,
            broker_addrs=dict(sorted(self.addresses.items())),
        )


class ReplicaTable:
    """Every broker group the controller knows; changed only through `apply`."""

    def __init__(self) -> None:
        self.groups: dict[str, BrokerGroup] = {}
        #: Raft peer id -> remoting address of each controller that announced itself.
        self.controller_addresses: dict[str, str] = {}
        #: Events applied since start (or since the snapshot this state was loaded from).
        self.applied = 0

    # ------------------------------------------------------------------- persistence

    def to_json(self) -> bytes:
        """The whole state as JSON (a single controller's file)."""
        groups = {
            name: {
                "clusterName": g.cluster_name,
                "brokerAddrs": {str(k): v for k, v in sorted(g.addresses.items())},
                "registerCheckCodes": {str(k): v for k, v in sorted(g.check_codes.items())},
                "masterBrokerId": g.master_broker_id,
                "masterEpoch": g.master_epoch,
                "syncStateSet": sorted(g.sync_state_set),
                "syncStateSetEpoch": g.sync_state_set_epoch,
            }
            for name, g in sorted(self.groups.items())
        }
        return orjson.dumps({"groups": groups}, option=orjson.OPT_INDENT_2)

    @classmethod
    def from_json(cls, data: bytes) -> ReplicaTable:
        """The state `to_json` wrote; raises ValueError on anything else."""
        doc = orjson.loads(data)
        table = cls()
        try:
            for name, g in doc["groups"].items():
                table.groups[name] = BrokerGroup(
                    cluster_name=str(g["clusterName"]),
                    broker_name=name,
                    addresses={int(k): str(v) for k, v in g["brokerAddrs"].items()},
                    check_codes={int(k): str(v) for k, v in g["registerCheckCodes"].items()},
                    master_broker_id=None
                    if g["masterBrokerId"] is None
                    else int(g["masterBrokerId"]),
                    master_epoch=int(g["masterEpoch"]),
                    sync_state_set={int(x) for x in g["syncStateSet"]},
                    sync_state_set_epoch=int(g["syncStateSetEpoch"]),
                )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a controller state file: {exc!r}") from None
        return table

    def copy(self) -> ReplicaTable:
        """An independent copy (applied to before a change is saved)."""
        return copy.deepcopy(self)

    # ------------------------------------------------------------------- broker ids

    def get_next_broker_id(self, cluster_name: str, broker_name: str) -> Result:
        """CONTROLLER_GET_NEXT_BROKER_ID: the id a new broker of the group should apply for."""
        group = self.groups.get(broker_name)
        next_id = FIRST_BROKER_CONTROLLER_ID if group is None else group.next_broker_id
        return Result(
            header=GetNextBrokerIdResponseHeader(
                cluster_name=cluster_name, broker_name=broker_name, next_broker_id=next_id
            )
        )

    def apply_broker_id(
        self, cluster_name: str, broker_name: str, broker_id: int, register_check_code: str
    ) -> Result:
        """CONTROLLER_APPLY_BROKER_ID: a free id, or the id this check code already holds."""
        header = ApplyBrokerIdResponseHeader(cluster_name=cluster_name, broker_name=broker_name)
        address = register_check_code.split(";", 1)[0]
        event = ApplyBrokerIdEvent(
            cluster_name, broker_name, address, broker_id, register_check_code
        )
        group = self.groups.get(broker_name)
        if group is None:
            if broker_id == FIRST_BROKER_CONTROLLER_ID:
                return Result(header=header, events=(event,))
            return Result(
                ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                f"broker group {broker_name} is not registered yet; its first broker must "
                f"apply for id {FIRST_BROKER_CONTROLLER_ID}, not {broker_id}",
                header,
            )
        held = group.check_codes.get(broker_id)
        if broker_id not in group.addresses or held == register_check_code:
            return Result(header=header, events=(event,))
        return Result(
            ResponseCode.CONTROLLER_BROKER_ID_INVALID,
            f"broker id {broker_id} of {broker_name} belongs to the broker at "
            f"{group.addresses[broker_id]}; ask CONTROLLER_GET_NEXT_BROKER_ID for a free one",
            header,
        )

    # ------------------------------------------------------------------- registration

    def register_broker(
        self,
        cluster_name: str,
        broker_name: str,
        broker_id: int,
        broker_address: str,
        liveness: Liveness,
    ) -> Result:
        """CONTROLLER_REGISTER_BROKER: the group's live master (if any) and SyncStateSet."""
        group = self.groups.get(broker_name)
        if group is None or broker_id not in group.addresses:
            what = f"broker group {broker_name}" if group is None else f"broker id {broker_id}"
            return Result(
                ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"{what} has not applied for an id (CONTROLLER_APPLY_BROKER_ID) yet",
                RegisterBrokerToControllerResponseHeader(
                    cluster_name=cluster_name, broker_name=broker_name
                ),
            )
        master = group.master_broker_id
        header = RegisterBrokerToControllerResponseHeader(
            cluster_name=cluster_name, broker_name=broker_name
        )
        if master is not None and liveness.is_alive(group.cluster_name, broker_name, master):
            header = RegisterBrokerToControllerResponseHeader(
                cluster_name=cluster_name,
                broker_name=broker_name,
                master_broker_id=master,
                master_address=group.master_address,
                master_epoch=group.master_epoch,
                sync_state_set_epoch=group.sync_state_set_epoch,
            )
        events: tuple[Event, ...] = ()
        if group.addresses.get(broker_id) != broker_address:
            events = (
                UpdateBrokerAddressEvent(cluster_name, broker_name, broker_address, broker_id),
            )
        return Result(header=header, body=group.sync_state_set_body(), events=events)

    # ------------------------------------------------------------------- reads

    def get_replica_info(self, broker_name: str) -> Result:
        """CONTROLLER_GET_REPLICA_INFO: the group's master as recorded, and its SyncStateSet."""
        group = self.groups.get(broker_name)
        if group is None:
            return Result(
                ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                f"the controller knows no broker group {broker_name}",
                GetReplicaInfoResponseHeader(),
            )
        return Result(
            header=GetReplicaInfoResponseHeader(
                master_broker_id=group.master_broker_id,
                master_address=group.master_address,
                master_epoch=group.master_epoch,
            ),
            body=group.sync_state_set_body(),
        )

    def sync_state_data(
        self, broker_names: Iterable[str], liveness: Liveness
    ) -> BrokerReplicasInfo:
        """CONTROLLER_GET_SYNC_STATE_DATA: each known group's replicas, in sync or not."""
        table: dict[str, ReplicasInfo] = {}
        for name in broker_names:
            group = self.groups.get(name)
            if group is None:
                continue
            in_sync: list[ReplicaIdentity] = []
            not_in_sync: list[ReplicaIdentity] = []
            for broker_id, address in sorted(group.addresses.items()):
                replica = ReplicaIdentity(
                    broker_name=name,
                    broker_id=broker_id,
                    broker_address=address,
                    alive=liveness.is_alive(group.cluster_name, name, broker_id),
                )
                (in_sync if broker_id in group.sync_state_set else not_in_sync).append(replica)
            table[name] = ReplicasInfo(
                master_broker_id=group.master_broker_id,
                master_address=group.master_address,
                master_epoch=group.master_epoch,
                sync_state_set_epoch=group.sync_state_set_epoch,
                in_sync_replicas=in_sync,
                not_in_sync_replicas=not_in_sync,
            )
        return BrokerReplicasInfo(replicas_info_table=table)

    # ------------------------------------------------------------------- SyncStateSet

    def alter_sync_state_set(
        self,
        broker_name: str,
        master_broker_id: int,
        master_epoch: int,
        proposed: SyncStateSet,
        liveness: Liveness,
    ) -> Result:
        """CONTROLLER_ALTER_SYNC_STATE_SET: the master's new set, refused when it is stale."""
        header = AlterSyncStateSetResponseHeader()
        group = self.groups.get(broker_name)
        if group is None:
            return Result(
                ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                f"the controller knows no broker group {broker_name}",
                header,
            )
        new_set = frozenset(proposed.sync_state_set)
        if new_set == group.sync_state_set:
            return Result(
                ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                f"the SyncStateSet of {broker_name} already is {sorted(new_set)}",
                header,
            )
        if group.master_broker_id is None or group.master_broker_id != master_broker_id:
            return Result(
                ResponseCode.CONTROLLER_INVALID_MASTER,
                f"broker {master_broker_id} is not the master of {broker_name} "
                f"(the master is {group.master_broker_id})",
                header,
            )
        if master_epoch != group.master_epoch:
            return Result(
                ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
                f"master epoch {master_epoch} of {broker_name} is stale; the current one is "
                f"{group.master_epoch}",
                header,
            )
        if proposed.sync_state_set_epoch != group.sync_state_set_epoch:
            return Result(
                ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                f"SyncStateSet epoch {proposed.sync_state_set_epoch} of {broker_name} is "
                f"stale; the current one is {group.sync_state_set_epoch}",
                header,
            )
        for broker_id in sorted(new_set):
            if broker_id not in group.addresses:
                return Result(
                    ResponseCode.CONTROLLER_INVALID_REPLICAS,
                    f"broker id {broker_id} is not a registered member of {broker_name}",
                    header,
                )
            if not liveness.is_alive(group.cluster_name, broker_name, broker_id):
                return Result(
                    ResponseCode.CONTROLLER_BROKER_NOT_ALIVE,
                    f"broker id {broker_id} of {broker_name} is not alive (no recent heartbeat)",
                    header,
                )
        if group.master_broker_id not in new_set:
            return Result(
                ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                f"the new SyncStateSet of {broker_name} leaves out its master "
                f"{group.master_broker_id}",
                header,
            )
        epoch = group.sync_state_set_epoch + 1
        return Result(
            header=AlterSyncStateSetResponseHeader(new_sync_state_set_epoch=epoch),
            body=SyncStateSet(sync_state_set=sorted(new_set), sync_state_set_epoch=epoch).to_json(),
            events=(AlterSyncStateSetEvent(broker_name, new_set),),
        )

    # ------------------------------------------------------------------- elections

    def elect_master(
        self,
        broker_name: str,
        broker_id: int | None,
        *,
        designate: bool,
        liveness: Liveness,
        unclean: bool,
    ) -> Result:
        """CONTROLLER_ELECT_MASTER: keep a live master, else pick the best live candidate.

        ``broker_id`` is the asking broker (None or -1 when the controller's scan asks);
        ``designate`` makes it the only acceptable choice (an operator's electMaster). A
        group's first election takes the asking broker. Candidates are the live members of
        the SyncStateSet, then (``unclean``) any live member, best first by (epoch desc,
        maxOffset desc, electionPriority asc, brokerId asc).
        """
        group = self.groups.get(broker_name)
        if group is None:
            return Result(
                ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"broker group {broker_name} has not registered with the controller",
                ElectMasterResponseHeader(),
            )
        asker = None if broker_id is None or broker_id < 0 else broker_id
        old_master = group.master_broker_id
        new_master: int | None = None
        if group.master_epoch == 0 and asker is not None and asker in group.addresses:
            new_master = asker  # the group's first master: whoever asks first
        if new_master is None:
            new_master = self._choose(group, old_master, asker if designate else None,
                                      liveness, unclean)  # fmt: skip
        if new_master is not None and new_master == old_master:
            return Result(
                ResponseCode.CONTROLLER_MASTER_STILL_EXIST,
                f"the master {old_master} of {broker_name} is alive; nothing to elect",
                ElectMasterResponseHeader(
                    master_broker_id=old_master,
                    master_address=group.master_address,
                    master_epoch=group.master_epoch,
                    sync_state_set_epoch=group.sync_state_set_epoch,
                ),
                ElectMasterResponseBody(
                    broker_member_group=group.member_group(),
                    sync_state_set=sorted(group.sync_state_set),
                ).to_json(),
            )
        if new_master is not None:
            return Result(
                header=ElectMasterResponseHeader(
                    master_broker_id=new_master,
                    master_address=group.addresses.get(new_master),
                    master_epoch=group.master_epoch + 1,
                    sync_state_set_epoch=group.sync_state_set_epoch + 1,
                ),
                body=ElectMasterResponseBody(
                    broker_member_group=group.member_group(), sync_state_set=[new_master]
                ).to_json(),
                events=(ElectMasterEvent(broker_name, new_master),),
            )
        header = ElectMasterResponseHeader(master_epoch=group.master_epoch)
        if designate:
            return Result(
                ResponseCode.CONTROLLER_ELECT_MASTER_FAILED,
                f"broker {asker} of {broker_name} cannot be master: it is not alive"
                + ("" if unclean else " or not in the SyncStateSet "
                   f"{sorted(group.sync_state_set)} (enableElectUncleanMaster=false)"),
                header,
            )  # fmt: skip
        if asker is None:
            # The scan found the master gone and no one to take over: record no master.
            events: tuple[Event, ...] = ()
            if old_master is not None:
                events = (ElectMasterEvent(broker_name, None),)
            return Result(
                ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE,
                f"the master of {broker_name} is gone and no live broker of its SyncStateSet "
                f"{sorted(group.sync_state_set)} can take over",
                header,
                events=events,
            )
        return Result(
            ResponseCode.CONTROLLER_ELECT_MASTER_FAILED,
            f"no live broker of {broker_name}'s SyncStateSet {sorted(group.sync_state_set)} "
            "can be master" + ("" if unclean else " (enableElectUncleanMaster=false)"),
            header,
        )

    def _choose(
        self,
        group: BrokerGroup,
        old_master: int | None,
        preferred: int | None,
        liveness: Liveness,
        unclean: bool,
    ) -> int | None:
        pools: list[Iterable[int]] = [group.sync_state_set]
        if unclean:
            pools.append(group.addresses)
        for pool in pools:
            alive = [b for b in pool if liveness.is_alive(group.cluster_name, group.broker_name, b)]
            if not alive:
                continue
            if old_master in alive and (preferred is None or preferred == old_master):
                return old_master
            if preferred is not None:
                if preferred in alive:
                    return preferred
                continue
            cluster, name = group.cluster_name, group.broker_name
            return min(alive, key=lambda b: _rank(liveness.get(cluster, name, b), b))
        return None

    def groups_needing_election(self, liveness: Liveness) -> list[str]:
        """Groups whose recorded master does not beat any more (the leader's scan elects)."""
        return [
            name
            for name, group in self.groups.items()
            if group.master_broker_id is not None
            and not liveness.is_alive(group.cluster_name, name, group.master_broker_id)
        ]

    # ------------------------------------------------------------------- clean

    def clean_broker_data(
        self,
        broker_name: str,
        broker_ids_text: str | None,
        clean_living: bool,
        cluster_name: str | None,
        liveness: Liveness,
    ) -> Result:
        """CLEAN_BROKER_DATA: forget dead brokers of a group (the group when no ids)."""
        group = self.groups.get(broker_name)
        ids: frozenset[int] | None = None
        if broker_ids_text and broker_ids_text.strip():
            try:
                ids = frozenset(int(x) for x in broker_ids_text.split(";") if x.strip())
            except ValueError:
                return Result(
                    ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                    f"brokerControllerIdsToClean {broker_ids_text!r} is not ids joined by ';'",
                )
        if not clean_living and group is not None:
            if ids is None and group.master_broker_id is not None:
                return Result(
                    ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                    f"broker group {broker_name} still has a master; stop it first or set "
                    "isCleanLivingBroker",
                )
            cluster = cluster_name or group.cluster_name
            for broker_id in sorted(ids or ()):
                if liveness.is_alive(cluster, broker_name, broker_id):
                    return Result(
                        ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                        f"broker {broker_id} of {broker_name} is alive; stop it first or set "
                        "isCleanLivingBroker",
                    )
        if group is None:
            return Result(
                ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                f"the controller knows no broker group {broker_name}",
            )
        return Result(events=(CleanBrokerDataEvent(broker_name, ids),))

    # ------------------------------------------------------------------- apply

    def apply(self, event: Event) -> None:
        """Apply one event; deterministic, and tolerant of events made stale by another."""
        self.applied += 1
        if isinstance(event, ApplyBrokerIdEvent):
            group = self.groups.get(event.broker_name)
            if group is None:
                group = BrokerGroup(event.cluster_name, event.broker_name)
                self.groups[event.broker_name] = group
            if event.broker_id not in group.addresses:
                group.addresses[event.broker_id] = event.broker_address
                group.check_codes[event.broker_id] = event.register_check_code
        elif isinstance(event, UpdateBrokerAddressEvent):
            group = self.groups.get(event.broker_name)
            if group is not None and event.broker_id in group.addresses:
                group.addresses[event.broker_id] = event.broker_address
        elif isinstance(event, ElectMasterEvent):
            group = self.groups.get(event.broker_name)
            if group is None:
                return
            if event.new_master_broker_id is None:
                group.master_broker_id = None
            else:
                group.master_broker_id = event.new_master_broker_id
                group.master_epoch += 1
                group.sync_state_set = {event.new_master_broker_id}
                group.sync_state_set_epoch += 1
        elif isinstance(event, AlterSyncStateSetEvent):
            group = self.groups.get(event.broker_name)
            if group is not None:
                group.sync_state_set = set(event.sync_state_set)
                group.sync_state_set_epoch += 1
        elif isinstance(event, CleanBrokerDataEvent):
            self._clean(event)
        else:
            self.controller_addresses[event.peer_id] = event.address

    def apply_all(self, events: Iterable[Event]) -> None:
        """Apply events in order."""
        for event in events:
            self.apply(event)

    def _clean(self, event: CleanBrokerDataEvent) -> None:
        group = self.groups.get(event.broker_name)
        if group is None:
            return
        if event.broker_ids is None:
            del self.groups[event.broker_name]
            return
        for broker_id in event.broker_ids:
            group.addresses.pop(broker_id, None)
            group.check_codes.pop(broker_id, None)
            group.sync_state_set.discard(broker_id)
            if group.master_broker_id == broker_id:
                group.master_broker_id = None
        if not group.addresses:
            del self.groups[event.broker_name]


def _rank(info: BrokerLiveInfo | None, broker_id: int) -> tuple[int, int, int, int]:
    # Sort key, best first: newest epoch, longest log, lowest priority number, lowest id.
    if info is None:
        return (1 << 62, 1 << 62, 1 << 62, broker_id)
    return (-info.epoch, -info.max_offset, info.election_priority, broker_id)
