"""Verbs about topics: topicList, topicRoute, topicStatus, updateTopic, topicConfig,
deleteTopic, updateTopicPerm."""

from __future__ import annotations

import argparse

import orjson

from boltmq.cli.admin._output import Column, Result, Table, number, timestamp
from boltmq.cli.admin._verbs import (
    AdminError,
    UsageError,
    arg,
    boolean,
    broker_addr_arg,
    cluster_arg,
    target_brokers,
    topic_arg,
    verb,
)
from client import Admin
from protocol.bodies import MESSAGE_TYPES, perm_to_string

STATUS_COLUMNS = (
    Column("brokerName", "Broker Name"),
    number("queueId", "QID"),
    number("minOffset", "Min Offset"),
    number("maxOffset", "Max Offset"),
    timestamp("lastUpdated", "Last Updated"),
)

ROUTE_BROKER_COLUMNS = (
    Column("cluster", "Cluster"),
    Column("brokerName", "Broker Name"),
    number("brokerId", "BID"),
    Column("address", "Addr"),
)

ROUTE_QUEUE_COLUMNS = (
    Column("brokerName", "Broker Name"),
    number("readQueueNums", "Read Queues"),
    number("writeQueueNums", "Write Queues"),
    number("perm", "Perm"),
    Column("permText", "RWX"),
)

TOPIC_CONFIG_COLUMNS = (
    Column("brokerName", "Broker Name"),
    number("readQueueNums", "Read Queues"),
    number("writeQueueNums", "Write Queues"),
    number("perm", "Perm"),
    Column("order", "Order"),
    Column("messageType", "Message Type"),
    Column("attributes", "Attributes"),
)

PERM_HELP = "permission: 2 write only, 4 read only, 6 read and write"


@verb(
    "topicList",
    "every topic the registry knows",
    "boltmq admin topicList -n 127.0.0.1:9876 [--json]",
)
async def topic_list(admin: Admin, args: argparse.Namespace) -> Result:
    """topicList: topic names, sorted."""
    topics = await admin.topic_list()
    table = Table((Column("topic", "Topic"),), [{"topic": t} for t in topics])
    return Result(topics, (table,))


@verb(
    "topicRoute",
    "where a topic's queues live: its brokers and their queue counts and perm",
    "boltmq admin topicRoute -n 127.0.0.1:9876 -t Orders",
    [topic_arg()],
)
async def topic_route(admin: Admin, args: argparse.Namespace) -> Result:
    """topicRoute: the registry's route, as RocketMQ writes it (brokerDatas, queueDatas)."""
    route = await admin.route(args.topic)
    brokers = [
        {"cluster": b.cluster, "brokerName": b.broker_name, "brokerId": i, "address": a}
        for b in route.broker_datas
        for i, a in sorted(b.broker_addrs.items())
    ]
    queues = [
        {"brokerName": q.broker_name, "readQueueNums": q.read_queue_nums,
         "writeQueueNums": q.write_queue_nums, "perm": q.perm, "permText": perm_to_string(q.perm)}
        for q in route.queue_datas
    ]  # fmt: skip
    document = orjson.loads(route.to_json())
    return Result(
        document,
        (
            Table(ROUTE_BROKER_COLUMNS, brokers, "brokers"),
            Table(ROUTE_QUEUE_COLUMNS, queues, "queues"),
        ),
    )


@verb(
    "topicStatus",
    "each queue of a topic: min and max offset and the time of its last message",
    "boltmq admin topicStatus -n 127.0.0.1:9876 -t Orders [--json]",
    [topic_arg()],
)
async def topic_status(admin: Admin, args: argparse.Namespace) -> Result:
    """topicStatus: one row per queue, by broker name and queue id."""
    stats = await admin.topic_stats(args.topic)
    rows = [
        {"brokerName": mq.broker_name, "queueId": mq.queue_id, "minOffset": o.min_offset,
         "maxOffset": o.max_offset, "lastUpdated": o.last_update_timestamp}
        for mq, o in sorted(stats.offset_table.items(),
                            key=lambda item: (item[0].broker_name, item[0].queue_id))
    ]  # fmt: skip
    return Result.of_table(Table(STATUS_COLUMNS, rows))


