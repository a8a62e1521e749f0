"""The proxy's consumer RPCs over gRPC: receive and ack exactly once, redelivery with the
second attempt, change of invisible duration, tag filter, FIFO order per message group,
assignment, dead-letter forward, and the refusals (bad or expired receipt handle, invisible
duration out of range).

The session's cluster process (`proxy_cluster`) and a proxy on asyncio per test, driven with
grpc.aio; messages are sent with BoltMQ's own 4.x producer. Loopback only, ephemeral ports, a
deadline on every wait. The proxy's consume limits are lowered (invisible durations and long
polls from 100 ms) so redeliveries take a fraction of a second.
"""

from __future__ import annotations

import time
import uuid
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import attrs
import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from client import Admin, Message, Producer
from protocol.bodies import SubscriptionGroupConfig
from proxy.consume import ConsumeSettings
from proxy.service import SERVICE_NAME
from tests.client.helpers import BoltProcess

from .helpers import V2Stub, create_topic, pb, running_proxy, spb

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
Unique = Callable[[str], str]


@pytest.fixture
def anyio_backend() -> str:
    """grpc.aio runs on asyncio only."""
    return "asyncio"


@pytest.fixture
def unique() -> Unique:
    """A maker of names no other test uses."""
    return lambda prefix: f"{prefix}_{uuid.uuid4().hex[:8]}"


@attrs.frozen
class Cluster:
    """The addresses of the session's cluster the tests use."""

    namesrv: str
    broker: str
    broker_name: str


@pytest.fixture
def cluster(proxy_cluster: BoltProcess) -> Cluster:
    """The session's cluster process (tests/proxy/helpers.py)."""
    return Cluster(proxy_cluster.registry, proxy_cluster.broker, proxy_cluster.found["broker_name"])


# -- the proxy and its gRPC calls -------------------------------------------------------------


