"""``subscribe`` awaited and not, on both consumers, on trio and on asyncio.

Both forms subscribe: the call records the subscription at once, and the await (the pull
consumer's) takes the topic's queues, which an unawaited pull subscription leaves to `poll`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from client import (
    ConsumeConcurrentlyStatus,
    Message,
    MQClientError,
    Producer,
    PullConsumer,
    PushConsumer,
    Subscription,
)
from protocol.bodies import ConsumeFromWhere
from protocol.codes import ResponseCode
from protocol.message import MessageExt
from tests.support.waiting import wait_until

from .helpers import create_topic, poll_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
Unique = Callable[[str], str]


async def send(cluster: Any, unique: Unique, topic: str, count: int) -> list[str]:
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        return [
            (await producer.send(Message(topic, f"m{i}".encode()))).msg_id for i in range(count)
        ]


@pytest.mark.parametrize("awaited", [True, False], ids=["awaited", "not-awaited"])
async def test_pull_consumer_subscribes_either_way(
    cluster: Any, unique: Unique, anyio_backend: str, awaited: bool
) -> None:
    topic = unique("PullForms")
    await create_topic(cluster, topic, 3)
    sent = await send(cluster, unique, topic, 12)
    async with PullConsumer(unique("CG"), namesrv_addr=cluster.namesrv,
                            consume_from_where=FIRST) as consumer:  # fmt: skip
        subscription = consumer.subscribe(topic, "*")
        assert isinstance(subscription, Subscription)
        assert consumer.subscriptions == {topic: "*"}  # recorded before any await
        if awaited:
            queues = await subscription
            assert len(queues) == 3 and consumer.assignment() == queues
        else:
            assert consumer.assignment() == []  # the queues come with the next poll
        got = await poll_until(consumer, 12)
        assert len(consumer.assignment()) == 3
        assert sorted(m.msg_id for m in got) == sorted(sent)


async def test_pull_subscription_to_a_missing_topic_fails_at_poll_when_not_awaited(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    missing = unique("NoSuchTopic")
    async with PullConsumer(unique("CG"), namesrv_addr=cluster.namesrv) as consumer:
        with pytest.raises(MQClientError) as awaited:
            await consumer.subscribe(missing)
        assert awaited.value.code == ResponseCode.TOPIC_NOT_EXIST
        assert consumer.subscriptions == {}
        consumer.subscribe(missing)  # never silently nothing: the poll says what went wrong
        with pytest.raises(MQClientError) as polled:
            await consumer.poll(timeout=0.1)
        assert polled.value.code == ResponseCode.TOPIC_NOT_EXIST
        assert consumer.subscriptions == {}


@pytest.mark.parametrize("awaited", [True, False], ids=["awaited", "not-awaited"])
async def test_push_consumer_subscribes_either_way(
    cluster: Any, unique: Unique, anyio_backend: str, awaited: bool
) -> None:
    topic = unique("PushForms")
    await create_topic(cluster, topic, 2)
    sent = await send(cluster, unique, topic, 6)
    got: list[MessageExt] = []

    async def listener(messages: list[MessageExt]) -> Any:
        got.extend(messages)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    push = PushConsumer(unique("CG"), listener, namesrv_addr=cluster.namesrv,
                        consume_from_where=FIRST)  # fmt: skip
    subscription = push.subscribe(topic)  # before start, as a push consumer needs
    assert isinstance(subscription, Subscription)
    assert topic in push.subscriptions  # applied before any await
    if awaited:
        assert await subscription is None
    async with push:
        await wait_until(lambda: len(got) >= len(sent))
    assert sorted(m.msg_id for m in got) == sorted(sent)