@verb(
    "updateTopic",
    "create a topic or change its queue counts, perm or order flag (-b one broker, -c all)",
    "boltmq admin updateTopic -n 127.0.0.1:9876 -c DefaultCluster -t Orders -r 8 -w 8",
    [
        topic_arg(), broker_addr_arg(), cluster_arg(),
        arg("-r", "--readQueueNums", dest="read_queue_nums", type=int, default=8,
            help="read queues (default 8)"),
        arg("-w", "--writeQueueNums", dest="write_queue_nums", type=int, default=8,
            help="write queues (default 8)"),
        arg("-p", "--perm", type=int, default=6, choices=(2, 4, 6), help=PERM_HELP),
        arg("-o", "--order", type=boolean, default=False, help="ordered topic: true or false"),
        arg("-a", "--attributes", default=None,
            help="RocketMQ 5 attributes to set (+key=value) or remove (-key), comma separated, "
                 "e.g. +message.type=FIFO; message.type is one of "
                 + ", ".join(sorted(MESSAGE_TYPES))),
    ],
)  # fmt: skip
async def update_topic(admin: Admin, args: argparse.Namespace) -> Result:
    """updateTopic: UPDATE_AND_CREATE_TOPIC on each target broker."""
    if args.read_queue_nums < 1 or args.write_queue_nums < 1:
        raise UsageError("-r and -w must be at least 1")
    addresses = await target_brokers(admin, args)
    for address in addresses:
        await admin.create_topic(
            args.topic, broker_addr=address, perm=args.perm, order=args.order,
            read_queue_nums=args.read_queue_nums, write_queue_nums=args.write_queue_nums,
            attributes=args.attributes,
        )  # fmt: skip
    document = {"topic": args.topic, "readQueueNums": args.read_queue_nums,
                "writeQueueNums": args.write_queue_nums, "perm": args.perm, "order": args.order,
                "brokers": addresses}  # fmt: skip
    if args.attributes:
        document["attributes"] = args.attributes
    return Result.done(f"topic {args.topic} updated on {', '.join(addresses)}", document)


@verb(
    "topicConfig",
    "a topic's config on each master that serves it, with its RocketMQ 5 attributes",
    "boltmq admin topicConfig -n 127.0.0.1:9876 -t Orders [--json]",
    [topic_arg()],
)
async def topic_config(admin: Admin, args: argparse.Namespace) -> Result:
    """topicConfig: GET_TOPIC_CONFIG on each master of the topic's route."""
    route = await admin.route(args.topic)
    rows = []
    documents = {}
    for broker in sorted(route.broker_datas, key=lambda b: b.broker_name):
        address = broker.broker_addrs.get(0)
        if address is None:
            continue
        config = await admin.get_topic_config(address, args.topic)
        documents[broker.broker_name] = orjson.loads(config.to_json())
        rows.append({
            "brokerName": broker.broker_name, "readQueueNums": config.read_queue_nums,
            "writeQueueNums": config.write_queue_nums, "perm": config.perm,
            "order": str(config.order).lower(), "messageType": config.message_type,
            "attributes": ",".join(f"{k}={v}" for k, v in sorted(config.attributes.items())),
        })  # fmt: skip
    if not rows:
        raise AdminError(f"topic {args.topic} has no master in its route; check topicRoute")
    return Result(documents, (Table(TOPIC_CONFIG_COLUMNS, rows),))


@verb(
    "deleteTopic",
    "delete a topic from the brokers of a cluster and from the registries",
    "boltmq admin deleteTopic -n 127.0.0.1:9876 -c DefaultCluster -t Orders",
    [topic_arg(), arg("-c", "--clusterName", dest="cluster", required=True, help="cluster name")],
)
async def delete_topic(admin: Admin, args: argparse.Namespace) -> Result:
    """deleteTopic: the topic must exist in the registry (a typo is not silently 'deleted')."""
    await admin.route(args.topic)
    await admin.delete_topic(args.topic, cluster=args.cluster)
    return Result.done(
        f"topic {args.topic} deleted from cluster {args.cluster}",
        {"topic": args.topic, "cluster": args.cluster},
    )


@verb(
    "updateTopicPerm",
    "change a topic's perm on one broker (-b) or on every broker of a cluster (-c)",
    "boltmq admin updateTopicPerm -n 127.0.0.1:9876 -c DefaultCluster -t Orders -p 4",
    [
        topic_arg(), broker_addr_arg(), cluster_arg(),
        arg("-p", "--perm", type=int, required=True, choices=(2, 4, 6), help=PERM_HELP),
    ],
)  # fmt: skip
async def update_topic_perm(admin: Admin, args: argparse.Namespace) -> Result:
    """updateTopicPerm: re-sends the topic's config from its route with the new perm."""
    route = await admin.route(args.topic)
    addresses = set(await target_brokers(admin, args))
    queue_datas = {q.broker_name: q for q in route.queue_datas}
    changed = []
    for broker in route.broker_datas:
        address = broker.broker_addrs.get(0)
        queue_data = queue_datas.get(broker.broker_name)
        if address is None or address not in addresses or queue_data is None:
            continue
        await admin.create_topic(
            args.topic, broker_addr=address, perm=args.perm,
            read_queue_nums=queue_data.read_queue_nums,
            write_queue_nums=queue_data.write_queue_nums,
        )  # fmt: skip
        changed.append({"brokerName": broker.broker_name, "address": address,
                        "oldPerm": queue_data.perm, "perm": args.perm})  # fmt: skip
    if not changed:
        raise AdminError(
            f"topic {args.topic} has no queues on {', '.join(sorted(addresses))}; "
            "check the broker with topicRoute"
        )
    columns = (Column("brokerName", "Broker Name"), Column("address", "Addr"),
               number("oldPerm", "Old Perm"), number("perm", "New Perm"))  # fmt: skip
    return Result.of_table(Table(columns, changed))
