"""Verbs about brokers: clusterList, brokerStatus, getBrokerConfig, updateBrokerConfig."""

from __future__ import annotations

import argparse
import time
from collections.abc import Awaitable, Callable

from boltmq.cli.admin._output import Column, Result, Table, number
from boltmq.cli.admin._verbs import (
    AdminError,
    arg,
    broker_addr_arg,
    cluster_arg,
    target_brokers,
    verb,
)
from client import Admin
from protocol.command import RemotingError

CLUSTER_COLUMNS = (
    Column("cluster", "Cluster Name"),
    Column("brokerName", "Broker Name"),
    number("brokerId", "BID"),
    Column("address", "Addr"),
    Column("version", "Version"),
    number("inTps", "InTPS"),
    number("outTps", "OutTPS"),
    number("retentionHours", "Hour"),
    number("diskRatio", "SPACE"),
)


@verb(
    "clusterList",
    "every broker of every cluster: address, version, TPS in and out, hours stored, disk use",
    "boltmq admin clusterList -n 127.0.0.1:9876 [-c DefaultCluster] [--json]",
    [cluster_arg()],
)
async def cluster_list(admin: Admin, args: argparse.Namespace) -> Result:
    """clusterList: one row per broker (a broker that does not answer shows no figures)."""
    info = await admin.cluster_info()
    clusters = sorted(info.cluster_addr_table)
    if args.cluster is not None:
        if args.cluster not in info.cluster_addr_table:
            raise AdminError(
                f"no cluster named {args.cluster}; known: {', '.join(clusters) or 'none'}"
            )
        clusters = [args.cluster]
    now_ms = int(time.time() * 1000)
    rows = []
    for cluster in clusters:
        for broker_name in sorted(info.cluster_addr_table[cluster]):
            data = info.broker_addr_table.get(broker_name)
            if data is None:
                continue
            for broker_id, address in sorted(data.broker_addrs.items()):
                row: dict[str, object] = {
                    "cluster": cluster, "brokerName": broker_name, "brokerId": broker_id,
                    "address": address, "version": None, "inTps": None, "outTps": None,
                    "retentionHours": None, "diskRatio": None,
                }  # fmt: skip
                try:
                    runtime = await admin.broker_runtime_info(address)
                except RemotingError:
                    rows.append(row)  # listed by the registry but not answering
                    continue
                earliest = _int(runtime.get("earliestMessageTimeStamp"))
                row.update(
                    version=runtime.get("brokerVersionDesc"),
                    inTps=round(_first_float(runtime.get("putTps")), 2),
                    outTps=round(_first_float(runtime.get("getTransferedTps")), 2),
                    retentionHours=(now_ms - earliest) // 3_600_000 if earliest > 0 else 0,
                    diskRatio=round(_first_float(runtime.get("commitLogDiskRatio")), 4),
                )
                rows.append(row)
    return Result.of_table(Table(CLUSTER_COLUMNS, rows))


@verb(
    "brokerStatus",
    "a broker's runtime figures (GET_BROKER_RUNTIME_INFO), by -b address or for each of -c",
    "boltmq admin brokerStatus -n 127.0.0.1:9876 -b 127.0.0.1:10911",
    [broker_addr_arg(), cluster_arg()],
)
async def broker_status(admin: Admin, args: argparse.Namespace) -> Result:
    """brokerStatus: the KV table; with -c, one table per master keyed by its address."""
    return await _per_broker(admin, args, admin.broker_runtime_info)


@verb(
    "getBrokerConfig",
    "a broker's settings, by -b address or for each master of -c",
    "boltmq admin getBrokerConfig -n 127.0.0.1:9876 -b 127.0.0.1:10911",
    [broker_addr_arg(), cluster_arg()],
)
async def get_broker_config(admin: Admin, args: argparse.Namespace) -> Result:
    """getBrokerConfig: setting -> value; with -c, keyed by broker address."""
    return await _per_broker(admin, args, admin.broker_config)


@verb(
    "updateBrokerConfig",
    "change a setting of running brokers (-b one, -c every master); refused keys say why",
    "boltmq admin updateBrokerConfig -n 127.0.0.1:9876 -b 127.0.0.1:10911 "
    "-k brokerPermission -v 4",
    [
        broker_addr_arg(), cluster_arg(),
        arg("-k", "--key", required=True, help="setting name, e.g. brokerPermission"),
        arg("-v", "--value", required=True, help="new value"),
    ],
)  # fmt: skip
async def update_broker_config(admin: Admin, args: argparse.Namespace) -> Result:
    """updateBrokerConfig: one setting on each target broker."""
    addresses = await target_brokers(admin, args)
    for address in addresses:
        await admin.update_broker_config(address, {args.key: args.value})
    return Result.done(
        f"updated {args.key}={args.value} on {', '.join(addresses)}",
        {"key": args.key, "value": args.value, "brokers": addresses},
    )


async def _per_broker(
    admin: Admin, args: argparse.Namespace, fetch: Callable[[str], Awaitable[dict[str, str]]]
) -> Result:
    addresses = await target_brokers(admin, args)
    tables = {}
    for address in addresses:
        tables[address] = await fetch(address)
    if args.broker_addr is not None:
        return Result.of_mapping(tables[args.broker_addr])
    columns = (Column("broker", "Broker"), Column("key", "Key"), Column("value", "Value"))
    rows = [
        {"broker": address, "key": key, "value": table[key]}
        for address, table in tables.items()
        for key in sorted(table)
    ]
    return Result(tables, (Table(columns, rows),))


def _first_float(text: str | None) -> float:
    # putTps and friends read "10s-rate 1min-rate 10min-rate"; the first is the current one.
    try:
        return float((text or "0").split()[0])
    except (ValueError, IndexError):
        return 0.0


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0
