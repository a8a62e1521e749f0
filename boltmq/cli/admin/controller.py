"""Verbs of controller mode (RocketMQ 5's RIP-44): getControllerMetaData, getSyncStateSet,
getBrokerEpoch, electMaster, with mqadmin's names, flags and fields.

``-a`` names one controller or several (``host:port;host:port``, the remoting ports): reads
are answered by the first that answers, an election by the leader, found from a follower's
CONTROLLER_NOT_LEADER answer.
"""

from __future__ import annotations

import argparse

from boltmq.cli.admin._output import Column, Result, Table, number
from boltmq.cli.admin._verbs import AdminError, Arg, UsageError, arg, verb
from client import Admin
from protocol.bodies import OPEN_END_OFFSET, ReplicaIdentity

GROUP_COLUMNS = (
    Column("brokerName", "#brokerName"),
    number("masterBrokerId", "#MasterBrokerId"),
    Column("masterAddr", "#MasterAddr"),
    number("masterEpoch", "#MasterEpoch"),
    number("syncStateSetEpoch", "#SyncStateSetEpoch"),
    number("syncStateSetNums", "#SyncStateSetNums"),
)
REPLICA_COLUMNS = (
    Column("brokerName", "brokerName"),
    Column("state", "Replica"),
    number("brokerId", "brokerId"),
    Column("brokerAddress", "brokerAddress"),
    Column("alive", "alive"),
)
EPOCH_COLUMNS = (
    Column("clusterName", "#clusterName"),
    Column("brokerName", "#brokerName"),
    Column("brokerAddr", "#brokerAddr"),
    number("brokerId", "#brokerId"),
    number("epoch", "Epoch"),
    number("startOffset", "StartOffset"),
    number("endOffset", "EndOffset"),
)
MEMBER_COLUMNS = (number("brokerId", "#Broker"), Column("address", "Addr"))


def controller_arg() -> Arg:
    """``-a/--controllerAddress``."""
    return arg(
        "-a", "--controllerAddress", dest="controller_addr", required=True,
        metavar="HOST:PORT[;HOST:PORT]", help="controller address(es): remoting listenPort",
    )  # fmt: skip


@verb(
    "getControllerMetaData",
    "the controller group: its name, leader id and address, and peers",
    "boltmq admin getControllerMetaData -a 127.0.0.1:9878",
    [controller_arg()],
)
async def get_controller_metadata(admin: Admin, args: argparse.Namespace) -> Result:
    """getControllerMetaData: CONTROLLER_GET_METADATA_INFO."""
    meta = await admin.controller_metadata(args.controller_addr)
    peers = [p for p in (meta.peers or "").split(";") if p]
    document = {
        "controllerGroup": meta.group,
        "controllerLeaderId": meta.controller_leader_id,
        "controllerLeaderAddress": meta.controller_leader_address,
        "isLeader": meta.is_leader,
        "peers": peers,
    }
    rows = [
        {"key": "#ControllerGroup", "value": meta.group or ""},
        {"key": "#ControllerLeaderId", "value": meta.controller_leader_id or ""},
        {"key": "#ControllerLeaderAddress", "value": meta.controller_leader_address or ""},
        *({"key": "#Peer:", "value": peer} for peer in peers),
    ]
    columns = (Column("key", "Key"), Column("value", "Value"))
    return Result(document, (Table(columns, rows),))


@verb(
    "getSyncStateSet",
    "each broker group's master, epochs and SyncStateSet, from a controller (-b one group, "
    "-c every group of a cluster the registry knows)",
    "boltmq admin getSyncStateSet -a 127.0.0.1:9878 -b broker-a",
    [
        controller_arg(),
        arg("-b", "--brokerName", dest="broker_name", help="the broker group to show"),
        arg("-c", "--clusterName", dest="cluster", help="every group of this cluster (needs -n)"),
    ],
)
async def get_sync_state_set(admin: Admin, args: argparse.Namespace) -> Result:
    """getSyncStateSet: CONTROLLER_GET_SYNC_STATE_DATA."""
    if (args.broker_name is None) == (args.cluster is None):
        raise UsageError("give either -b BROKER_NAME or -c CLUSTER")
    if args.broker_name is not None:
        names = [args.broker_name]
    else:
        names = await admin.broker_names_of_cluster(args.cluster)
        if not names:
            raise AdminError(f"cluster {args.cluster} has no broker; check with clusterList")
    info = await admin.sync_state_data(args.controller_addr, names)
    groups: list[dict[str, object]] = []
    replicas: list[dict[str, object]] = []
    for name, replica in sorted(info.replicas_info_table.items()):
        groups.append({
            "brokerName": name,
            "masterBrokerId": replica.master_broker_id,
            "masterAddr": replica.master_address,
            "masterEpoch": replica.master_epoch,
            "syncStateSetEpoch": replica.sync_state_set_epoch,
            "syncStateSetNums": len(replica.in_sync_replicas),
        })  # fmt: skip
        replicas += [_replica(name, "InSyncReplica", r) for r in replica.in_sync_replicas]
        replicas += [_replica(name, "NotInSyncReplica", r) for r in replica.not_in_sync_replicas]
    document = [
        {**group, "replicas": [r for r in replicas if r["brokerName"] == group["brokerName"]]}
        for group in groups
    ]
    return Result(document, (Table(GROUP_COLUMNS, groups), Table(REPLICA_COLUMNS, replicas)))


