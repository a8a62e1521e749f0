"""The gRPC proxy in the trio programs that host it: `boltmq.embedded()` (an ephemeral port
it reports), a spec's ``[[proxy]]`` nodes (an OS process and an in-process one), each checked
by real gRPC calls through it (QueryRoute names the topic's queues; two proxies share one
cluster's pop consumption).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import grpc
import pytest
import trio
from google.protobuf.duration_pb2 import Duration

import boltmq
from client import Admin, ClientInstance, Message, Producer
from proxy._pb.apache.rocketmq.v2 import definition_pb2 as pb
from proxy._pb.apache.rocketmq.v2 import service_pb2 as spb
from tests.actors.broker.ha.helpers import free_port_pair
from tests.client.helpers import wait_for_route
from tests.ports import free_port

pytestmark = pytest.mark.timeout(120)


def query_route(endpoint: str, topic: str) -> spb.QueryRouteResponse:
    """QueryRoute through ``endpoint`` as an official client asks it (blocking)."""
    with grpc.insecure_channel(endpoint) as channel:
        call = channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/QueryRoute",
            request_serializer=spb.QueryRouteRequest.SerializeToString,
            response_deserializer=spb.QueryRouteResponse.FromString,
        )
        answer: spb.QueryRouteResponse = call(
            spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=METADATA, timeout=10
        )
        return answer


METADATA = [("x-mq-client-id", "launcher-test"), ("x-mq-language", "PYTHON")]


def receive(endpoint: str, group: str, topic: str, broker: str) -> tuple[int, list[pb.Message]]:
    """One ReceiveMessage through ``endpoint`` (blocking): (status code, messages)."""
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1,
                                      broker=pb.Broker(name=broker)),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=32, invisible_duration=Duration(seconds=30),
        long_polling_timeout=Duration(seconds=5),
    )  # fmt: skip
    with grpc.insecure_channel(endpoint) as channel:
        call = channel.unary_stream(
            "/apache.rocketmq.v2.MessagingService/ReceiveMessage",
            request_serializer=spb.ReceiveMessageRequest.SerializeToString,
            response_deserializer=spb.ReceiveMessageResponse.FromString,
        )
        answers = list(call(request, metadata=METADATA, timeout=15))
    status = next(a.status.code for a in answers if a.HasField("status"))
    return status, [a.message for a in answers if a.HasField("message")]


def ack(endpoint: str, group: str, topic: str, messages: list[pb.Message]) -> list[int]:
    """AckMessage of ``messages`` through ``endpoint`` (blocking): each entry's status code."""
    request = spb.AckMessageRequest(
        group=pb.Resource(name=group), topic=pb.Resource(name=topic),
        entries=[spb.AckMessageEntry(message_id=m.system_properties.message_id,
                                     receipt_handle=m.system_properties.receipt_handle)
                 for m in messages],
    )  # fmt: skip
    with grpc.insecure_channel(endpoint) as channel:
        call = channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/AckMessage",
            request_serializer=spb.AckMessageRequest.SerializeToString,
            response_deserializer=spb.AckMessageResponse.FromString,
        )
        answer: spb.AckMessageResponse = call(request, metadata=METADATA, timeout=10)
    return [entry.status.code for entry in answer.entries]


def change(endpoint: str, group: str, topic: str, message: pb.Message) -> int:
    """ChangeInvisibleDuration of ``message`` to 100 ms through ``endpoint``: the status code."""
    request = spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name=group), topic=pb.Resource(name=topic),
        receipt_handle=message.system_properties.receipt_handle,
        invisible_duration=Duration(nanos=100_000_000),
        message_id=message.system_properties.message_id,
    )  # fmt: skip
    with grpc.insecure_channel(endpoint) as channel:
        call = channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/ChangeInvisibleDuration",
            request_serializer=spb.ChangeInvisibleDurationRequest.SerializeToString,
            response_deserializer=spb.ChangeInvisibleDurationResponse.FromString,
        )
        answer: spb.ChangeInvisibleDurationResponse = call(request, metadata=METADATA, timeout=10)
    return answer.status.code


async def routed_through(endpoint: str, topic: str) -> list[int]:
    answer = await trio.to_thread.run_sync(query_route, endpoint, topic)
    assert answer.status.code == pb.OK, answer.status
    return sorted(queue.id for queue in answer.message_queues)


