"""A live registry + broker on loopback with short delay levels (the `cluster` fixture of the
modules that import it), and client-side helpers for
send-back, delayed sends and reading queues.

Rules: loopback only, ephemeral ports, a real store in ``tmp_path`` with small files, and a
deadline (``trio.fail_after``) around every wait. The delay service runs on the real clock
(its due times are store timestamps), so the levels used here are a second or two.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

import boltmq
from boltmq import EmbeddedCluster
from protocol import RemotingClient, RemotingCommand, RequestCode
from protocol.bodies import SubscriptionGroupConfig
from protocol.codes import ResponseCode
from protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    PullMessageRequestHeader,
    encode_header,
)
from protocol.message import MessageExt, iter_records
from tests.actors.broker.helpers import SMALL_FILES, STORES, send_request

#: Every level one second: a retry (level 3 + reconsumeTimes) comes back within about 2 s.
FAST_LEVELS = "1s 1s 1s 1s 1s 1s 1s 1s"


@asynccontextmanager
async def open_cluster(
    home: Path, store: str = "file", **settings: Any
) -> AsyncIterator[EmbeddedCluster]:
    """An embedded registry + broker keeping its data under ``home`` (so it can restart)."""
    merged = {**SMALL_FILES, **settings}
    async with boltmq.embedded(home, store=store, **merged) as running:
        yield running


@pytest.fixture(name="cluster", params=STORES)
async def fast_delays_cluster(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[EmbeddedCluster]:
    """The ``cluster`` of the modules that import this: every delay level one second, on the
    file store and then on the memory store."""
    async with open_cluster(
        tmp_path, store=request.param, message_delay_level=FAST_LEVELS
    ) as running:
        yield running


def send_back_request(
    offset: int,
    group: str,
    delay_level: int = 0,
    *,
    max_reconsume_times: int | None = None,
    version: int | None = None,
) -> RemotingCommand:
    """A CONSUMER_SEND_MSG_BACK request (``version`` as the client would send it)."""
    header = ConsumerSendMsgBackRequestHeader(
        offset=offset,
        group=group,
        delay_level=delay_level,
        max_reconsume_times=max_reconsume_times,
    )
    request = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, encode_header(header))
    if version is not None:
        request.version = version
    return request


def group_request(group: str, **fields: Any) -> RemotingCommand:
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP with the given SubscriptionGroupConfig fields."""
    body = SubscriptionGroupConfig(group_name=group, **fields).to_json()
    return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, body)


def commit_log_offset(msg_id: str) -> int:
    """The commit-log offset inside an offset msg id (its last 16 hex digits)."""
    return int(msg_id[-16:], 16)


async def send(
    client: RemotingClient, address: str, topic: str, body: bytes = b"body", **kwargs: Any
) -> RemotingCommand:
    """Send one message and insist it was stored."""
    answer = await client.invoke(address, send_request(topic, body, **kwargs))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return answer


async def pull(
    client: RemotingClient,
    address: str,
    topic: str,
    queue_id: int = 0,
    offset: int = 0,
    *,
    suspend_ms: int = 0,
) -> list[MessageExt]:
    """The messages of one queue from ``offset`` (empty when there are none)."""
    sys_flag = 0x4 | (0x2 if suspend_ms else 0)
    header = PullMessageRequestHeader(
        consumer_group="CG_reader",
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=32,
        sys_flag=sys_flag,
        commit_offset=0,
        suspend_timeout_millis=suspend_ms,
        subscription="*",
        sub_version=0,
    )
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header))
    answer = await client.invoke(address, request, timeout=suspend_ms / 1000 + 3)
    if answer.code != ResponseCode.SUCCESS or not answer.body:
        return []
    return list(iter_records(answer.body))


async def wait_for_messages(
    client: RemotingClient, address: str, topic: str, count: int, queue_id: int = 0
) -> list[MessageExt]:
    """Poll one queue until it holds ``count`` messages (callers bound this with fail_after)."""
    while True:
        found = await pull(client, address, topic, queue_id)
        if len(found) >= count:
            return found
        await trio.sleep(0.05)
