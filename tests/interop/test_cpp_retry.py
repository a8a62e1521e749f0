"""Retries and dead letters with the official Apache RocketMQ C++ client (PyPI ``rocketmq``
0.4.4): a push consumer whose callback raises answers RECONSUME_LATER, the client sends the
message back (CONSUMER_SEND_MSG_BACK), and the broker's delay service brings it back.

The broker runs with one-second delay levels so a retry comes back in about a second. The C++
client blocks and runs its own threads: its calls go through ``trio.to_thread`` and what its
callback sees is collected under a lock and waited for with a deadline.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import trio

import boltmq
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode, names
from protocol.bodies import SubscriptionGroupConfig
from protocol.headers import PullMessageRequestHeader, encode_header
from protocol.message import MessageConst, MessageExt, iter_records
from tests.support.waiting import wait_until

from .cpp_client import rocketmq

pytestmark = [
    pytest.mark.timeout(180),
    # The binding re-raises the callback's exception after answering RECONSUME_LATER; ctypes
    # reports it as unraisable. That is the failure this module provokes on purpose.
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

FAST_LEVELS = "1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s"


class FailingInbox:
    """A push-consumer callback that records each delivery and then raises."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[dict[str, Any]] = []

    def __call__(self, msg: Any) -> None:
        item = {
            "body": msg.body,
            "topic": text(msg.topic),
            "reconsume_times": msg.reconsume_times,
            "origin": text(msg.get_property("ORIGIN")),
        }
        with self.lock:
            self.items.append(item)
        raise RuntimeError("consume failed on purpose")  # the binding answers RECONSUME_LATER

    def snapshot(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.items)


def text(value: Any) -> Any:
    """The binding hands some fields back as bytes."""
    return value.decode() if isinstance(value, bytes) else value


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


async def produce(namesrv: str, topic: str, origin: str) -> None:
    producer = rocketmq.Producer(unique("PG"))
    producer.set_namesrv_addr(namesrv)
    await trio.to_thread.run_sync(producer.start)
    try:
        msg = rocketmq.Message(topic)
        msg.set_tags("TagR")
        msg.set_body(f"payload of {origin}".encode())
        msg.set_property("ORIGIN", origin)
        result = await trio.to_thread.run_sync(producer.send_sync, msg)
        assert result.status == rocketmq.SendStatus.OK
    finally:
        await trio.to_thread.run_sync(producer.shutdown)


async def consume_until(
    namesrv: str, group: str, topic: str, condition: Callable[[FailingInbox], bool], what: str
) -> FailingInbox:
    inbox = FailingInbox()
    consumer = rocketmq.PushConsumer(group)
    consumer.set_namesrv_addr(namesrv)
    consumer.subscribe(topic, inbox, "*")
    await trio.to_thread.run_sync(consumer.start)
    try:
        await wait_until(lambda: condition(inbox), 60, what)
    finally:
        await trio.to_thread.run_sync(consumer.shutdown)
    return inbox


async def pull_queue(client: RemotingClient, address: str, topic: str) -> list[MessageExt]:
    header = PullMessageRequestHeader(
        consumer_group=unique("CG_reader"),
        topic=topic,
        queue_id=0,
        queue_offset=0,
        max_msg_nums=32,
        sys_flag=0x4,
        commit_offset=0,
        suspend_timeout_millis=0,
        subscription="*",
        sub_version=0,
    )
    answer = await client.invoke(
        address, RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header))
    )
    if answer.code != ResponseCode.SUCCESS or not answer.body:
        return []
    return list(iter_records(answer.body))


async def test_cpp_consumer_gets_retry_with_reconsume_times(tmp_path: Any) -> None:
    topic, group = unique("CppRetryT"), unique("CG_retry")
    async with boltmq.embedded(tmp_path, message_delay_level=FAST_LEVELS) as cluster:
        await produce(cluster.registry_address, topic, "retry-1")
        inbox = await consume_until(
            cluster.registry_address, group, topic,
            lambda box: len(box.snapshot()) >= 2, "the message and its retry",
        )  # fmt: skip
    first, second = inbox.snapshot()[:2]
    assert first["body"] == second["body"] == b"payload of retry-1"
    assert first["origin"] == second["origin"] == "retry-1"
    assert first["reconsume_times"] == 0
    assert second["reconsume_times"] == 1
    # The client gives the retry back under its original topic (from RETRY_TOPIC).
    assert second["topic"] == topic


async def test_cpp_consumer_message_ends_in_dlq(tmp_path: Any) -> None:
    topic, group = unique("CppDlqT"), unique("CG_dlq")
    async with boltmq.embedded(tmp_path, message_delay_level=FAST_LEVELS) as cluster:
        address = cluster.broker_address
        async with RemotingClient() as client:
            body = SubscriptionGroupConfig(group_name=group, retry_max_times=2).to_json()
            answer = await client.invoke(
                address,
                RemotingCommand.request(
                    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, body
                ),
            )
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            await produce(cluster.registry_address, topic, "dlq-1")

            dead: list[MessageExt] = []

            def reached_dlq(_: FailingInbox) -> bool:
                return bool(dead)

            async def watch_dlq() -> None:
                while not dead:
                    dead.extend(await pull_queue(client, address, names.dlq_topic(group)))
                    await trio.sleep(0.1)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch_dlq)
                inbox = await consume_until(
                    cluster.registry_address, group, topic, reached_dlq, "the dead letter"
                )
    # Delivered with reconsumeTimes 0, 1, 2; the third failure (2 >= retryMaxTimes 2) is dead.
    assert [m["reconsume_times"] for m in inbox.snapshot()] == [0, 1, 2]
    (letter,) = dead
    assert letter.body == b"payload of dlq-1"
    assert letter.reconsume_times == 3
    assert letter.properties[MessageConst.RETRY_TOPIC] == topic
    assert letter.properties["ORIGIN"] == "dlq-1"
