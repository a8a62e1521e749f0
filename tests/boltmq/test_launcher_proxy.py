"""The gRPC proxy in the trio programs that host it: `boltmq.embedded()` (an ephemeral port
it reports), a spec's ``[[proxy]]`` nodes (an OS process and an in-process one), each checked
by a real gRPC call through it (QueryRoute names the topic's queues).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import grpc
import pytest
import trio

import boltmq
from client import Admin, ClientInstance
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
            spb.QueryRouteRequest(topic=pb.Resource(name=topic)),
            metadata=[("x-mq-client-id", "launcher-test"), ("x-mq-language", "PYTHON")],
            timeout=10,
        )
        return answer


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
