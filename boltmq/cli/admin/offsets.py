"""Verbs about consume progress: consumerProgress, resetOffsetByTime, skipAccumulatedMessage."""

from __future__ import annotations

import argparse
import datetime
from typing import Any

from boltmq.cli.admin._output import Column, Result, Table, number, timestamp
from boltmq.cli.admin._verbs import (
    AdminError,
    UsageError,
    arg,
    boolean,
    group_arg,
    topic_arg,
    verb,
)
from client import Admin
from client.admin import SYSTEM_CONSUMER_GROUP_PREFIX, SYSTEM_CONSUMER_GROUPS, is_system_group
from protocol.bodies import ConsumerConnection, ConsumeType, MessageQueue
from protocol.command import RemotingError

PROGRESS_COLUMNS = (
    Column("topic", "Topic"),
    Column("brokerName", "Broker Name"),
    number("queueId", "QID"),
    number("brokerOffset", "Broker Offset"),
    number("consumerOffset", "Consumer Offset"),
    Column("clientIp", "Client IP"),
    number("diff", "Diff"),
    timestamp("lastTimestamp", "LastTime"),
)

#: A pop group's rows add the messages in flight on each queue.
POP_PROGRESS_COLUMNS = (*PROGRESS_COLUMNS[:6], number("inFlight", "In Flight"),
                        *PROGRESS_COLUMNS[6:])  # fmt: skip

#: A pop group's second block: its figures per topic since each broker started.
POP_COLUMNS = (
    Column("topic", "Topic"),
    number("popped", "Popped"),
    number("acked", "Acked"),
    number("inFlight", "In Flight"),
    number("retried", "Retried"),
    number("deadLettered", "DLQ"),
)

GROUPS_COLUMNS = (
    Column("group", "Group"),
    number("count", "Count"),
    Column("version", "Version"),
    Column("type", "Type"),
    Column("model", "Model"),
    number("consumeTps", "TPS"),
    number("diffTotal", "Diff Total"),
)

#: MQVersion.Version ordinals: V4_0_0_SNAPSHOT and V5_0_0_SNAPSHOT; from there each minor
#: version takes 20 ordinals and each patch two (its SNAPSHOT, then the release).
_FIRST_ORDINAL = {4: 212, 5: 412}
_TYPE_DESC = {ConsumeType.CONSUME_ACTIVELY: "PULL", ConsumeType.CONSUME_PASSIVELY: "PUSH"}

SYSTEM_HELP = (
    "also list the system groups ("
    + ", ".join(sorted(SYSTEM_CONSUMER_GROUPS))
    + f" and {SYSTEM_CONSUMER_GROUP_PREFIX}*)"
)

RESET_COLUMNS = (
    Column("topic", "Topic"),
    Column("brokerName", "Broker Name"),
    number("queueId", "QID"),
    number("offset", "Offset"),
)

TIME_HELP = (
    "time to reset to: milliseconds since the epoch, 'now', or local time as "
    "yyyy-MM-dd#HH:mm:ss:SSS"
)


