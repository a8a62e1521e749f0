"""PULL_MESSAGE as the data source sends it: a subscription in the request (TAG expression),
the reader's own consumer group, no offset committed."""

from __future__ import annotations

from collections.abc import Collection

from client import ClientInstance
from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.headers import PullMessageRequestHeader, PullSysFlag, encode_header

READER_GROUP = "boltmq-spark-reader"
"""The consumer group the pulls name (brokers create it on first use; it commits nothing)."""


def sub_expression(tags: Collection[str] | None) -> str:
    """The TAG expression of ``tags``: ``TagA||TagB`` (sorted), ``*`` for None."""
    return "*" if tags is None else "||".join(sorted(tags))


async def pull(
    instance: ClientInstance,
    address: str,
    topic: str,
    queue_id: int,
    offset: int,
    count: int,
    tags: Collection[str] | None = None,
) -> RemotingCommand:
    """One PULL_MESSAGE of at most ``count`` messages from ``offset`` on; the broker skips
    messages whose tag hash code is not one of ``tags``' (None: every message)."""
    header = PullMessageRequestHeader(
        consumer_group=READER_GROUP, topic=topic, queue_id=queue_id, queue_offset=offset,
        max_msg_nums=count, sys_flag=int(PullSysFlag.SUBSCRIPTION), commit_offset=0,
        suspend_timeout_millis=0, subscription=sub_expression(tags), sub_version=0,
        expression_type="TAG",
    )  # fmt: skip
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header))
    return await instance.invoke_broker(address, request)