class Calls:
    """The consumer RPCs through a grpc.aio channel to the proxy."""

    def __init__(self, channel: grpc.aio.Channel, cluster: Cluster) -> None:
        self.channel = channel
        self.cluster = cluster
        self.stub = V2Stub(channel)

    async def receive(
        self,
        group: str,
        topic: str,
        *,
        batch: int = 32,
        invisible_ms: int = 30_000,
        poll_ms: int = 200,
        filter_expression: pb.FilterExpression | None = None,
        queue_id: int = -1,
    ) -> tuple[pb.Status, list[pb.Message], bool]:
        """(status, messages, whether a delivery timestamp came last) of one ReceiveMessage."""
        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name=group),
            message_queue=pb.MessageQueue(
                topic=pb.Resource(name=topic), id=queue_id,
                broker=pb.Broker(name=self.cluster.broker_name),
            ),
            filter_expression=filter_expression or pb.FilterExpression(type=pb.TAG,
                                                                       expression="*"),
            batch_size=batch, invisible_duration=_duration(invisible_ms),
            long_polling_timeout=_duration(poll_ms),
        )  # fmt: skip
        call: Any = self.channel.unary_stream(
            f"/{SERVICE_NAME}/ReceiveMessage",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=spb.ReceiveMessageResponse.FromString,
        )
        responses = [
            r
            async for r in call(request, metadata=self.stub.metadata(), timeout=poll_ms / 1000 + 5)
        ]
        statuses = [r.status for r in responses if r.HasField("status")]
        assert len(statuses) == 1, responses
        messages = [r.message for r in responses if r.HasField("message")]
        return statuses[0], messages, responses[-1].HasField("delivery_timestamp")

    async def receive_n(
        self, group: str, topic: str, count: int, **kwargs: Any
    ) -> list[pb.Message]:
        """Receive until ``count`` messages came (10 s at most)."""
        got: list[pb.Message] = []
        with anyio.fail_after(10):
            while len(got) < count:
                status, messages, _ = await self.receive(group, topic, **kwargs)
                assert status.code in (pb.OK, pb.MESSAGE_NOT_FOUND), status
                got += messages
        return got

    async def ack(self, group: str, topic: str, messages: list[pb.Message] | list[tuple[str, str]]
                  ) -> spb.AckMessageResponse:  # fmt: skip
        """AckMessage of messages (or of (message id, receipt handle) pairs)."""
        entries = [
            spb.AckMessageEntry(message_id=m[0], receipt_handle=m[1]) if isinstance(m, tuple)
            else spb.AckMessageEntry(message_id=m.system_properties.message_id,
                                     receipt_handle=m.system_properties.receipt_handle)
            for m in messages
        ]  # fmt: skip
        request = spb.AckMessageRequest(
            group=pb.Resource(name=group), topic=pb.Resource(name=topic), entries=entries
        )
        answer: spb.AckMessageResponse = await self.stub.unary("AckMessage", request)
        return answer

    async def change(
        self, group: str, topic: str, message: pb.Message, invisible_ms: int, handle: str = ""
    ) -> spb.ChangeInvisibleDurationResponse:
        """ChangeInvisibleDuration of one message."""
        request = spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name=group), topic=pb.Resource(name=topic),
            receipt_handle=handle or message.system_properties.receipt_handle,
            invisible_duration=_duration(invisible_ms),
            message_id=message.system_properties.message_id,
        )  # fmt: skip
        answer: spb.ChangeInvisibleDurationResponse = await self.stub.unary(
            "ChangeInvisibleDuration", request
        )
        return answer

    async def assignment(self, group: str, topic: str) -> spb.QueryAssignmentResponse:
        """QueryAssignment."""
        request = spb.QueryAssignmentRequest(group=pb.Resource(name=group),
                                             topic=pb.Resource(name=topic))  # fmt: skip
        answer: spb.QueryAssignmentResponse = await self.stub.unary("QueryAssignment", request)
        return answer

    async def forward(
        self, group: str, topic: str, message: pb.Message
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        """ForwardMessageToDeadLetterQueue of one message."""
        request = spb.ForwardMessageToDeadLetterQueueRequest(
            group=pb.Resource(name=group), topic=pb.Resource(name=topic),
            receipt_handle=message.system_properties.receipt_handle,
            message_id=message.system_properties.message_id,
            delivery_attempt=message.system_properties.delivery_attempt, max_delivery_attempts=16,
        )  # fmt: skip
        answer: spb.ForwardMessageToDeadLetterQueueResponse = await self.stub.unary(
            "ForwardMessageToDeadLetterQueue", request
        )
        return answer


@asynccontextmanager
async def proxy(cluster: Cluster) -> AsyncIterator[Calls]:
    """A proxy in front of the cluster, its consume limits lowered, and a channel to it."""
    async with running_proxy(cluster.namesrv) as server:
        assert server.service is not None
        server.service.consume.settings = ConsumeSettings(
            min_invisible_ms_for_receive=100, min_long_polling_ms=100, group_config_ttl=0
        )
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            yield Calls(channel, cluster)


async def send(cluster: Cluster, topic: str, bodies: list[bytes], **kwargs: Any) -> None:
    """Send each body to ``topic`` with BoltMQ's 4.x producer."""
    async with Producer("PG_proxy_consume", namesrv_addr=cluster.namesrv) as producer:
        for body in bodies:
            await producer.send(Message(topic, body, **kwargs))


async def create(
    cluster: Cluster, topic: str, queues: int, group: SubscriptionGroupConfig | None = None
) -> None:
    """A topic (routed) and, when given, a group config."""
    if group is not None:
        async with Admin(namesrv_addr=cluster.namesrv) as admin:
            await admin.create_group(group, broker_addr=cluster.broker)
    await create_topic(cluster.namesrv, topic, queues)


def _duration(ms: int) -> Duration:
    duration = Duration()
    duration.FromMilliseconds(ms)
    return duration


# -- the tests --------------------------------------------------------------------------------


async def test_receive_and_ack_200_exactly_once(cluster: Cluster, unique: Unique) -> None:
    topic, group = unique("ProxyTopic"), unique("CG_proxy")
    await create(cluster, topic, 4)
    bodies = [f"m{i}".encode() for i in range(200)]
    await send(cluster, topic, bodies, tags="TagA", keys="k1 k2", properties={"color": "red"})
    async with proxy(cluster) as calls:
        got = await calls.receive_n(group, topic, 200)
        assert sorted(m.body for m in got) == sorted(bodies)
        assert len({m.system_properties.message_id for m in got}) == 200
        first = got[0].system_properties
        assert first.tag == "TagA" and list(first.keys) == ["k1", "k2"]
        assert first.body_digest.type == pb.CRC32 and first.body_encoding == pb.IDENTITY
        assert first.body_digest.checksum == f"{zlib.crc32(got[0].body):08X}"
        assert first.delivery_attempt == 1 and first.message_type == pb.NORMAL
        assert first.invisible_duration.seconds == 30 and first.born_host and first.store_host
        assert len(first.receipt_handle.split(" ")) == 9  # the proxy form
        assert dict(got[0].user_properties) == {"color": "red"}
        assert got[0].topic.name == topic
        for start in range(0, 200, 50):
            answer = await calls.ack(group, topic, got[start : start + 50])
            assert answer.status.code == pb.OK, answer.status
            assert [e.status.code for e in answer.entries] == [pb.OK] * 50
        status, messages, stamped = await calls.receive(group, topic, poll_ms=300)
        assert status.code == pb.MESSAGE_NOT_FOUND and messages == [] and stamped
        # An acked handle acks no more.
        again = await calls.ack(group, topic, got[:1])
        assert again.entries[0].status.code == pb.INVALID_RECEIPT_HANDLE


async def test_unacked_comes_back_with_delivery_attempt_2(cluster: Cluster, unique: Unique) -> None:
    topic, group = unique("ProxyTopic"), unique("CG_proxy")
    await create(cluster, topic, 1)
    await send(cluster, topic, [b"dropped"])
    async with proxy(cluster) as calls:
        (first,) = await calls.receive_n(group, topic, 1, invisible_ms=300)
        (second,) = await calls.receive_n(group, topic, 1, poll_ms=2000)
        assert second.body == b"dropped" and second.topic.name == topic
        assert second.system_properties.delivery_attempt == 2
        assert second.system_properties.message_id == first.system_properties.message_id
        answer = await calls.ack(group, topic, [second])
        assert answer.status.code == pb.OK


async def test_change_invisible_extends_and_replaces_the_handle(
    cluster: Cluster, unique: Unique
) -> None:
    topic, group = unique("ProxyTopic"), unique("CG_proxy")
    await create(cluster, topic, 1)
    await send(cluster, topic, [b"slow"])
    async with proxy(cluster) as calls:
        (message,) = await calls.receive_n(group, topic, 1, invisible_ms=1500)
        changed = await calls.change(group, topic, message, 60_000)
        assert changed.status.code == pb.OK, changed.status
        assert changed.receipt_handle != message.system_properties.receipt_handle
        # Past the first invisible time it is still hidden.
        first_until = int(message.system_properties.receipt_handle.split(" ")[1]) + 1500
        past_first = first_until - int(time.time() * 1000) + 500
        status, messages, _ = await calls.receive(group, topic, poll_ms=max(past_first, 100))
        assert status.code == pb.MESSAGE_NOT_FOUND and messages == []  # still hidden
        stale = await calls.ack(group, topic, [message])
        assert stale.entries[0].status.code == pb.INVALID_RECEIPT_HANDLE
        message_id = message.system_properties.message_id
        fresh = await calls.ack(group, topic, [(message_id, changed.receipt_handle)])
        assert fresh.status.code == pb.OK


async def test_tag_filter(cluster: Cluster, unique: Unique) -> None:
    topic, group = unique("ProxyTopic"), unique("CG_proxy")
    await create(cluster, topic, 2)
    await send(cluster, topic, [b"a1", b"a2", b"a3"], tags="TagA")
    await send(cluster, topic, [b"b1", b"b2"], tags="TagB")
    only_a = pb.FilterExpression(type=pb.TAG, expression="TagA")
    async with proxy(cluster) as calls:
        got = await calls.receive_n(group, topic, 3, filter_expression=only_a)
        assert sorted(m.body for m in got) == [b"a1", b"a2", b"a3"]
        assert (await calls.ack(group, topic, got)).status.code == pb.OK
        status, messages, _ = await calls.receive(group, topic, filter_expression=only_a,
                                                  poll_ms=300)  # fmt: skip
        assert status.code == pb.MESSAGE_NOT_FOUND and messages == []


async def test_fifo_group_keeps_each_message_group_in_order(
    cluster: Cluster, unique: Unique
) -> None:
    topic, group = unique("ProxyTopic"), unique("CG_fifo")
    fifo = SubscriptionGroupConfig(group_name=group, consume_message_orderly=True)
    await create(cluster, topic, 2, fifo)
    async with Producer("PG_proxy_fifo", namesrv_addr=cluster.namesrv) as producer:
        for i in range(6):
            for key in ("g1", "g2"):
                message = Message(topic, f"{key}-{i}".encode(),
                                  properties={"__SHARDINGKEY": key})  # fmt: skip
                await producer.send_orderly(message, key)
    async with proxy(cluster) as calls:
        seen: dict[str, list[int]] = {"g1": [], "g2": []}
        with anyio.fail_after(15):
            while sum(map(len, seen.values())) < 12:
                _, received, _ = await calls.receive(group, topic, batch=2)
                for one in received:
                    key = one.system_properties.message_group
                    assert one.system_properties.message_type == pb.FIFO
                    seen[key].append(int(one.body.decode().split("-")[1]))
                if received:
                    assert (await calls.ack(group, topic, received)).status.code == pb.OK
        assert seen == {"g1": list(range(6)), "g2": list(range(6))}


async def test_refusals_bad_handle_expired_handle_and_invisible_time(
    cluster: Cluster, unique: Unique
) -> None:
    topic, group = unique("ProxyTopic"), unique("CG_proxy")
    await create(cluster, topic, 1)
    await send(cluster, topic, [b"x"])
    async with proxy(cluster) as calls:
        bad = await calls.ack(group, topic, [("id-1", "not a handle")])
        assert bad.status.code == pb.INVALID_RECEIPT_HANDLE
        assert bad.entries[0].status.code == pb.INVALID_RECEIPT_HANDLE
        (message,) = await calls.receive_n(group, topic, 1, invisible_ms=5000)
        too_long = await calls.change(group, topic, message, 13 * 3600 * 1000)
        assert too_long.status.code == pb.ILLEGAL_INVISIBLE_TIME
        negative = await calls.change(group, topic, message, -1)
        assert negative.status.code == pb.ILLEGAL_INVISIBLE_TIME
        status, _, stamped = await calls.receive(group, topic, invisible_ms=50)
        assert status.code == pb.ILLEGAL_INVISIBLE_TIME and stamped
        # A handle past its invisible time is expired: refused without asking the broker.
        fields = message.system_properties.receipt_handle.split(" ")
        fields[1] = str(int(fields[1]) - 60_000)
        expired = await calls.ack(group, topic, [("id", " ".join(fields))])
        assert expired.entries[0].status.code == pb.INVALID_RECEIPT_HANDLE
        assert "expired" in expired.entries[0].status.message
        # Nothing was lost: the real handle still acks.
        assert (await calls.ack(group, topic, [message])).status.code == pb.OK


async def test_assignment_and_forward_to_dead_letter_queue(
    cluster: Cluster, unique: Unique
) -> None:
    topic, group = unique("ProxyTopic"), unique("CG_proxy")
    await create(cluster, topic, 2)
    await send(cluster, topic, [b"poison"])
    async with proxy(cluster) as calls:
        answer = await calls.assignment(group, topic)
        assert answer.status.code == pb.OK, answer.status
        (assignment,) = answer.assignments
        queue = assignment.message_queue
        assert (queue.id, queue.broker.name) == (-1, cluster.broker_name)
        assert queue.permission == pb.READ_WRITE and queue.broker.endpoints.addresses
        missing = await calls.assignment(group, unique("NoSuchTopic"))
        assert missing.status.code == pb.TOPIC_NOT_FOUND
        (message,) = await calls.receive_n(group, topic, 1)
        forwarded = await calls.forward(group, topic, message)
        assert forwarded.status.code == pb.OK, forwarded.status
        stale = await calls.ack(group, topic, [message])  # forwarded means acked
        assert stale.entries[0].status.code == pb.INVALID_RECEIPT_HANDLE
        dlq = f"%DLQ%{group}"
        (dead,) = await calls.receive_n("CG_reader_" + group, dlq, 1)
        assert dead.body == b"poison"
