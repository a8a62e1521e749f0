"""statsAll: traffic in and out of each topic and each of its consumer groups."""

from __future__ import annotations

import argparse

from boltmq.cli.admin._output import Column, Result, Table, number
from boltmq.cli.admin._verbs import arg, topic_arg, verb
from client import Admin
from protocol import names
from protocol.bodies import BrokerStatsData
from protocol.codes import ResponseCode
from protocol.command import RemotingError

STATS_COLUMNS = (
    Column("topic", "Topic"),
    Column("consumerGroup", "Consumer Group"),
    number("accumulation", "Accumulation"),
    number("inTps", "InTPS"),
    number("outTps", "OutTPS"),
    number("inMsg24Hour", "InMsg24Hour"),
    number("outMsg24Hour", "OutMsg24Hour"),
)

#: Statistic names of VIEW_BROKER_STATS_DATA (RocketMQ's BrokerStatsManager).
TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
GROUP_GET_NUMS = "GROUP_GET_NUMS"


@verb(
    "statsAll",
    "messages in and out per topic and consumer group: TPS, last 24 hours, accumulation "
    "(brokers sample every 10 s)",
    "boltmq admin statsAll -n 127.0.0.1:9876 [-t Orders] [-a]",
    [
        topic_arg(required=False),
        arg("-a", "--activeTopic", dest="active", action="store_true",
            help="only topics that received messages in the last 24 hours"),
    ],
)  # fmt: skip
async def stats_all(admin: Admin, args: argparse.Namespace) -> Result:
    """statsAll: one row per topic and group (a topic nobody consumes gets one row)."""
    if args.topic is not None:
        await admin.route(args.topic)  # an unknown topic is an error, not an empty table
        topics = [args.topic]
    else:
        topics = [t for t in await admin.topic_list() if not names.is_retry_or_dlq_topic(t)]
    rows = []
    for topic in topics:
        try:
            route = await admin.route(topic)
        except RemotingError:
            continue  # listed but gone (deleted meanwhile)
        masters = [b.broker_addrs[0] for b in route.broker_datas if 0 in b.broker_addrs]
        in_tps, in_day = 0.0, 0
        for address in masters:
            data = await _stats(admin, address, TOPIC_PUT_NUMS, topic)
            in_tps += data.stats_minute.tps
            in_day += _day_sum(data)
        if args.active and in_day == 0:
            continue
        groups = await admin.topic_consumed_by(topic)
        base = {"topic": topic, "inTps": round(in_tps, 2), "inMsg24Hour": in_day}
        if not groups:
            rows.append({**base, "consumerGroup": "", "accumulation": 0, "outTps": 0.0,
                         "outMsg24Hour": 0})  # fmt: skip
        for group in groups:
            out_tps, out_day = 0.0, 0
            for address in masters:
                data = await _stats(admin, address, GROUP_GET_NUMS, f"{topic}@{group}")
                out_tps += data.stats_minute.tps
                out_day += _day_sum(data)
            lag = (await admin.consume_stats(group, topic)).lag
            rows.append({**base, "consumerGroup": group, "accumulation": lag,
                         "outTps": round(out_tps, 2), "outMsg24Hour": out_day})  # fmt: skip
    return Result.of_table(Table(STATS_COLUMNS, rows))


async def _stats(admin: Admin, address: str, name: str, key: str) -> BrokerStatsData:
    try:
        return await admin.broker_stats(address, name, key)
    except RemotingError as exc:
        if exc.code == ResponseCode.SYSTEM_ERROR and "not exist" in exc.remark:
            return BrokerStatsData()  # nothing counted yet for this key
        raise


def _day_sum(data: BrokerStatsData) -> int:
    # As mqadmin: the day window once it has a sample, else the hour's, else the minute's.
    for item in (data.stats_day, data.stats_hour, data.stats_minute):
        if item.sum:
            return item.sum
    return 0