@verb(
    "getBrokerEpoch",
    "the epoch entries of each broker of a group (-b) or of a cluster (-c): which master "
    "epoch wrote which commit-log offsets",
    "boltmq admin getBrokerEpoch -n 127.0.0.1:9876 -b broker-a",
    [
        arg("-b", "--brokerName", dest="broker_name", help="every broker of this group"),
        arg("-c", "--clusterName", dest="cluster", help="every broker of this cluster"),
    ],
)
async def get_broker_epoch(admin: Admin, args: argparse.Namespace) -> Result:
    """getBrokerEpoch: GET_BROKER_EPOCH_CACHE at each broker (master and slaves)."""
    if (args.broker_name is None) == (args.cluster is None):
        raise UsageError("give either -b BROKER_NAME or -c CLUSTER")
    groups = await admin.group_addresses(broker_name=args.broker_name, cluster=args.cluster)
    rows: list[dict[str, object]] = []
    for _, members in sorted(groups.items()):
        for _, address in sorted(members.items()):
            cache = await admin.broker_epoch_cache(address)
            entries = cache.epoch_list
            for index, entry in enumerate(entries):
                end = entry.end_offset
                if index == len(entries) - 1 or end == OPEN_END_OFFSET:
                    end = cache.max_offset  # the current epoch ends where the log does
                rows.append({
                    "clusterName": cache.cluster_name, "brokerName": cache.broker_name,
                    "brokerAddr": address, "brokerId": cache.broker_id, "epoch": entry.epoch,
                    "startOffset": entry.start_offset, "endOffset": end,
                })  # fmt: skip
            if not entries:
                rows.append({
                    "clusterName": cache.cluster_name, "brokerName": cache.broker_name,
                    "brokerAddr": address, "brokerId": cache.broker_id, "epoch": None,
                    "startOffset": None, "endOffset": cache.max_offset,
                })  # fmt: skip
    return Result.of_table(Table(EPOCH_COLUMNS, rows))


@verb(
    "electMaster",
    "make one broker of a group its master (the controller checks it is alive and in sync)",
    "boltmq admin electMaster -a 127.0.0.1:9878 -c DefaultCluster -bn broker-a -b 2",
    [
        controller_arg(),
        arg("-c", "--clusterName", dest="cluster", required=True, help="the group's cluster"),
        arg("-bn", "--brokerName", dest="broker_name", required=True, help="the broker group"),
        arg(
            "-b",
            "--brokerId",
            dest="broker_id",
            type=int,
            required=True,
            help="the controller-assigned id of the broker to become master",
        ),
    ],
)
async def elect_master(admin: Admin, args: argparse.Namespace) -> Result:
    """electMaster: CONTROLLER_ELECT_MASTER with designateElect."""
    header, body = await admin.elect_master(
        args.controller_addr, args.cluster, args.broker_name, args.broker_id
    )
    members = body.broker_member_group.broker_addrs if body.broker_member_group else {}
    document = {
        "clusterName": args.cluster,
        "brokerName": args.broker_name,
        "masterBrokerId": header.master_broker_id,
        "brokerMasterAddr": header.master_address,
        "masterEpoch": header.master_epoch,
        "syncStateSetEpoch": header.sync_state_set_epoch,
        "syncStateSet": sorted(body.sync_state_set),
        "brokers": {str(k): v for k, v in sorted(members.items())},
    }
    rows = [{"brokerId": k, "address": v} for k, v in sorted(members.items())]
    notes = (
        f"#ClusterName\t{args.cluster}",
        f"#BrokerName\t{args.broker_name}",
        f"#BrokerMasterAddr\t{header.master_address}",
        f"#MasterEpoch\t{header.master_epoch}",
        f"#SyncStateSetEpoch\t{header.sync_state_set_epoch}",
    )
    return Result(document, (Table(MEMBER_COLUMNS, rows),), notes)


def _replica(name: str, state: str, replica: ReplicaIdentity) -> dict[str, object]:
    return {
        "brokerName": name,
        "state": state,
        "brokerId": replica.broker_id,
        "brokerAddress": replica.broker_address,
        "alive": replica.alive,
    }