async def make_topic(namesrv: str, topic: str, queues: int) -> None:
    async with Admin(namesrv_addr=namesrv) as admin:
        await admin.create_topic(topic, queue_nums=queues)
    async with ClientInstance(namesrv) as instance:
        await wait_for_route(instance, topic)


async def test_embedded_serves_grpc_on_a_port_it_reports() -> None:
    topic = f"EmbeddedGrpc_{uuid.uuid4().hex[:8]}"
    async with boltmq.embedded(store="memory") as cluster:
        assert cluster.proxy is not None and cluster.proxy.port > 0
        assert cluster.grpc_endpoint == f"127.0.0.1:{cluster.proxy.port}"
        await make_topic(cluster.registry_address, topic, 3)
        assert await routed_through(cluster.grpc_endpoint, topic) == [0, 1, 2]
    # Stopped with the cluster: nothing listens there any more.
    with pytest.raises(OSError):
        await trio.open_tcp_stream("127.0.0.1", cluster.proxy.port)


async def test_embedded_without_grpc() -> None:
    async with boltmq.embedded(store="memory", grpc=False) as cluster:
        assert cluster.proxy is None
        with pytest.raises(RuntimeError, match="grpc=False"):
            _ = cluster.grpc_endpoint


async def test_spec_proxy_nodes_start_after_the_brokers_and_serve(tmp_path: Path) -> None:
    registry, broker = free_port(), free_port_pair()
    process_proxy, in_process_proxy = free_port(), free_port()
    if len({registry, broker, broker + 1, process_proxy, in_process_proxy}) < 5:
        pytest.fail("free ports collided")
    spec = tmp_path / "cluster.toml"
    spec.write_text(
        f"""
[defaults]
fastPortEnable = false
mapedFileSizeCommitLog = {4 << 20}
[[registry]]
listenPort = {registry}
inProcess = true
[[broker.broker-a.node]]
brokerId = 0
listenPort = {broker}
inProcess = true
[[proxy]]
grpcServerPort = {process_proxy}
[[proxy]]
grpcServerPort = {in_process_proxy}
inProcess = true
"""
    )
    topic = f"SpecGrpc_{uuid.uuid4().hex[:8]}"
    async with boltmq.launch(spec) as cluster:
        assert cluster.spec.names()[-2:] == ["proxy-1", "proxy-2"]
        assert {name: cluster.states[name].status for name in ("proxy-1", "proxy-2")} == {
            "proxy-1": "running", "proxy-2": "running",
        }  # fmt: skip
        await make_topic(cluster.spec.namesrv_addr, topic, 2)
        for port in (process_proxy, in_process_proxy):
            assert await routed_through(f"127.0.0.1:{port}", topic) == [0, 1]
        assert (tmp_path / "data" / "proxy-1" / "rmq-proxy.json").is_file()

        # Stateless: what one proxy handed out, the other acks or hands back; nothing is lost
        # and nothing acked comes back.
        first, second = f"127.0.0.1:{process_proxy}", f"127.0.0.1:{in_process_proxy}"
        async with Producer("PG_spec_grpc", namesrv_addr=cluster.spec.namesrv_addr) as producer:
            for i in range(6):
                await producer.send(Message(topic, f"m{i}".encode()))
        group = f"CG_spec_grpc_{uuid.uuid4().hex[:6]}"
        got = await receive_all(first, group, topic, 6)
        assert sorted(m.body for m in got) == [f"m{i}".encode() for i in range(6)]
        kept, handed_back = got[:3], got[3:]
        assert await trio.to_thread.run_sync(ack, second, group, topic, kept) == [pb.OK] * 3
        for message in handed_back:
            assert await trio.to_thread.run_sync(change, second, group, topic, message) == pb.OK
        again = await receive_all(second, group, topic, 3)
        assert sorted(m.body for m in again) == sorted(m.body for m in handed_back)
        assert {m.system_properties.delivery_attempt for m in again} == {2}
        assert await trio.to_thread.run_sync(ack, first, group, topic, again) == [pb.OK] * 3
        status, messages = await trio.to_thread.run_sync(receive, first, group, topic, "broker-a")
        assert (status, messages) == (pb.MESSAGE_NOT_FOUND, [])


async def receive_all(endpoint: str, group: str, topic: str, count: int) -> list[pb.Message]:
    """Receive through ``endpoint`` until ``count`` messages came (30 s at most)."""
    got: list[pb.Message] = []
    with trio.fail_after(30):
        while len(got) < count:
            _, messages = await trio.to_thread.run_sync(receive, endpoint, group, topic, "broker-a")
            got += messages
    return got
