"""Request-reply against a real BoltMQ cluster, on trio and on asyncio: a requester's
`Producer.request`, a responder replying with `create_reply_message`, the broker pushing the
reply (SEND_REPLY_MESSAGE_V2, PUSH_REPLY_MESSAGE_TO_CLIENT), and the failures a user meets."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from client import (
    BlockingProducer,
    BlockingPullConsumer,
    ConsumeConcurrentlyStatus,
    Message,
    MQClientError,
    Producer,
    PushConsumer,
    RequestTimeout,
    create_reply_message,
)
from protocol.bodies import ConsumeFromWhere
from protocol.codes import ResponseCode
from protocol.message import MessageConst, MessageExt

from .helpers import create_topic

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
OK = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
Unique = Callable[[str], str]


class Responder:
    """A push consumer's listener that answers each request with ``b"re:" + body``."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.requests: list[MessageExt] = []

    async def __call__(self, messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        for message in messages:
            self.requests.append(message)
            await self.producer.send(create_reply_message(message, b"re:" + message.body))
        return OK


async def test_a_request_gets_its_reply(cluster: Any, unique: Unique, anyio_backend: str) -> None:
    topic = unique("Req")
    await create_topic(cluster, topic, 4)
    async with Producer(unique("RespPG"), namesrv_addr=cluster.namesrv) as reply_producer:
        responder = Responder(reply_producer)
        push = PushConsumer(unique("RespCG"), responder, namesrv_addr=cluster.namesrv,
                            consume_from_where=FIRST)  # fmt: skip
        push.subscribe(topic)
        async with push, Producer(unique("ReqPG"), namesrv_addr=cluster.namesrv) as requester:
            replies = [
                await requester.request(Message(topic, f"ask-{i}".encode()), timeout=20.0)
                for i in range(3)
            ]
    assert [reply.body for reply in replies] == [b"re:ask-0", b"re:ask-1", b"re:ask-2"]
    asked = {m.properties[MessageConst.CORRELATION_ID]: m for m in responder.requests}
    for reply in replies:
        request = asked[reply.properties[MessageConst.CORRELATION_ID]]
        assert reply.body == b"re:" + request.body
        assert reply.topic.endswith("_REPLY_TOPIC")
        assert reply.properties[MessageConst.MESSAGE_TYPE] == "reply"
        assert MessageConst.REPLY_MESSAGE_ARRIVE_TIME in reply.properties
        assert MessageConst.PUSH_REPLY_TIME in reply.properties
    # Each request named this requester and its timeout.
    request = responder.requests[0]
    assert request.properties[MessageConst.MESSAGE_TTL] == "20000"
    assert "@" in request.properties[MessageConst.MESSAGE_REPLY_TO_CLIENT]


async def test_a_large_reply_arrives_as_it_was_sent(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    # 8 KiB bodies are compressed on the wire; the requester gets the body back inflated.
    topic = unique("ReqBig")
    await create_topic(cluster, topic, 1)
    big = bytes(range(256)) * 32
    async with Producer(unique("RespPG"), namesrv_addr=cluster.namesrv) as reply_producer:

        async def listener(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
            for message in messages:
                await reply_producer.send(create_reply_message(message, big))
            return OK

        push = PushConsumer(unique("RespCG"), listener, namesrv_addr=cluster.namesrv,
                            consume_from_where=FIRST)  # fmt: skip
        push.subscribe(topic)
        async with push, Producer(unique("ReqPG"), namesrv_addr=cluster.namesrv) as requester:
            reply = await requester.request(Message(topic, b"big?"), timeout=20.0)
    assert reply.body == big


async def test_a_request_nobody_answers_times_out(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("ReqNone")
    await create_topic(cluster, topic, 1)
    async with Producer(unique("ReqPG"), namesrv_addr=cluster.namesrv) as requester:
        with pytest.raises(RequestTimeout, match="no reply"):
            await requester.request(Message(topic, b"anyone?"), timeout=1.0)
        assert requester.instance.replies._waiting == {}  # nothing left behind


async def test_a_reply_to_a_requester_that_has_gone_is_refused(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    async with Producer(unique("RespPG"), namesrv_addr=cluster.namesrv,
                        retry_times_when_send_failed=0) as producer:  # fmt: skip
        # A request message as a responder would have received it, from a client that left.
        request = MessageExt(
            store_size=0, body_crc=0, queue_id=0, flag=0, queue_offset=0, commit_log_offset=0,
            sys_flag=0, born_timestamp=0, born_host=("127.0.0.1", 1), store_timestamp=0,
            store_host=("127.0.0.1", 2), reconsume_times=0, prepared_transaction_offset=0,
            body=b"q", topic="T",
            properties={
                MessageConst.CLUSTER: "DefaultCluster",
                MessageConst.CORRELATION_ID: "c-1",
                MessageConst.MESSAGE_REPLY_TO_CLIENT: "10.9.9.9@1#gone",
                MessageConst.MESSAGE_TTL: "3000",
            },
        )  # fmt: skip
        with pytest.raises(MQClientError) as refused:
            await producer.send(create_reply_message(request, b"too late"))
    assert refused.value.code == ResponseCode.SYSTEM_ERROR
    assert "10.9.9.9@1#gone" in str(refused.value)


def test_create_reply_message_needs_a_request_from_a_broker() -> None:
    request = MessageExt(
        store_size=0, body_crc=0, queue_id=0, flag=0, queue_offset=0, commit_log_offset=0,
        sys_flag=0, born_timestamp=0, born_host=("127.0.0.1", 1), store_timestamp=0,
        store_host=("127.0.0.1", 2), reconsume_times=0, prepared_transaction_offset=0,
        body=b"q", topic="T", properties={},
    )  # fmt: skip
    with pytest.raises(ValueError, match="CLUSTER"):
        create_reply_message(request, b"x")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_blocking_producer_requests_too(cluster: Any, unique: Unique, backend: str) -> None:
    topic = unique("ReqBlock")
    anyio.run(create_topic, cluster, topic, 1)
    stop = threading.Event()
    answered: list[bytes] = []
    failed: list[BaseException] = []

    def respond() -> None:  # a responder as a script writes one: poll, reply, repeat
        try:
            serve()
        except BaseException as exc:
            failed.append(exc)
            raise

    def serve() -> None:
        with BlockingPullConsumer(unique("RespCG"), namesrv_addr=cluster.namesrv,
                                  backend=backend,
                                  consume_from_where=FIRST,
                                  ) as consumer, BlockingProducer(
            unique("RespPG"), namesrv_addr=cluster.namesrv, backend=backend
        ) as producer:  # fmt: skip
            consumer.subscribe(topic)
            while not stop.is_set():
                for message in consumer.poll(timeout=0.5):
                    producer.send(create_reply_message(message, b"re:" + message.body))
                    answered.append(message.body)

    with BlockingProducer(unique("ReqPG"), namesrv_addr=cluster.namesrv, backend=backend) as p:
        responder = threading.Thread(target=respond, daemon=True)
        responder.start()
        try:
            reply = p.request(Message(topic, b"blocking?"), timeout=30.0)
        finally:
            stop.set()
            responder.join(30)
    assert not failed
    assert reply.body == b"re:blocking?"
    assert answered == [b"blocking?"]


async def test_request_async_gives_a_handle_and_calls_back(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("ReqAsync")
    await create_topic(cluster, topic, 2)
    called: list[tuple[bytes | None, BaseException | None]] = []

    def callback(reply: MessageExt | None, error: BaseException | None) -> None:
        called.append((None if reply is None else reply.body, error))

    async with Producer(unique("RespPG"), namesrv_addr=cluster.namesrv) as reply_producer:
        push = PushConsumer(unique("RespCG"), Responder(reply_producer),
                            namesrv_addr=cluster.namesrv, consume_from_where=FIRST)  # fmt: skip
        push.subscribe(topic)
        async with push, Producer(unique("ReqPG"), namesrv_addr=cluster.namesrv) as requester:
            handles = [
                await requester.request_async(
                    Message(topic, f"a{i}".encode()), callback, timeout=20.0
                )
                for i in range(4)
            ]
            replies = [await handle for handle in handles]
            unanswered = await requester.request_async(
                Message(unique("ReqNobody"), b"?"), callback, timeout=1.0
            )
            with pytest.raises(RequestTimeout):
                await unanswered
    assert [r.body for r in replies] == [b"re:a0", b"re:a1", b"re:a2", b"re:a3"]
    assert sorted(body for body, error in called if error is None) == [
        b"re:a0", b"re:a1", b"re:a2", b"re:a3",
    ]  # fmt: skip
    assert [type(error) for body, error in called if error is not None] == [RequestTimeout]