@verb(
    "consumerProgress",
    "a group's progress per queue: broker and consumer offsets, the consumer, the diff; "
    "without -g one row per consumer group of the cluster",
    "boltmq admin consumerProgress -n 127.0.0.1:9876 -g OrderConsumers [-t Orders] [--json]\n"
    "  boltmq admin consumerProgress -n 127.0.0.1:9876 [--system]    # every group",
    [
        group_arg(required=False), topic_arg(required=False),
        arg("--system", action="store_true", help=SYSTEM_HELP + "; without -g only"),
    ],
)  # fmt: skip
async def consumer_progress(admin: Admin, args: argparse.Namespace) -> Result:
    """consumerProgress: GET_CONSUME_STATS per master, the client of each queue if online."""
    if args.group is None:
        if args.topic is not None:
            raise UsageError("-t goes with -g: give the group whose progress on it to show")
        return await _all_groups_progress(admin, args.system)
    if args.system:
        raise UsageError("--system lists groups: give it without -g")
    stats = await admin.consume_stats(args.group, args.topic)
    if not stats.offset_table:
        on = f" on topic {args.topic}" if args.topic else ""
        raise AdminError(
            f"consumer group {args.group} has no offsets{on} on any broker; check the group "
            "name (a group that never committed an offset has no progress)"
        )
    clients = await _queue_clients(admin, args.group)
    rows = []
    for mq, wrapper in sorted(
        stats.offset_table.items(),
        key=lambda item: (item[0].topic, item[0].broker_name, item[0].queue_id),
    ):
        rows.append({
            "topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id,
            "brokerOffset": wrapper.broker_offset, "consumerOffset": wrapper.consumer_offset,
            "clientIp": clients.get(mq, ""),
            "diff": wrapper.broker_offset - wrapper.consumer_offset,
            "lastTimestamp": wrapper.last_timestamp,
            "inFlight": wrapper.in_flight or 0,
        })  # fmt: skip
    diff_total = sum(int(row["diff"]) for row in rows)  # type: ignore[call-overload]
    table = Table(POP_PROGRESS_COLUMNS if stats.pops else PROGRESS_COLUMNS, rows)
    document: dict[str, Any] = {
        "group": args.group,
        "consumeTps": round(stats.consume_tps, 2),
        "diffTotal": diff_total,
        "queues": table.to_json(),
    }
    tables: tuple[Table, ...] = (table,)
    if stats.pops:
        pop_rows = [
            {"topic": p.topic, "popped": p.ck_nums, "acked": p.ack_nums,
             "inFlight": p.in_flight, "retried": p.revive_nums, "deadLettered": p.dlq_put_nums}
            for p in sorted(stats.pop_stats.values(), key=lambda p: p.topic)
        ]  # fmt: skip
        pop_table = Table(POP_COLUMNS, pop_rows, "pop (RocketMQ 5), since each broker started")
        document["pop"] = pop_table.to_json()
        tables = (table, pop_table)
    return Result(
        document,
        tables,
        (f"Consume TPS: {stats.consume_tps:.2f}", f"Diff Total: {diff_total}"),
    )


@verb(
    "resetOffsetByTime",
    "move a group's offsets on a topic to a time (-s) or to an explicit offset (--offset; "
    "BoltMQ and RocketMQ 5 brokers only); live consumers follow at once",
    "boltmq admin resetOffsetByTime -n 127.0.0.1:9876 -g OrderConsumers -t Orders "
    "-s 2026-11-24#09:00:00:000",
    [
        group_arg(), topic_arg(),
        arg("-s", "--timestamp", help=TIME_HELP),
        arg("-f", "--force", type=boolean, default=True,
            help="also move queues forward (default true); false only moves back"),
        arg("--offset", type=int,
            help="reset to this queue offset instead of a time (BoltMQ-only request form)"),
        arg("-q", "--queueId", dest="queue_id", type=int,
            help="with --offset: only this queue (default: every queue)"),
    ],
)  # fmt: skip
async def reset_offset_by_time(admin: Admin, args: argparse.Namespace) -> Result:
    """resetOffsetByTime: INVOKE_BROKER_TO_RESET_OFFSET at each master of the topic."""
    if (args.timestamp is None) == (args.offset is None):
        raise UsageError("give either -s TIME or --offset N")
    if args.queue_id is not None and args.offset is None:
        raise UsageError("-q QUEUE_ID goes with --offset N")
    if args.offset is not None:
        if args.offset < 0:
            raise UsageError(f"--offset {args.offset} is negative")
        table = await admin.reset_offset(args.group, args.topic, args.offset,
                                         queue_id=args.queue_id)  # fmt: skip
    else:
        millis = parse_time(args.timestamp)
        table = await admin.reset_offset_by_time(args.group, args.topic, millis, force=args.force)
    return _reset_result(table)


