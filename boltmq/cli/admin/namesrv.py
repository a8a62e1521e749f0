"""Verbs about the registries: getNamesrvConfig, updateKvConfig, deleteKvConfig,
wipeWritePerm, addWritePerm."""

from __future__ import annotations

import argparse

from boltmq.cli.admin._output import Column, Result, Table, number
from boltmq.cli.admin._verbs import AdminError, arg, verb
from client import Admin

PERM_COLUMNS = (
    Column("namesrvAddr", "Name Server"),
    Column("brokerName", "Broker Name"),
    number("topicCount", "Topics Changed"),
)


@verb(
    "getNamesrvConfig",
    "each registry's settings",
    "boltmq admin getNamesrvConfig -n 127.0.0.1:9876",
)
async def get_namesrv_config(admin: Admin, args: argparse.Namespace) -> Result:
    """getNamesrvConfig: registry address -> setting -> value."""
    configs = await admin.namesrv_config()
    columns = (Column("namesrvAddr", "Name Server"), Column("key", "Key"), Column("value", "Value"))
    rows = [
        {"namesrvAddr": address, "key": key, "value": config[key]}
        for address, config in configs.items()
        for key in sorted(config)
    ]
    return Result(configs, (Table(columns, rows),))


@verb(
    "updateKvConfig",
    "set a KV config entry in every registry (e.g. ORDER_TOPIC_CONFIG)",
    "boltmq admin updateKvConfig -n 127.0.0.1:9876 -s ORDER_TOPIC_CONFIG -k Orders -v broker-a:8",
    [
        arg("-s", "--namespace", required=True, help="KV namespace"),
        arg("-k", "--key", required=True, help="key"),
        arg("-v", "--value", required=True, help="value"),
    ],
)
async def update_kv_config(admin: Admin, args: argparse.Namespace) -> Result:
    """updateKvConfig: PUT_KV_CONFIG at each registry."""
    await admin.put_kv_config(args.namespace, args.key, args.value)
    count = len(admin.instance.registries)
    return Result.done(
        f"{args.namespace}/{args.key} = {args.value} set in {count} "
        + ("registry" if count == 1 else "registries"),
        {"namespace": args.namespace, "key": args.key, "value": args.value},
    )


@verb(
    "deleteKvConfig",
    "remove a KV config entry from every registry",
    "boltmq admin deleteKvConfig -n 127.0.0.1:9876 -s ORDER_TOPIC_CONFIG -k Orders",
    [
        arg("-s", "--namespace", required=True, help="KV namespace"),
        arg("-k", "--key", required=True, help="key"),
    ],
)
async def delete_kv_config(admin: Admin, args: argparse.Namespace) -> Result:
    """deleteKvConfig: DELETE_KV_CONFIG at each registry."""
    await admin.delete_kv_config(args.namespace, args.key)
    return Result.done(
        f"{args.namespace}/{args.key} deleted", {"namespace": args.namespace, "key": args.key}
    )


@verb(
    "wipeWritePerm",
    "stop producers writing to a broker (its topics become read-only in the registries)",
    "boltmq admin wipeWritePerm -n 127.0.0.1:9876 -b broker-a",
    [arg("-b", "--brokerName", dest="broker_name", required=True, help="broker name")],
)
async def wipe_write_perm(admin: Admin, args: argparse.Namespace) -> Result:
    """wipeWritePerm: WIPE_WRITE_PERM_OF_BROKER at each registry."""
    await _check_broker_name(admin, args.broker_name)
    counts = await admin.wipe_write_perm(args.broker_name)
    return _perm_result(args.broker_name, counts)


@verb(
    "addWritePerm",
    "let producers write to a broker again (undoes wipeWritePerm)",
    "boltmq admin addWritePerm -n 127.0.0.1:9876 -b broker-a",
    [arg("-b", "--brokerName", dest="broker_name", required=True, help="broker name")],
)
async def add_write_perm(admin: Admin, args: argparse.Namespace) -> Result:
    """addWritePerm: ADD_WRITE_PERM_OF_BROKER at each registry."""
    await _check_broker_name(admin, args.broker_name)
    counts = await admin.add_write_perm(args.broker_name)
    return _perm_result(args.broker_name, counts)


def _perm_result(broker_name: str, counts: dict[str, int]) -> Result:
    rows = [
        {"namesrvAddr": address, "brokerName": broker_name, "topicCount": count}
        for address, count in counts.items()
    ]
    return Result.of_table(Table(PERM_COLUMNS, rows))


async def _check_broker_name(admin: Admin, broker_name: str) -> None:
    # The registry answers "0 topics changed" for any name; a typo deserves an error.
    known = sorted((await admin.cluster_info()).broker_addr_table)
    if broker_name not in known:
        raise AdminError(
            f"no broker named {broker_name} in the registry; known: {', '.join(known) or 'none'}"
        )
