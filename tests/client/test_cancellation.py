"""Clients cancelled from outside while they work close cleanly, on trio and on asyncio.

An outer cancel scope used to skip closing the remoting client's task group, and trio then
reported its nursery stack corrupted (a bug in the caller's eyes, and a hang risk).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from client import ConsumeConcurrentlyStatus, Message, Producer, PullConsumer, PushConsumer
from protocol.bodies import ConsumeFromWhere
from tests.support.waiting import wait_until

from .helpers import wait_for_route

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
Unique = Callable[[str], str]


async def test_pull_consumer_cancelled_mid_pull_closes_its_connections(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("CancelPull")
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        await producer.send(Message(topic, b"x"))
        # The send auto-created the topic; its registration reaches the registry a moment
        # later, and each consumer below subscribes at once.
        await wait_for_route(producer.instance, topic, timeout=30)
    instances = []

    async def consume(task_status: anyio.abc.TaskStatus[None]) -> None:
        async with PullConsumer(unique("CG"), namesrv_addr=cluster.namesrv,
                                consume_from_where=FIRST) as consumer:  # fmt: skip
            instances.append(consumer.instance)
            await consumer.subscribe(topic)
            task_status.started()
            while True:  # long polls: the cancellation lands inside a pull most times
                await consumer.poll(timeout=1.0)

    for round_ in range(6):
        async with anyio.create_task_group() as tg:
            await tg.start(consume)
            await anyio.sleep(0.05 * round_)
            tg.cancel_scope.cancel()
    assert len(instances) == 6
    assert all(not instance.remoting.addresses() for instance in instances)


async def test_push_consumer_cancelled_from_outside_closes(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("CancelPush")
    got: list[bytes] = []

    async def listener(messages: list[Any]) -> ConsumeConcurrentlyStatus:
        got.extend(m.body for m in messages)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        await producer.send(Message(topic, b"first"))
        push = PushConsumer(unique("CG"), listener, namesrv_addr=cluster.namesrv,
                            consume_from_where=FIRST)  # fmt: skip
        push.subscribe(topic, "*")
        with anyio.CancelScope() as scope:
            async with push:
                await wait_until(lambda: b"first" in got, timeout=30)
                scope.cancel()
                await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert not push.instance.remoting.addresses()