@verb(
    "skipAccumulatedMessage",
    "move a group to the end of every queue of a topic: its backlog is skipped",
    "boltmq admin skipAccumulatedMessage -n 127.0.0.1:9876 -g OrderConsumers -t Orders",
    [group_arg(), topic_arg()],
)
async def skip_accumulated_message(admin: Admin, args: argparse.Namespace) -> Result:
    """skipAccumulatedMessage: a forced reset by time to -1 (each queue's max offset)."""
    table = await admin.reset_offset_by_time(args.group, args.topic, -1, force=True)
    return _reset_result(table)


def parse_time(text: str) -> int:
    """mqadmin's time forms: epoch milliseconds, ``now``, or ``yyyy-MM-dd#HH:mm:ss:SSS``."""
    if text == "now":
        return int(datetime.datetime.now().timestamp() * 1000)
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f")
    except ValueError:
        raise UsageError(f"-s {text!r} is not a time: {TIME_HELP}") from None
    return int(moment.timestamp() * 1000)


def _reset_result(table: dict[MessageQueue, int]) -> Result:
    if not table:
        raise AdminError("no queue was reset: the topic's brokers answered with no offsets")
    rows = [
        {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": o}
        for mq, o in sorted(table.items(), key=lambda item: (item[0].broker_name, item[0].queue_id))
    ]
    return Result.of_table(Table(RESET_COLUMNS, rows))


def version_desc(ordinal: int) -> str:
    """A client's version ordinal as RocketMQ names it (409 -> V4_9_8); else the number."""
    for major in (5, 4):
        offset = ordinal - _FIRST_ORDINAL[major]
        if 0 <= offset < 200:
            minor, step = divmod(offset, 20)
            patch, release = divmod(step, 2)
            return f"V{major}_{minor}_{patch}" + ("" if release else "_SNAPSHOT")
    return str(ordinal)


async def _all_groups_progress(admin: Admin, system: bool) -> Result:
    """One row per group the masters know: its live consumers, consume TPS and diff total."""
    groups = [g for g in await admin.consumer_groups() if system or not is_system_group(g)]
    rows: list[dict[str, Any]] = []
    for group in groups:
        stats = await admin.consume_stats(group)
        try:
            connections = await admin.consumer_connections(group)
        except RemotingError:
            connections = ConsumerConnection()  # offline: nobody heartbeats for it
        count = len(connections.connection_set)
        version = min((c.version for c in connections.connection_set), default=0)
        rows.append({
            "group": group, "count": count,
            "version": version_desc(version) if count else "OFFLINE",
            "type": _TYPE_DESC.get(connections.consume_type) if connections.consume_type is not
            None else None,
            "model": connections.message_model.name if connections.message_model is not None
            else None,
            "consumeTps": round(stats.consume_tps, 2),
            "diffTotal": sum(w.broker_offset - w.consumer_offset
                             for w in stats.offset_table.values()),
        })  # fmt: skip
    # As mqadmin: groups with more live consumers first, then the larger backlog.
    rows.sort(key=lambda row: (-row["count"], -row["diffTotal"], row["group"]))
    notes = () if rows else ("no consumer group on any master",)
    return Result.of_table(Table(GROUPS_COLUMNS, rows), notes)


async def _queue_clients(admin: Admin, group: str) -> dict[MessageQueue, str]:
    """Queue -> IP of the live consumer holding it (empty when the group is offline)."""
    try:
        connections = await admin.consumer_connections(group)
    except RemotingError:
        return {}
    owners: dict[MessageQueue, str] = {}
    for connection in connections.connection_set:
        try:
            info = await admin.consumer_running_info(group, connection.client_id)
        except RemotingError:
            continue  # a consumer that left between the two calls
        ip = connection.client_id.split("@", 1)[0]
        for mq in info.mq_table:
            owners[mq] = ip
    return owners
