"""Shared by the broker tests: a live registry + broker on loopback and request builders.

Rules: loopback only, ephemeral ports, a real store in ``tmp_path`` with small files, and a
deadline (``trio.fail_after``) around every wait.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import boltmq
from boltmq import EmbeddedCluster
from protocol import RemotingClient, RemotingCommand, RequestCode
from protocol.bodies import ConsumerData, HeartbeatData, SubscriptionData
from protocol.headers import (
    PullMessageRequestHeader,
    SendMessageRequestHeader,
    encode_header,
    encode_send_header_v2,
)
from protocol.message import properties_to_string
from tests.support.remoting import call

__all__ = [
    "SMALL_FILES", "STORES", "call", "client", "cluster", "file_cluster", "sql_cluster",
]  # fmt: skip

SMALL_FILES: dict[str, Any] = {
    "mapped_file_size_commit_log": 256 * 1024,
    "mapped_file_size_consume_queue": 20 * 1000,
}


#: The stores the broker's core tests run on (storeType): each such test runs on both.
STORES = ("file", "memory")


@pytest.fixture(params=STORES)
async def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EmbeddedCluster]:
    """A registry and a broker on the file store, then on the memory store."""
    async with boltmq.embedded(tmp_path, store=request.param, **SMALL_FILES) as running:
        yield running


@pytest.fixture
async def file_cluster(tmp_path: Path) -> AsyncIterator[EmbeddedCluster]:
    """A registry and a broker on the file store only (a test of files, restarts, replicas)."""
    async with boltmq.embedded(tmp_path, **SMALL_FILES) as running:
        yield running


@pytest.fixture(params=STORES)
async def sql_cluster(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[EmbeddedCluster]:
    """A registry and a broker with enablePropertyFilter=true (SQL92), on each store."""
    async with boltmq.embedded(
        tmp_path, store=request.param, enable_property_filter=True, **SMALL_FILES
    ) as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    async with RemotingClient() as remoting:
        yield remoting


def send_request(
    topic: str,
    body: bytes = b"body",
    *,
    queue_id: int = 0,
    properties: dict[str, str] | None = None,
    v2: bool = True,
    batch: bool = False,
    code: int | None = None,
    default_topic: str = "TBW102",
    reconsume_times: int | None = None,
    max_reconsume_times: int | None = None,
    sys_flag: int = 0,
    producer_group: str = "PG",
    born_timestamp: int = 1_700_000_000_000,
) -> RemotingCommand:
    """A SEND_MESSAGE(_V2) request as a Java producer builds it."""
    header = SendMessageRequestHeader(
        producer_group=producer_group,
        topic=topic,
        default_topic=default_topic,
        default_topic_queue_nums=4,
        queue_id=queue_id,
        sys_flag=sys_flag,
        born_timestamp=born_timestamp,
        flag=7,
        properties=properties_to_string(properties or {}),
        reconsume_times=reconsume_times,
        max_reconsume_times=max_reconsume_times,
        batch=batch,
    )
    if code is None:
        code = RequestCode.SEND_MESSAGE_V2 if v2 else RequestCode.SEND_MESSAGE
    ext = (
        encode_send_header_v2(header) if code != RequestCode.SEND_MESSAGE else encode_header(header)
    )
    return RemotingCommand.request(code, ext, body)


def pull_request(
    topic: str,
    offset: int = 0,
    *,
    group: str = "CG",
    queue_id: int = 0,
    subscription: str | None = "*",
    suspend_ms: int = 0,
    max_msgs: int = 32,
    commit_offset: int | None = None,
    sub_version: int = 0,
    allow_suspend: bool = True,
    expression_type: str | None = None,
) -> RemotingCommand:
    """A PULL_MESSAGE request; ``subscription=None`` relies on the group's heartbeat."""
    sys_flag = 0
    if subscription is not None:
        sys_flag |= 0x4
    if suspend_ms and allow_suspend:
        sys_flag |= 0x2
    if commit_offset is not None:
        sys_flag |= 0x1
    header = PullMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=max_msgs,
        sys_flag=sys_flag,
        commit_offset=commit_offset or 0,
        suspend_timeout_millis=suspend_ms,
        subscription=subscription,
        sub_version=sub_version,
        expression_type=expression_type,
    )
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header))


def heartbeat_request(
    client_id: str,
    group: str,
    topic: str,
    expression: str = "*",
    *,
    expression_type: str = "TAG",
    sub_version: int = 1,
) -> RemotingCommand:
    """A Java-form HEART_BEAT of one push consumer subscribing ``topic``."""
    tags = (
        []
        if expression == "*" or expression_type != "TAG"
        else [t.strip() for t in expression.split("||")]
    )
    data = HeartbeatData(
        client_id=client_id,
        consumer_data_set=[
            ConsumerData(
                group_name=group,
                subscription_data_set=[
                    SubscriptionData(
                        topic=topic,
                        sub_string=expression,
                        tags_set=tags,
                        sub_version=sub_version,
                        expression_type=expression_type,
                    )
                ],
            )
        ],
    )
    return RemotingCommand.request(RequestCode.HEART_BEAT, None, data.to_json())
