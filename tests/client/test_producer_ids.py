"""A message that carries a client id (UNIQ_KEY) keeps it, as RocketMQ's producers do."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from client import Admin, Message, Producer
from protocol.message import MessageConst

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
Unique = Callable[[str], str]


async def test_a_set_client_id_is_kept_and_an_unset_one_is_made(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("IdTopic")
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        first = await producer.send(Message(topic, b"first"))
        copy = Message(topic, b"copy", properties={MessageConst.UNIQ_KEY: first.msg_id})
        kept = await producer.send(copy)
        batch = await producer.send_batch([copy, Message(topic, b"new")])
    assert kept.msg_id == first.msg_id
    batch_ids = batch.msg_id.split(",")
    assert batch_ids[0] == first.msg_id and batch_ids[1] not in (first.msg_id, "")
    async with Admin(namesrv_addr=cluster.namesrv) as admin:
        stored = await admin.view_message(kept.offset_msg_id)
    assert stored.msg_id == first.msg_id and stored.body == b"copy"
