"""SQL92 selectors on BoltMQ's own consumers, on trio and on asyncio: the push and the pull
consumer receive exactly the messages the selector takes (the broker filters; the client
checks no tags again), a bad selector fails the subscription with the broker's answer, and a
broker without the filter refuses it as RocketMQ does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import boltmq
from client import (
    ConsumeConcurrentlyStatus,
    Message,
    MessageSelector,
    MQClientError,
    Producer,
    PullConsumer,
    PushConsumer,
)
from protocol.bodies import ConsumeFromWhere
from protocol.codes import ResponseCode
from protocol.message import MessageExt
from tests.support.waiting import wait_until

from .helpers import create_topic, poll_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
Unique = Callable[[str], str]
COUNT = 20


def properties_of(i: int) -> dict[str, str]:
    """Message i: a = i, b cycles x y z w, c only on even i."""
    properties = {"a": str(i), "b": "xyzw"[i % 4]}
    if i % 2 == 0:
        properties["c"] = "set"
    return properties


async def send_all(cluster: Any, unique: Unique, topic: str) -> None:
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        for i in range(COUNT):
            # Tags too: a client that wrongly checked tags against a SQL92 selector drops them.
            message = Message(topic, f"m{i}".encode(), tags=f"Tag{i % 3}",
                              properties=properties_of(i))  # fmt: skip
            await producer.send(message)


def bodies(messages: list[MessageExt]) -> list[bytes]:
    return sorted(m.body for m in messages)


def expected(matches: Callable[[int], bool]) -> list[bytes]:
    return sorted(f"m{i}".encode() for i in range(COUNT) if matches(i))


async def test_push_consumer_receives_exactly_the_matching_messages(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("SqlPush")
    await create_topic(cluster, topic, 2)
    await send_all(cluster, unique, topic)
    got: list[MessageExt] = []

    async def listener(messages: list[MessageExt]) -> Any:
        got.extend(messages)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    push = PushConsumer(unique("CG"), listener, namesrv_addr=cluster.namesrv,
                        consume_from_where=FIRST)  # fmt: skip
    push.subscribe(topic, MessageSelector.by_sql("a > 5 AND b IN ('x', 'y')"))
    want = expected(lambda i: i > 5 and i % 4 in (0, 1))
    async with push:
        await wait_until(lambda: len(got) >= len(want), 20, f"{len(want)} messages consumed")
        info = push.running_info(False)
    assert bodies(got) == want
    (subscription,) = [s for s in info.subscription_set if s.topic == topic]
    assert (subscription.expression_type, subscription.sub_string) == (
        "SQL92",
        "a > 5 AND b IN ('x', 'y')",
    )


async def test_pull_consumer_receives_exactly_the_matching_messages(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("SqlPull")
    await create_topic(cluster, topic, 3)
    await send_all(cluster, unique, topic)
    for selector, matches in [
        ("a BETWEEN 3 AND 4", lambda i: 3 <= i <= 4),
        ("c IS NULL", lambda i: i % 2 == 1),
        ("TAGS = 'Tag1' AND a >= 10", lambda i: i % 3 == 1 and i >= 10),
    ]:
        async with PullConsumer(unique("CG"), namesrv_addr=cluster.namesrv,
                                consume_from_where=FIRST) as consumer:  # fmt: skip
            queues = await consumer.subscribe(topic, MessageSelector.by_sql(selector))
            assert len(queues) == 3
            want = expected(matches)
            got = await poll_until(consumer, len(want))
            assert bodies(got) == want, selector


async def test_a_bad_selector_fails_the_subscription_with_the_brokers_answer(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("SqlBad")
    await create_topic(cluster, topic, 1)
    async with PullConsumer(unique("CG"), namesrv_addr=cluster.namesrv) as consumer:
        with pytest.raises(MQClientError) as caught:
            await consumer.subscribe(topic, MessageSelector.by_sql("a BETWEEN 9 AND 1"))
        assert caught.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "Illegal values of between" in str(caught.value)
        assert consumer.subscriptions == {}  # nothing kept of the refused subscription
    push = PushConsumer(unique("CG"), lambda messages: None, namesrv_addr=cluster.namesrv)
    push.subscribe(topic, MessageSelector.by_sql("a >"))
    with pytest.raises(MQClientError) as caught:
        async with push:
            pass
    assert caught.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert "ParseException" in str(caught.value)
    # Running: awaiting the subscription asks the broker, and a refusal drops it again.
    push = PushConsumer(unique("CG"), lambda messages: None, namesrv_addr=cluster.namesrv)
    push.subscribe(topic)
    async with push:
        with pytest.raises(MQClientError) as caught:
            await push.subscribe(topic, MessageSelector.by_sql("b IN (1)"))
        assert caught.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert topic not in push.subscriptions and push.expression_types == {}
        await push.subscribe(topic, MessageSelector.by_sql("b IN ('1')"))
        assert push.expression_types == {topic: "SQL92"}


async def test_selectors() -> None:
    assert MessageSelector.by_sql("a > 1") == MessageSelector("SQL92", "a > 1")
    assert MessageSelector.by_tag("A || B") == MessageSelector("TAG", "A || B")
    assert MessageSelector.by_tag(None).expression == "*"
    with pytest.raises(ValueError, match="needs an expression"):
        MessageSelector.by_sql(" ")
    push = PushConsumer("CG", lambda messages: None, namesrv_addr="127.0.0.1:9")
    with pytest.raises(ValueError, match="not supported"):
        push.subscribe("T", MessageSelector("CLASS", "x"))


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_broker_without_the_filter_refuses_sql92(
    anyio_backend: str, tmp_path: Path, unique: Unique
) -> None:
    async with boltmq.embedded(tmp_path) as cluster:
        topic = unique("SqlOff")
        async with Producer(unique("PG"), namesrv_addr=cluster.registry_address) as producer:
            await producer.send(Message(topic, b"x"))
        push = PushConsumer(unique("CG"), lambda messages: None,
                            namesrv_addr=cluster.registry_address)  # fmt: skip
        push.subscribe(topic, MessageSelector.by_sql("a > 5"))
        with pytest.raises(MQClientError) as caught:
            async with push:
                pass
        assert caught.value.code == ResponseCode.SYSTEM_ERROR
        assert "The broker does not support consumer to filter message by SQL92" in str(
            caught.value
        )
