"""Verbs about brokers: clusterList, brokerStatus, getBrokerConfig, updateBrokerConfig."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable

import orjson
import trio

from boltmq.cli._argtypes import positive_int
from boltmq.cli.admin._output import Column, Result, Table, number, render
from boltmq.cli.admin._runner import round_deadline
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


MORE_COLUMNS = (
    Column("cluster", "Cluster Name"),
    Column("brokerName", "Broker Name"),
    number("brokerId", "BID"),
    Column("address", "Addr"),
    number("inTotalYest", "InTotalYest"),
    number("outTotalYest", "OutTotalYest"),
    number("inTotalToday", "InTotalToday"),
    number("outTotalToday", "OutTotalToday"),
)


@verb(
    "clusterList",
    "every broker of every cluster: address, version, TPS in and out, hours stored, disk use; "
    "-m the messages put and got yesterday and today; -i repeat every N seconds",
    "boltmq admin clusterList -n 127.0.0.1:9876 [-c DefaultCluster] [-m] [-i 5] [--json]",
    [
        cluster_arg(),
        arg("-m", "--moreStats", dest="more", action="store_true",
            help="messages put (In) and got (Out) yesterday and so far today, per broker"),
        arg("-i", "--interval", type=positive_int, metavar="SECONDS",
            help="print again every SECONDS until Ctrl-C; with --json one JSON document per "
            "line and round: {\"round\", \"timestamp\", \"brokers\"}"),
    ],
)  # fmt: skip
async def cluster_list(admin: Admin, args: argparse.Namespace) -> Result:
    """clusterList: one row per broker (a broker that does not answer shows no figures)."""
    if args.interval is None:
        return Result.of_table(await _cluster_table(admin, args))
    return await _repeat(admin, args)


async def _cluster_table(admin: Admin, args: argparse.Namespace, title: str | None = None) -> Table:
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
                    "address": address,
                }  # fmt: skip
                columns = MORE_COLUMNS if args.more else CLUSTER_COLUMNS
                row.update({c.key: None for c in columns if c.key not in row})
                try:
                    runtime = await admin.broker_runtime_info(address)
                except RemotingError:
                    rows.append(row)  # listed by the registry but not answering
                    continue
                if args.more:
                    row.update(_day_totals(runtime))
                else:
                    earliest = _int(runtime.get("earliestMessageTimeStamp"))
                    row.update(
                        version=runtime.get("brokerVersionDesc"),
                        inTps=round(_first_float(runtime.get("putTps")), 2),
                        outTps=round(_first_float(runtime.get("getTransferedTps")), 2),
                        retentionHours=(now_ms - earliest) // 3_600_000 if earliest > 0 else 0,
                        diskRatio=round(_first_float(runtime.get("commitLogDiskRatio")), 4),
                    )
                rows.append(row)
    return Table(MORE_COLUMNS if args.more else CLUSTER_COLUMNS, rows, title)


def _day_totals(runtime: dict[str, str]) -> dict[str, int]:
    """The broker counts puts and gets since it started and notes both at midnight."""
    put_yesterday = _int(runtime.get("msgPutTotalYesterdayMorning"))
    put_morning = _int(runtime.get("msgPutTotalTodayMorning"))
    get_yesterday = _int(runtime.get("msgGetTotalYesterdayMorning"))
    get_morning = _int(runtime.get("msgGetTotalTodayMorning"))
    return {
        "inTotalYest": put_morning - put_yesterday,
        "outTotalYest": get_morning - get_yesterday,
        "inTotalToday": _int(runtime.get("msgPutTotalTodayNow")) - put_morning,
        "outTotalToday": _int(runtime.get("msgGetTotalTodayNow")) - get_morning,
    }


async def _repeat(admin: Admin, args: argparse.Namespace) -> Result:
    """clusterList -i: a round every interval until SIGINT or SIGTERM, each printed at once."""
    rounds = 0
    failure: BaseException | None = None

    async def loop() -> None:
        nonlocal rounds
        while True:
            started = time.time()
            title = f"round {rounds + 1} at {time.strftime('%H:%M:%S', time.localtime(started))}"
            with trio.fail_after(round_deadline(args)):
                table = await _cluster_table(admin, args, title)
            rounds += 1
            if args.json:
                document = {"round": rounds, "timestamp": int(started * 1000),
                            "brokers": table.to_json()}  # fmt: skip
                sys.stdout.write(orjson.dumps(document).decode() + "\n")
                sys.stdout.flush()
            else:
                render(Result.of_table(table), as_json=False)
            await trio.sleep(args.interval)

    async with trio.open_nursery() as nursery:
        if threading.current_thread() is threading.main_thread():  # signals reach it alone
            nursery.start_soon(_cancel_on_signal, nursery.cancel_scope)
        try:
            await loop()
        except Exception as exc:  # raised after the nursery, not wrapped in a group
            failure = exc
        nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return Result(None, (), (f"stopped after {rounds} round(s)",), streamed=True)


async def _cancel_on_signal(scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            scope.cancel()
            return


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
