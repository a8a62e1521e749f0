"""Pushing a found message to one live consumer: queryMsgById / queryMsgByUniqueKey -g -d.

The store host of the message relays CONSUME_MESSAGE_DIRECTLY to the consumer client named by
``-d`` (its client id, as consumerConnection lists it) and answers with how the listener took
the message: mqadmin's ConsumeMessageDirectlyResult.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from boltmq.cli.admin._output import Column, Result, Table, number
from boltmq.cli.admin._verbs import AdminError, Arg, UsageError, arg
from client import Admin
from protocol.codes import ResponseCode
from protocol.command import RemotingError

DIRECT_COLUMNS = (
    Column("msgId", "MsgId"),
    Column("order", "Order"),
    Column("autoCommit", "Auto Commit"),
    Column("consumeResult", "Consume Result"),
    Column("remark", "Remark"),
    number("spentTimeMills", "Spent (ms)"),
)


def direct_args() -> list[Arg]:
    """``-g GROUP -d CLIENTID``: push the found message to that consumer instead of showing it."""
    return [
        arg("-g", "--consumerGroup", dest="direct_group",
            help="with -d: push the message to this group's consumer client"),
        arg("-d", "--clientId", dest="direct_client",
            help="with -g: the consumer client id (consumerConnection -g GROUP lists them)"),
    ]  # fmt: skip


def wants_direct(args: argparse.Namespace) -> bool:
    """Whether -g and -d were given (one without the other is a usage error)."""
    if (args.direct_group is None) != (args.direct_client is None):
        raise UsageError("-g and -d go together: the group and the client id to push to")
    return args.direct_group is not None


async def push_directly(
    admin: Admin, args: argparse.Namespace, offset_msg_ids: Sequence[str]
) -> Result:
    """CONSUME_MESSAGE_DIRECTLY of each message; one row per message with the client's answer."""
    rows = []
    for msg_id in offset_msg_ids:
        try:
            result = await admin.consume_message_directly(
                args.direct_group, args.direct_client, msg_id
            )
        except RemotingError as exc:
            if exc.code == ResponseCode.CONSUMER_NOT_ONLINE:
                raise AdminError(
                    f"consumer {args.direct_client} of group {args.direct_group} is not "
                    f"connected to the broker that stores {msg_id}; consumerConnection -g "
                    f"{args.direct_group} lists the live client ids"
                ) from None
            raise
        rows.append({
            "msgId": msg_id, "order": result.order, "autoCommit": result.auto_commit,
            "consumeResult": result.consume_result, "remark": result.remark,
            "spentTimeMills": result.spent_time_mills,
        })  # fmt: skip
    return Result.of_table(Table(DIRECT_COLUMNS, rows))
