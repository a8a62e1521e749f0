"""Verbs about groups: updateSubGroup, deleteSubGroup, consumerConnection,
producerConnection, cloneGroupOffset."""

from __future__ import annotations

import argparse

import orjson

from boltmq.cli.admin._output import Column, Result, Table, number
from boltmq.cli.admin._verbs import (
    arg,
    boolean,
    broker_addr_arg,
    cluster_arg,
    group_arg,
    target_brokers,
    topic_arg,
    verb,
)
from client import Admin
from protocol.bodies import Connection, SubscriptionGroupConfig

CONNECTION_COLUMNS = (
    Column("clientId", "Client Id"),
    Column("clientAddr", "Client Addr"),
    Column("language", "Language"),
    number("version", "Version"),
)

SUBSCRIPTION_COLUMNS = (Column("topic", "Topic"), Column("subExpression", "Sub Expression"))


@verb(
    "updateSubGroup",
    "create a consumer group or change its settings (-b one broker, -c every master)",
    "boltmq admin updateSubGroup -n 127.0.0.1:9876 -c DefaultCluster -g OrderConsumers -r 3",
    [
        group_arg(), broker_addr_arg(), cluster_arg(),
        arg("-s", "--consumeEnable", dest="consume_enable", type=boolean, default=True,
            help="consuming allowed: true or false (default true)"),
        arg("-m", "--consumeFromMinEnable", dest="consume_from_min_enable", type=boolean,
            default=True, help="a new group starts at the min offset (default true)"),
        arg("-d", "--consumeBroadcastEnable", dest="consume_broadcast_enable", type=boolean,
            default=True, help="broadcast consuming allowed (default true)"),
        arg("-q", "--retryQueueNums", dest="retry_queue_nums", type=int, default=1,
            help="queues of the group's retry topic (default 1)"),
        arg("-r", "--retryMaxTimes", dest="retry_max_times", type=int, default=16,
            help="redeliveries before the dead-letter queue (default 16)"),
        arg("-i", "--brokerId", dest="broker_id", type=int, default=0,
            help="broker id to consume from (default 0, the master)"),
        arg("-w", "--whichBrokerWhenConsumeSlowly", dest="which_broker_when_consume_slowly",
            type=int, default=1, help="broker id when consuming slowly (default 1)"),
        arg("-a", "--notifyConsumerIdsChanged", dest="notify_consumer_ids_changed_enable",
            type=boolean, default=True, help="tell consumers of group changes (default true)"),
    ],
)  # fmt: skip
async def update_sub_group(admin: Admin, args: argparse.Namespace) -> Result:
    """updateSubGroup: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP with every setting given."""
    config = SubscriptionGroupConfig(
        group_name=args.group,
        consume_enable=args.consume_enable,
        consume_from_min_enable=args.consume_from_min_enable,
        consume_broadcast_enable=args.consume_broadcast_enable,
        retry_queue_nums=args.retry_queue_nums,
        retry_max_times=args.retry_max_times,
        broker_id=args.broker_id,
        which_broker_when_consume_slowly=args.which_broker_when_consume_slowly,
        notify_consumer_ids_changed_enable=args.notify_consumer_ids_changed_enable,
    )
    addresses = await target_brokers(admin, args)
    for address in addresses:
        await admin.create_group(config, broker_addr=address)
    return Result.done(
        f"consumer group {args.group} updated on {', '.join(addresses)}",
        {"group": orjson.loads(config.to_json()), "brokers": addresses},
    )


