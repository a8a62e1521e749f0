"""The push consumer's orderly mode against a real BoltMQ cluster, on trio and on asyncio.

Loopback only, the session's cluster process; waits are conditions with deadlines.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from client import ConsumeOrderlyStatus, Message, Producer, PullConsumer, PushConsumer
from protocol import names
from protocol.bodies import (
    ConsumeFromWhere,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
)
from protocol.client import RemotingClient
from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.message import MessageExt
from tests.support.waiting import wait_until

from .helpers import poll_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
SUCCESS = ConsumeOrderlyStatus.SUCCESS
SUSPEND = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
Unique = Callable[[str], str]


async def lock_as_stranger(broker: str, group: str, queues: list[MessageQueue]) -> list[Any]:
    """What LOCK_BATCH_MQ grants another client for ``queues``."""
    body = LockBatchRequestBody(consumer_group=group, client_id="stranger@1", mq_set=queues)
    async with RemotingClient() as remoting:
        request = RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=body.to_json())
        response = await remoting.invoke(broker, request, 5.0)
    return LockBatchResponseBody.from_json(response.body or b"{}").lock_ok_mq_set


async def test_orderly_keeps_per_queue_order_and_suspend_retries_the_same_message(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("OrderPush"), unique("CG")
    lock = threading.Lock()
    seen: list[tuple[str, int]] = []
    suspended: set[str] = set()

    def listener(messages: list[MessageExt]) -> ConsumeOrderlyStatus:  # runs in a thread
        [message] = messages
        body = message.body.decode()
        with lock:
            seen.append((body, message.reconsume_times))
            if body.endswith("-5") and body not in suspended:
                suspended.add(body)  # the fifth message of each key fails once
                return SUSPEND
        return SUCCESS

    keys = 4
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        sent: dict[int, list[tuple[str, int]]] = {k: [] for k in range(keys)}
        for i in range(10):
            for key in range(keys):
                result = await producer.send_orderly(Message(topic, f"{key}-{i}".encode()), key)
                sent[key].append((f"{key}-{i}", result.queue.queue_id))
    push = PushConsumer(group, listener, namesrv_addr=cluster.namesrv, orderly=True,
                        consume_from_where=FIRST, suspend_current_queue_time=0.1)  # fmt: skip
    push.subscribe(topic)
    async with push:
        await wait_until(lambda: len([q for q in push.assignment() if q.topic == topic]) == 4)
        mine = [q for q in push.assignment() if q.topic == topic]
        # The broker holds our locks: nobody else gets these queues.
        assert await lock_as_stranger(cluster.broker, group, mine) == []
        info = push.running_info(False)
        assert all(info.mq_table[q].locked for q in mine)
        assert info.properties["PROP_CONSUMEORDERLY"] == "true"
        await wait_until(lambda: len(seen) == 40 + keys)
    for key in range(keys):
        bodies = [b for b, _ in seen if b.startswith(f"{key}-")]
        expected = [b for b, _ in sent[key]]
        at = expected.index(f"{key}-5")
        # In order, and the suspended message came again right away, before its successors.
        assert bodies == [*expected[: at + 1], expected[at], *expected[at + 1 :]]
        assert [t for b, t in seen if b == f"{key}-5"] == [0, 1]
    # Closing unlocked the queues at the broker.
    assert sorted(await lock_as_stranger(cluster.broker, group, mine), key=str) == sorted(
        mine, key=str
    )


async def test_orderly_past_max_reconsume_times_goes_to_the_dlq_and_moves_on(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("OrderDlq"), unique("CG")
    seen: list[tuple[bytes, int]] = []

    async def listener(messages: list[MessageExt]) -> ConsumeOrderlyStatus:
        seen.extend((m.body, m.reconsume_times) for m in messages)
        return SUSPEND if messages[0].body == b"bad" else SUCCESS

    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        first = await producer.send(Message(topic, b"bad", keys="kb"))
        await producer.send(Message(topic, b"good"), queue=first.queue)
    push = PushConsumer(group, listener, namesrv_addr=cluster.namesrv, orderly=True,
                        consume_from_where=FIRST, max_reconsume_times=2,
                        suspend_current_queue_time=0.05)  # fmt: skip
    push.subscribe(topic)
    async with push:
        await wait_until(lambda: (b"good", 0) in seen)
    assert seen == [(b"bad", 0), (b"bad", 1), (b"bad", 2), (b"good", 0)]
    async with PullConsumer(unique("CG"), namesrv_addr=cluster.namesrv,
                            consume_from_where=FIRST) as reader:  # fmt: skip
        with anyio.fail_after(15):
            while True:
                with contextlib.suppress(Exception):
                    await reader.subscribe(names.dlq_topic(group))
                    break
                await anyio.sleep(0.1)
        [dead] = await poll_until(reader, 1)
    assert dead.body == b"bad"
    assert dead.msg_id == first.msg_id
    assert dead.keys == ["kb"]


async def test_a_second_orderly_consumer_gets_half_the_queues_locked_for_itself(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("OrderShare"), unique("CG")
    seen: list[tuple[str, str]] = []

    def listener_for(name: str) -> Callable[[list[MessageExt]], Any]:
        async def listener(messages: list[MessageExt]) -> ConsumeOrderlyStatus:
            seen.extend((name, m.body.decode()) for m in messages)
            return SUCCESS

        return listener

    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        await producer.send(Message(topic, b"warm-up"))
        first = PushConsumer(group, listener_for("a"), namesrv_addr=cluster.namesrv,
                             orderly=True)  # fmt: skip
        first.subscribe(topic)
        second = PushConsumer(group, listener_for("b"), namesrv_addr=cluster.namesrv,
                              orderly=True)  # fmt: skip
        second.subscribe(topic)

        def mine(push: PushConsumer) -> set[int]:
            return {q.queue_id for q in push.assignment() if q.topic == topic}

        async with first:
            await wait_until(lambda: mine(first) == {0, 1, 2, 3})  # once routed
            async with second:
                # The first unlocks what it gives up; the second locks it at once after.
                await wait_until(lambda: len(mine(first)) == 2 and len(mine(second)) == 2)
                assert mine(first) | mine(second) == {0, 1, 2, 3}
                info = second.running_info(False)
                assert all(pq.locked for q, pq in info.mq_table.items() if q.topic == topic)
                for i in range(20):
                    await producer.send_orderly(Message(topic, f"{i % 4}-{i}".encode()), i % 4)
                await wait_until(lambda: len([b for _, b in seen if b != "warm-up"]) == 20)
    got = [(who, body) for who, body in seen if body != "warm-up"]
    assert sorted(b for _, b in got) == sorted(f"{i % 4}-{i}" for i in range(20))
    assert {who for who, _ in got} == {"a", "b"}
    for key in range(4):
        bodies = [b for _, b in got if b.startswith(f"{key}-")]
        assert bodies == sorted(bodies, key=lambda b: int(b.split("-")[1]))
        assert len({who for who, b in got if b.startswith(f"{key}-")}) == 1  # one owner
