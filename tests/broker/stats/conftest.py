"""A live registry + broker on loopback and the request builders the statistics and admin
tests need (copied from tests/broker/core/conftest.py).

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

SMALL_FILES: dict[str, Any] = {
    "mapped_file_size_commit_log": 256 * 1024,
    "mapped_file_size_consume_queue": 20 * 1000,
}


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[EmbeddedCluster]:
    async with boltmq.embedded(tmp_path, **SMALL_FILES) as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    async with RemotingClient() as remoting:
        yield remoting


def send_request(topic: str, body: bytes = b"body", *, queue_id: int = 0) -> RemotingCommand:
    """A SEND_MESSAGE_V2 request as a Java producer builds it."""
    header = SendMessageRequestHeader(
        producer_group="PG",
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=1_700_000_000_000,
        flag=0,
        properties="",
    )
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, encode_send_header_v2(header), body)


def pull_request(
    topic: str,
    offset: int = 0,
    *,
    group: str = "CG",
    queue_id: int = 0,
    max_msgs: int = 32,
    commit_offset: int | None = None,
) -> RemotingCommand:
    """A PULL_MESSAGE request with its own ``*`` subscription."""
    sys_flag = 0x4 | (0x1 if commit_offset is not None else 0)
    header = PullMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=max_msgs,
        sys_flag=sys_flag,
        commit_offset=commit_offset or 0,
        suspend_timeout_millis=0,
        subscription="*",
        sub_version=0,
    )
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header))


def heartbeat_request(client_id: str, group: str, topic: str) -> RemotingCommand:
    """A Java-form HEART_BEAT of one push consumer subscribing ``topic`` with ``*``."""
    data = HeartbeatData(
        client_id=client_id,
        consumer_data_set=[
            ConsumerData(
                group_name=group,
                subscription_data_set=[
                    SubscriptionData(topic=topic, sub_string="*", sub_version=1)
                ],
            )
        ],
    )
    return RemotingCommand.request(RequestCode.HEART_BEAT, None, data.to_json())