@verb(
    "deleteSubGroup",
    "delete a consumer group (and its offsets unless -r false) from brokers",
    "boltmq admin deleteSubGroup -n 127.0.0.1:9876 -c DefaultCluster -g OrderConsumers",
    [
        group_arg(), broker_addr_arg(), cluster_arg(),
        arg("-r", "--removeOffset", dest="remove_offset", type=boolean, default=True,
            help="remove the group's committed offsets too (default true)"),
    ],
)  # fmt: skip
async def delete_sub_group(admin: Admin, args: argparse.Namespace) -> Result:
    """deleteSubGroup: DELETE_SUBSCRIPTIONGROUP on each target broker."""
    addresses = await target_brokers(admin, args)
    for address in addresses:
        await admin.delete_group(args.group, broker_addr=address, remove_offset=args.remove_offset)
    return Result.done(
        f"consumer group {args.group} deleted from {', '.join(addresses)}",
        {"group": args.group, "removeOffset": args.remove_offset, "brokers": addresses},
    )


@verb(
    "consumerConnection",
    "the live consumers of a group: client ids, addresses, subscriptions, consume mode",
    "boltmq admin consumerConnection -n 127.0.0.1:9876 -g OrderConsumers",
    [group_arg()],
)
async def consumer_connection(admin: Admin, args: argparse.Namespace) -> Result:
    """consumerConnection: connections, subscriptions and how the group consumes."""
    found = await admin.consumer_connections(args.group)
    connections = _connection_rows(found.connection_set)
    subscriptions = [
        {"topic": topic, "subExpression": data.sub_string}
        for topic, data in sorted(found.subscription_table.items())
    ]
    # Enums of value 0 are falsy: test for None.
    mode = {
        key: value.name if value is not None else None
        for key, value in (
            ("consumeType", found.consume_type),
            ("messageModel", found.message_model),
            ("consumeFromWhere", found.consume_from_where),
        )
    }
    document = {
        "group": args.group,
        "connections": Table(CONNECTION_COLUMNS, connections).to_json(),
        "subscriptions": Table(SUBSCRIPTION_COLUMNS, subscriptions).to_json(),
        **mode,
    }
    return Result(
        document,
        (Table(CONNECTION_COLUMNS, connections), Table(SUBSCRIPTION_COLUMNS, subscriptions)),
        tuple(f"{key}: {value}" for key, value in mode.items()),
    )


@verb(
    "producerConnection",
    "the live producers of a producer group that send to a topic",
    "boltmq admin producerConnection -n 127.0.0.1:9876 -g OrderProducers -t Orders",
    [arg("-g", "--producerGroup", dest="group", required=True, help="producer group"),
     topic_arg()],
)  # fmt: skip
async def producer_connection(admin: Admin, args: argparse.Namespace) -> Result:
    """producerConnection: one row per producer connection."""
    found = await admin.producer_connections(args.group, args.topic)
    return Result.of_table(Table(CONNECTION_COLUMNS, _connection_rows(found.connection_set)))


@verb(
    "cloneGroupOffset",
    "copy a group's committed offsets on a topic to another group",
    "boltmq admin cloneGroupOffset -n 127.0.0.1:9876 -s OldConsumers -d NewConsumers -t Orders",
    [
        arg("-s", "--srcGroup", dest="src_group", required=True, help="group to copy from"),
        arg("-d", "--destGroup", dest="dest_group", required=True, help="group to copy to"),
        topic_arg(),
        arg("-o", "--offline", type=boolean, default=False,
            help="the source group is offline: copy even topics it no longer subscribes"),
    ],
)  # fmt: skip
async def clone_group_offset(admin: Admin, args: argparse.Namespace) -> Result:
    """cloneGroupOffset: CLONE_GROUP_OFFSET at each master of the topic."""
    addresses = await admin.clone_group_offset(
        args.src_group, args.dest_group, args.topic, offline=args.offline
    )
    return Result.done(
        f"offsets of {args.src_group} on {args.topic} copied to {args.dest_group}",
        {"srcGroup": args.src_group, "destGroup": args.dest_group, "topic": args.topic,
         "brokers": addresses},
    )  # fmt: skip


def _connection_rows(connections: list[Connection]) -> list[dict[str, object]]:
    return [
        {"clientId": c.client_id, "clientAddr": c.client_addr, "language": c.language.name,
         "version": c.version}
        for c in sorted(connections, key=lambda c: c.client_id)
    ]  # fmt: skip
