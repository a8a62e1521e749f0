"""RocketMQ 5's controller mode headers (RIP-44): what brokers and admin tools send a
controller, the controller's role notice to brokers, and a broker's heartbeat to it.

Codes: BROKER_HEARTBEAT (904), CONTROLLER_ALTER_SYNC_STATE_SET (1001), CONTROLLER_ELECT_MASTER
(1002), CONTROLLER_REGISTER_BROKER (1003), CONTROLLER_GET_REPLICA_INFO (1004),
CONTROLLER_GET_METADATA_INFO (1005, no request header), CONTROLLER_GET_SYNC_STATE_DATA (1006,
a JSON list of broker names as body), GET_BROKER_EPOCH_CACHE (1007, asked of a broker, no
header), NOTIFY_BROKER_ROLE_CHANGED (1008), CONTROLLER_GET_NEXT_BROKER_ID (1012) and
CONTROLLER_APPLY_BROKER_ID (1013). Broker ids are longs, epochs ints, times epoch ms.
"""

from __future__ import annotations

import re

import attrs

#: How a controller's CONTROLLER_NOT_LEADER remark names the Raft leader's remoting address.
_LEADER_NAMED = re.compile(r"the leader is (\[[0-9a-fA-F:.]+\]:\d+|[\w.-]+:\d+)")


def leader_named(remark: str | None) -> str | None:
    """The leader's ``host:port`` a CONTROLLER_NOT_LEADER remark names (``...; the leader is
    host:port``), or None when it names none (no leader elected yet)."""
    found = _LEADER_NAMED.search(remark or "")
    return found.group(1) if found else None


@attrs.frozen(kw_only=True)
class BrokerHeartbeatRequestHeader:
    """BROKER_HEARTBEAT to a controller: who beats, its epoch and offsets, and how long the
    controller may wait for the next beat before the broker counts as gone."""

    cluster_name: str
    broker_addr: str
    broker_name: str
    broker_id: int | None = None
    epoch: int | None = None
    max_offset: int | None = None
    confirm_offset: int | None = None
    heartbeat_timeout_mills: int | None = None
    election_priority: int | None = None


@attrs.frozen(kw_only=True)
class GetNextBrokerIdRequestHeader:
    """CONTROLLER_GET_NEXT_BROKER_ID: the id a new broker of the group should apply for."""

    cluster_name: str
    broker_name: str


@attrs.frozen(kw_only=True)
class GetNextBrokerIdResponseHeader:
    """CONTROLLER_GET_NEXT_BROKER_ID's answer (ids start at 1; 0 is the registry's master)."""

    cluster_name: str | None = None
    broker_name: str | None = None
    next_broker_id: int | None = None


@attrs.frozen(kw_only=True)
class ApplyBrokerIdRequestHeader:
    """CONTROLLER_APPLY_BROKER_ID: claim ``applied_broker_id``; ``register_check_code`` is
    ``address;timestamp`` and lets the same broker claim the same id again."""

    cluster_name: str
    broker_name: str
    applied_broker_id: int
    register_check_code: str


@attrs.frozen(kw_only=True)
class ApplyBrokerIdResponseHeader:
    """CONTROLLER_APPLY_BROKER_ID's answer."""

    cluster_name: str | None = None
    broker_name: str | None = None


@attrs.frozen(kw_only=True)
class RegisterBrokerToControllerRequestHeader:
    """CONTROLLER_REGISTER_BROKER: a broker with its persisted id comes online at an address."""

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_address: str
    invoke_time: int = 0


@attrs.frozen(kw_only=True)
class RegisterBrokerToControllerResponseHeader:
    """CONTROLLER_REGISTER_BROKER's answer: the group's master as the controller knows it
    (no master id when the group has none yet); the body is the SyncStateSet."""

    cluster_name: str | None = None
    broker_name: str | None = None
    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: int | None = None
    sync_state_set_epoch: int | None = None


@attrs.frozen(kw_only=True)
class GetReplicaInfoRequestHeader:
    """CONTROLLER_GET_REPLICA_INFO: one group's master and epoch."""

    broker_name: str


@attrs.frozen(kw_only=True)
class GetReplicaInfoResponseHeader:
    """CONTROLLER_GET_REPLICA_INFO's answer; the body is the SyncStateSet."""

    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: int | None = None


@attrs.frozen(kw_only=True)
class AlterSyncStateSetRequestHeader:
    """CONTROLLER_ALTER_SYNC_STATE_SET: the master (at ``master_epoch``) proposes a new
    SyncStateSet (the body, with the epoch it was built on)."""

    broker_name: str
    master_broker_id: int
    master_epoch: int
    invoke_time: int = 0


@attrs.frozen(kw_only=True)
class AlterSyncStateSetResponseHeader:
    """CONTROLLER_ALTER_SYNC_STATE_SET's answer."""

    new_sync_state_set_epoch: int = 0


@attrs.frozen(kw_only=True)
class ElectMasterRequestHeader:
    """CONTROLLER_ELECT_MASTER: from a broker (no master known: ``broker_id`` is itself, not
    designated), from the controller's own scan, or from an operator (``designate_elect``
    with the broker id to make master)."""

    cluster_name: str = ""
    broker_name: str = ""
    broker_id: int = -1
    designate_elect: bool = False
    invoke_time: int = 0


@attrs.frozen(kw_only=True)
class ElectMasterResponseHeader:
    """CONTROLLER_ELECT_MASTER's answer; the body is an ElectMasterResponseBody."""

    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: int | None = None
    sync_state_set_epoch: int | None = None


@attrs.frozen(kw_only=True)
class GetMetaDataResponseHeader:
    """CONTROLLER_GET_METADATA_INFO's answer: the controller group and its leader.

    ``is_leader`` is written ``isLeader`` on the wire; ``peers`` is ``id-host:port``
    joined by ``;``."""

    group: str | None = None
    controller_leader_id: str | None = None
    controller_leader_address: str | None = None
    is_leader: bool = False
    peers: str | None = None


@attrs.frozen(kw_only=True)
class NotifyBrokerRoleChangedRequestHeader:
    """NOTIFY_BROKER_ROLE_CHANGED, controller to every live broker of a group after an
    election (oneway); the body is the new SyncStateSet."""

    master_address: str | None = None
    master_broker_id: int | None = None
    master_epoch: int | None = None
    sync_state_set_epoch: int | None = None


@attrs.frozen(kw_only=True)
class CleanControllerBrokerDataRequestHeader:
    """CLEAN_BROKER_DATA: forget brokers of a group (ids joined by ``;``; all when None)."""

    cluster_name: str | None = None
    broker_name: str
    broker_controller_ids_to_clean: str | None = None
    is_clean_living_broker: bool = False
