"""RocketMQ 5's controller mode bodies (RIP-44): the SyncStateSet, an election's answer, a
group's replicas as an operator sees them, and a broker's epoch cache.

Broker ids are longs; a SyncStateSet is a set on the Java side and a JSON array on the wire.
"""

from __future__ import annotations

import attrs

from protocol.bodies._codec import Body

#: An epoch entry's end offset while the epoch is the current one (Java's Long.MAX_VALUE).
OPEN_END_OFFSET = (1 << 63) - 1


@attrs.frozen(kw_only=True)
class SyncStateSet(Body):
    """The broker ids caught up enough to be elected, and the epoch of that set."""

    sync_state_set: list[int] = attrs.field(factory=list)
    sync_state_set_epoch: int = 0


@attrs.frozen(kw_only=True)
class BrokerMemberGroup(Body):
    """A broker group's members: broker id -> address."""

    cluster: str = ""
    broker_name: str = ""
    broker_addrs: dict[int, str] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class ElectMasterResponseBody(Body):
    """CONTROLLER_ELECT_MASTER's body: the group's members and the new SyncStateSet."""

    broker_member_group: BrokerMemberGroup | None = None
    sync_state_set: list[int] = attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class ReplicaIdentity(Body):
    """One broker of a group in CONTROLLER_GET_SYNC_STATE_DATA's answer."""

    broker_name: str = ""
    broker_id: int = 0
    broker_address: str = ""
    alive: bool = False


@attrs.frozen(kw_only=True)
class ReplicasInfo(Body):
    """One group's master, epochs, and its in-sync and other replicas."""

    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: int = 0
    sync_state_set_epoch: int = 0
    in_sync_replicas: list[ReplicaIdentity] = attrs.field(factory=list)
    not_in_sync_replicas: list[ReplicaIdentity] = attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class BrokerReplicasInfo(Body):
    """CONTROLLER_GET_SYNC_STATE_DATA's answer: broker name -> its replicas."""

    replicas_info_table: dict[str, ReplicasInfo] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class EpochEntry(Body):
    """One master epoch of a broker's commit log: the bytes in [start_offset, end_offset)
    were written by that epoch's master (end is `OPEN_END_OFFSET` for the current one)."""

    epoch: int
    start_offset: int
    end_offset: int = OPEN_END_OFFSET


@attrs.frozen(kw_only=True)
class EpochEntryCache(Body):
    """GET_BROKER_EPOCH_CACHE's answer: a broker's epoch entries and its commit-log end."""

    cluster_name: str = ""
    broker_name: str = ""
    broker_id: int = 0
    epoch_list: list[EpochEntry] = attrs.field(factory=list)
    max_offset: int = 0
