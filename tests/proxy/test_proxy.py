"""The gRPC proxy in-process: a real cluster process, the proxy on asyncio, grpc.aio calls.

Loopback only, ephemeral ports, a deadline on every wait. Messages sent through the proxy are
read back with BoltMQ's own 4.x client (PullConsumer), so what the broker stored is checked,
not what the proxy says it stored. Every test uses topics and groups of its own.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

import anyio
import grpc
import orjson
import pytest

from client import Admin, MQClientError, PullConsumer
from protocol.bodies import (
    ConsumeFromWhere,
    ConsumeType,
    MessageModel,
    SubscriptionGroupConfig,
)
from protocol.message import MessageConst, MessageExt
from proxy.route import MIXED, _types_of
from proxy.send import TransactionHandle, consistent_hash
from tests.client.helpers import BoltProcess, poll_until

from .helpers import V2Stub, create_topic, pb, running_proxy, spb, v2_message

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


@pytest.fixture
def anyio_backend() -> str:
    """grpc.aio runs on asyncio only."""
    return "asyncio"


@pytest.fixture
def unique() -> Callable[[str], str]:
    """A maker of names no other test uses."""
    return lambda prefix: f"{prefix}_{uuid.uuid4().hex[:8]}"


def _id() -> str:
    return uuid.uuid4().hex.upper()


async def _read_back(namesrv: str, topic: str, count: int) -> list[MessageExt]:
    async with PullConsumer(
        f"CG_{uuid.uuid4().hex[:8]}", namesrv_addr=namesrv, consume_from_where=FIRST
    ) as consumer:
        await consumer.subscribe(topic)
        return await poll_until(consumer, count, timeout=15)


async def test_route_names_the_proxy_for_every_queue(
    proxy_cluster: BoltProcess, unique: Callable[[str], str]
) -> None:
    topic = unique("RouteTopic")
    await create_topic(proxy_cluster.registry, topic, queues=3)
    async with (
        running_proxy(proxy_cluster.registry) as proxy,
        grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}") as channel,
    ):
        stub = V2Stub(channel)
        access = pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host="10.1.2.3", port=8081)])
        answer = await stub.unary(
            "QueryRoute", spb.QueryRouteRequest(topic=pb.Resource(name=topic), endpoints=access)
        )
        assert answer.status.code == pb.OK, answer.status
        queues = answer.message_queues
        assert [q.id for q in queues] == [0, 1, 2]
        assert {q.permission for q in queues} == {pb.READ_WRITE}
        assert {q.broker.name for q in queues} == {proxy_cluster.found["broker_name"]}
        assert all(q.broker.id == 0 and q.broker.endpoints == access for q in queues)
        # Our broker has no topic attributes yet: every type is accepted (MIXED).
        assert set(queues[0].accept_message_types) == {
            pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION,
        }  # fmt: skip

        # More read than write queues: the extra ones are read-only, after the shared ones.
        async with Admin(namesrv_addr=proxy_cluster.registry) as admin:
            await admin.create_topic(topic, read_queue_nums=5, write_queue_nums=3)
        assert proxy.runtime is not None
        with anyio.fail_after(10):
            while True:
                # Forget the cached route, so the lookup asks the registry again.
                proxy.runtime.instance.routes.pop(topic, None)
                answer = await stub.unary(
                    "QueryRoute", spb.QueryRouteRequest(topic=pb.Resource(name=topic))
                )
                if len(answer.message_queues) == 5:
                    break
                await anyio.sleep(0.1)
        assert [q.permission for q in answer.message_queues] == [pb.READ_WRITE] * 3 + [pb.READ] * 2

        # Without an access point in the request the proxy names its own address.
        answer = await stub.unary(
            "QueryRoute", spb.QueryRouteRequest(topic=pb.Resource(name=topic))
        )
        address = answer.message_queues[0].broker.endpoints.addresses[0]
        assert (address.host, address.port) == ("127.0.0.1", proxy.port)


async def test_bad_requests_get_the_v2_codes_clients_expect(
    proxy_cluster: BoltProcess, unique: Callable[[str], str]
) -> None:
    topic = unique("BadTopic")
    await create_topic(proxy_cluster.registry, topic, queues=1)
    async with (
        running_proxy(proxy_cluster.registry, max_message_size=1024) as proxy,
        grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}") as channel,
    ):
        stub = V2Stub(channel)

        async def send(message: pb.Message, via: V2Stub = stub) -> pb.Status:
            answer = await via.unary("SendMessage", spb.SendMessageRequest(messages=[message]))
            return answer.status

        missing = unique("NoSuchTopic")
        route = await stub.unary(
            "QueryRoute", spb.QueryRouteRequest(topic=pb.Resource(name=missing))
        )
        assert route.status.code == pb.TOPIC_NOT_FOUND and missing in route.status.message
        assert (await send(v2_message(missing, b"x", _id()))).code == pb.TOPIC_NOT_FOUND

        anonymous = V2Stub(channel, client_id=None)
        assert (await send(v2_message(topic, b"x", _id()), anonymous)).code == (
            pb.CLIENT_ID_REQUIRED
        )
        route = await anonymous.unary(
            "QueryRoute", spb.QueryRouteRequest(topic=pb.Resource(name=topic))
        )
        assert route.status.code == pb.CLIENT_ID_REQUIRED

        too_big = await send(v2_message(topic, b"x" * 1025, _id()))
        assert too_big.code == pb.MESSAGE_BODY_TOO_LARGE and "1024" in too_big.message
        assert (await send(v2_message(topic, b"", _id()))).code == pb.MESSAGE_BODY_EMPTY
        assert (await send(v2_message(topic, b"x", _id(), tag="a|b"))).code == (
            pb.ILLEGAL_MESSAGE_TAG
        )
        assert (await send(v2_message(topic, b"x", _id(), keys=["a b"]))).code == (
            pb.ILLEGAL_MESSAGE_KEY
        )
        reserved = v2_message(topic, b"x", _id(), user_properties={"TAGS": "sneaky"})
        assert (await send(reserved)).code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY
        assert (await send(v2_message(topic, b"x", ""))).code == pb.ILLEGAL_MESSAGE_ID
        assert (await send(v2_message("bad topic!", b"x", _id()))).code == pb.ILLEGAL_TOPIC

        end = await stub.unary(
            "EndTransaction",
            spb.EndTransactionRequest(
                topic=pb.Resource(name=topic), message_id=_id(), transaction_id="not-ours",
                resolution=pb.COMMIT, source=pb.SOURCE_CLIENT,
            ),
        )  # fmt: skip
        assert end.status.code == pb.INVALID_TRANSACTION_ID

        # Past gRPC's own 4 MiB default too: still the v2 code, not a transport error.
        huge = await send(v2_message(topic, b"x" * (5 << 20), _id()))
        assert huge.code == pb.MESSAGE_BODY_TOO_LARGE

        # Nothing refused reached the broker: only the good message below is stored.
        good_id = _id()
        assert (await send(v2_message(topic, b"good", good_id))).code == pb.OK
    stored = await _read_back(proxy_cluster.registry, topic, 1)
    assert stored[0].properties[MessageConst.UNIQ_KEY] == good_id


async def test_sent_messages_keep_tags_keys_and_properties(
    proxy_cluster: BoltProcess, unique: Callable[[str], str]
) -> None:
    topic = unique("SendTopic")
    await create_topic(proxy_cluster.registry, topic, queues=4)
    sent: dict[str, int] = {}
    async with (
        running_proxy(proxy_cluster.registry) as proxy,
        grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}") as channel,
    ):
        stub = V2Stub(channel)
        for i in range(12):
            message_id = _id()
            message = v2_message(
                topic, f"body-{i}".encode(), message_id, tag=f"Tag{i % 3}",
                keys=[f"key-{i}", "shared"], user_properties={"order": str(i), "tenant": "t1"},
            )  # fmt: skip
            answer = await stub.unary("SendMessage", spb.SendMessageRequest(messages=[message]))
            assert answer.status.code == pb.OK, answer.status
            (entry,) = answer.entries
            assert entry.status.code == pb.OK and entry.message_id == message_id
            assert entry.transaction_id == ""
            sent[message_id] = i
    stored = await _read_back(proxy_cluster.registry, topic, 12)
    assert {m.properties[MessageConst.UNIQ_KEY] for m in stored} == set(sent)
    for message in stored:
        i = sent[message.properties[MessageConst.UNIQ_KEY]]
        assert message.body == f"body-{i}".encode()
        assert message.tags == f"Tag{i % 3}"
        assert message.keys == [f"key-{i}", "shared"]
        assert message.properties["order"] == str(i) and message.properties["tenant"] == "t1"
        assert message.properties[MessageConst.PGROUP] == topic
    # Plain sends go round robin over the four queues.
    assert {m.queue_id for m in stored} == {0, 1, 2, 3}


async def test_fifo_message_groups_keep_to_one_queue_each(
    proxy_cluster: BoltProcess, unique: Callable[[str], str]
) -> None:
    topic = unique("FifoTopic")
    await create_topic(proxy_cluster.registry, topic, queues=8)
    groups = ["order-1", "order-2", "order-3"]
    async with (
        running_proxy(proxy_cluster.registry) as proxy,
        grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}") as channel,
    ):
        stub = V2Stub(channel)
        for i in range(15):
            group = groups[i % 3]
            message = v2_message(topic, f"{group}:{i}".encode(), _id(), message_type=pb.FIFO,
                                 message_group=group)  # fmt: skip
            answer = await stub.unary("SendMessage", spb.SendMessageRequest(messages=[message]))
            assert answer.status.code == pb.OK, answer.status
    stored = await _read_back(proxy_cluster.registry, topic, 15)
    queue_of: dict[str, set[int]] = {}
    for message in stored:
        queue_of.setdefault(message.properties["__SHARDINGKEY"], set()).add(message.queue_id)
    assert all(len(queues) == 1 for queues in queue_of.values()), queue_of
    assert set(queue_of) == set(groups)
    # Within a queue a group's messages are in send order.
    for group in groups:
        order = [int(m.body.split(b":")[1]) for m in stored if m.body.startswith(group.encode())]
        assert order == sorted(order)


async def test_transactions_end_by_commit_and_rollback(
    proxy_cluster: BoltProcess, unique: Callable[[str], str]
) -> None:
    topic = unique("TxTopic")
    await create_topic(proxy_cluster.registry, topic, queues=2)
    async with (
        running_proxy(proxy_cluster.registry) as proxy,
        grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}") as channel,
    ):
        stub = V2Stub(channel)
        ids = {}
        for outcome in ("commit", "rollback"):
            message_id = _id()
            message = v2_message(topic, outcome.encode(), message_id, message_type=pb.TRANSACTION)
            answer = await stub.unary("SendMessage", spb.SendMessageRequest(messages=[message]))
            assert answer.status.code == pb.OK, answer.status
            handle = TransactionHandle.decode(answer.entries[0].transaction_id)
            assert handle.broker_name == proxy_cluster.found["broker_name"]
            ids[outcome] = (message_id, answer.entries[0].transaction_id)
        for outcome, resolution in (("commit", pb.COMMIT), ("rollback", pb.ROLLBACK)):
            message_id, transaction_id = ids[outcome]
            end = await stub.unary(
                "EndTransaction",
                spb.EndTransactionRequest(
                    topic=pb.Resource(name=topic), message_id=message_id,
                    transaction_id=transaction_id, resolution=resolution,
                    source=pb.SOURCE_CLIENT,
                ),
            )  # fmt: skip
            assert end.status.code == pb.OK, end.status
    stored = await _read_back(proxy_cluster.registry, topic, 1)
    assert stored[0].body == b"commit"
    assert stored[0].properties[MessageConst.UNIQ_KEY] == ids["commit"][0]


async def test_telemetry_answers_the_merged_settings_and_heartbeats_register(
    proxy_cluster: BoltProcess, unique: Callable[[str], str]
) -> None:
    topic = unique("TeleTopic")
    await create_topic(proxy_cluster.registry, topic, queues=1)
    async with (
        running_proxy(proxy_cluster.registry, max_message_size=65536) as proxy,
        grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}") as channel,
    ):
        stub = V2Stub(channel, client_id=unique("client"))
        access = pb.Endpoints(
            scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=proxy.port)]
        )
        settings = pb.Settings(
            client_type=pb.PRODUCER,
            access_point=access,
            publishing=pb.Publishing(
                topics=[pb.Resource(name=topic)], max_body_size=128 << 20,
                validate_message_type=True,
            ),
            user_agent=pb.UA(language=pb.PYTHON, version="5.1.2", hostname="h"),
        )  # fmt: skip
        stream = stub.telemetry()
        await stream.write(spb.TelemetryCommand(settings=settings))
        with anyio.fail_after(10):
            answer = await stream.read()
        assert answer.status.code == pb.OK
        merged = answer.settings
        assert merged.client_type == pb.PRODUCER and merged.access_point == access
        assert [t.name for t in merged.publishing.topics] == [topic]
        assert merged.publishing.max_body_size == 65536  # the proxy's limit, not the client's
        assert merged.publishing.validate_message_type
        assert merged.backoff_policy.max_attempts == 3
        assert merged.backoff_policy.WhichOneof("strategy") == "exponential_backoff"
        assert merged.request_timeout.seconds == 3
        assert merged.user_agent.version == "5.1.2"

        beat = await stub.unary("Heartbeat", spb.HeartbeatRequest(client_type=pb.PRODUCER))
        assert beat.status.code == pb.OK
        service = proxy.service
        assert service is not None
        assert [s.client_id for s in service.clients.producer_sessions(topic)] == [stub.client_id]
        # The broker knows the client as a producer of the topic's group (the topic itself).
        async with Admin(namesrv_addr=proxy_cluster.registry) as admin:
            producers = await admin.producer_connections(topic, topic)
            assert [c.client_id for c in producers.connection_set] == [stub.client_id]

        group = unique("CG")
        consumer_settings = pb.Settings(
            client_type=pb.SIMPLE_CONSUMER, access_point=access,
            subscription=pb.Subscription(group=pb.Resource(name=group), subscriptions=[
                pb.SubscriptionEntry(topic=pb.Resource(name=topic),
                                     expression=pb.FilterExpression(type=pb.TAG, expression="*"))
            ]),
        )  # fmt: skip
        consumer_stub = V2Stub(channel, client_id=unique("consumer"))
        consumer = consumer_stub.telemetry()
        await consumer.write(spb.TelemetryCommand(settings=consumer_settings))
        with anyio.fail_after(10):
            answer = await consumer.read()
        sub = answer.settings.subscription
        assert sub.receive_batch_size == 32 and sub.long_polling_timeout.seconds == 20
        assert answer.settings.backoff_policy.max_attempts == 17
        beat = await consumer_stub.unary(
            "Heartbeat",
            spb.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER, group=pb.Resource(name=group)),
        )
        assert beat.status.code == pb.OK
        async with Admin(namesrv_addr=proxy_cluster.registry) as admin:
            consumers = await admin.consumer_connections(group)
        assert [c.client_id for c in consumers.connection_set] == [consumer_stub.client_id]
        assert consumers.consume_type == ConsumeType.CONSUME_POP
        assert consumers.message_model == MessageModel.CLUSTERING
        assert set(consumers.subscription_table) == {topic}
        consumer.cancel()

        done = await stub.unary("NotifyClientTermination", spb.NotifyClientTerminationRequest())
        assert done.status.code == pb.OK
        async with Admin(namesrv_addr=proxy_cluster.registry) as admin:
            with pytest.raises(MQClientError, match="not online"):
                await admin.producer_connections(topic, topic)
        stream.cancel()
        with anyio.fail_after(10):
            while service.clients.producer_sessions(topic):
                await asyncio.sleep(0.02)


def test_topic_message_types_come_from_the_message_type_attribute() -> None:
    fifo = orjson.dumps({"topicConfig": {"topicName": "T", "attributes": {"message.type": "FIFO"}}})
    assert _types_of("T", fifo) == (pb.FIFO,)
    transaction = orjson.dumps({"topicName": "T", "attributes": {"message.type": "TRANSACTION"}})
    assert _types_of("T", transaction) == (pb.TRANSACTION,)
    for unknown in (b"{}", b"not json", orjson.dumps({"attributes": {"message.type": "ODD"}})):
        assert _types_of("T", unknown) == MIXED


def test_consistent_hash_keeps_groups_when_queues_are_added() -> None:
    # Guava's property: growing the buckets moves a key only to the new bucket.
    for key in range(-500, 500):
        before = consistent_hash(key * 7919, 8)
        after = consistent_hash(key * 7919, 9)
        assert 0 <= before < 8 and after in (before, 8)


async def test_unknown_and_unserved_rpcs_answer_statuses(
    proxy_cluster: BoltProcess,
) -> None:
    started = time.monotonic()
    async with (
        running_proxy(proxy_cluster.registry) as proxy,
        grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}") as channel,
    ):
        stub = V2Stub(channel)
        answer = await stub.unary("UpdateOffset", spb.UpdateOffsetRequest())
        assert answer.status.code == pb.NOT_IMPLEMENTED
    assert time.monotonic() - started < 10


async def test_one_client_leaving_keeps_the_group_of_another_registered(
    proxy_cluster: BoltProcess, unique: Callable[[str], str]
) -> None:
    topic = unique("SharedTopic")
    await create_topic(proxy_cluster.registry, topic, queues=1)
    async with (
        running_proxy(proxy_cluster.registry) as proxy,
        grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}") as channel,
    ):
        settings = pb.Settings(
            client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name=topic)])
        )
        stubs = [V2Stub(channel, client_id=unique("producer")) for _ in range(2)]
        streams = [stub.telemetry() for stub in stubs]
        for stream in streams:
            await stream.write(spb.TelemetryCommand(settings=settings))
            with anyio.fail_after(10):
                assert (await stream.read()).status.code == pb.OK
        leaving = await stubs[0].unary(
            "NotifyClientTermination", spb.NotifyClientTerminationRequest()
        )
        assert leaving.status.code == pb.OK
        async with Admin(namesrv_addr=proxy_cluster.registry) as admin:
            producers = await admin.producer_connections(topic, topic)
        # The proxy's connection still stands for the producer that stays.
        assert len(producers.connection_set) == 1
        for stream in streams:
            stream.cancel()


async def test_a_consumers_fifo_mode_and_attempts_come_from_its_group(
    proxy_cluster: BoltProcess, unique: Callable[[str], str]
) -> None:
    topic, group = unique("FifoTeleTopic"), unique("CG_fifo")
    await create_topic(proxy_cluster.registry, topic, queues=1)
    async with Admin(namesrv_addr=proxy_cluster.registry) as admin:
        await admin.create_group(
            SubscriptionGroupConfig(group_name=group, consume_message_orderly=True,
                                    retry_max_times=3)
        )  # fmt: skip
    async with (
        running_proxy(proxy_cluster.registry) as proxy,
        grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}") as channel,
    ):
        stub = V2Stub(channel, client_id=unique("consumer"))
        settings = pb.Settings(
            client_type=pb.PUSH_CONSUMER,
            subscription=pb.Subscription(group=pb.Resource(name=group), fifo=False, subscriptions=[
                pb.SubscriptionEntry(topic=pb.Resource(name=topic),
                                     expression=pb.FilterExpression(type=pb.TAG, expression="*"))
            ]),
        )  # fmt: skip
        stream = stub.telemetry()
        await stream.write(spb.TelemetryCommand(settings=settings))
        with anyio.fail_after(10):
            answer = await stream.read()
        stream.cancel()
    # The group says orderly, whatever the client assumed (as RocketMQ's proxy decides).
    assert answer.settings.subscription.fifo
    assert answer.settings.backoff_policy.max_attempts == 4
