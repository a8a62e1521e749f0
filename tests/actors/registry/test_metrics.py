"""The registry's /metrics: scraped over HTTP after known requests and parsed with
prometheus_client's parser; request latencies counted per request and response code, the
route table's sizes, and a responder that restarts alone under the registry's supervisor.

Loopback only, port 0, `trio.fail_after` around every I/O wait.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from actors.registry import open_registry
from actors.registry.config import RegistryConfig
from protocol.client import RemotingClient
from protocol.codes import ResponseCode
from supervisors.metrics_http import MetricsExporterType
from supervisors.supervisor import ChildState

from .helpers import local_config, register_request, route, topics

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(port: int) -> Samples:
    """GET /metrics, parsed: (sample name, labels) -> value."""
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    samples: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def metered_config(tmp_path: Path) -> RegistryConfig:
    return local_config(
        tmp_path,
        metrics_exporter_type=MetricsExporterType.PROM,
        metrics_prom_exporter_port=0,
        metrics_prom_exporter_host="127.0.0.1",
    )


async def test_request_latency_and_route_table(tmp_path: Path) -> None:
    async with open_registry(metered_config(tmp_path)) as registry, RemotingClient() as client:
        assert registry.metrics_port is not None
        with trio.fail_after(10):
            for name, address in (("broker-a", "10.0.0.1:10911"), ("broker-b", "10.0.0.2:10911")):
                answer = await client.invoke(
                    registry.address, register_request(name, 0, address, topics(("T", 4)))
                )
                assert answer.code == ResponseCode.SUCCESS
            assert await route(client, registry.address, "T") is not None
            assert await route(client, registry.address, "Missing") is None
            samples = await scrape(registry.metrics_port)
    node = frozenset({("node_type", "nameserver"), ("node_id", registry.address)})

    def value(name: str, **labels: str) -> float:
        return samples[(name, node | frozenset(labels.items()))]

    remoting = {"protocol_type": "remoting"}
    assert value("rocketmq_rpc_latency_count", request_code="register_broker",
                 response_code="success", **remoting) == 2  # fmt: skip
    assert value("rocketmq_rpc_latency_count", request_code="get_routeinfo_by_topic",
                 response_code="success", **remoting) == 1  # fmt: skip
    assert value("rocketmq_rpc_latency_count", request_code="get_routeinfo_by_topic",
                 response_code="topic_not_exist", **remoting) == 1  # fmt: skip
    assert value("rocketmq_rpc_latency_bucket", request_code="register_broker",
                 response_code="success", le="+Inf", **remoting) == 2  # fmt: skip
    assert value("rocketmq_namesrv_live_brokers") == 2
    assert value("rocketmq_namesrv_broker_names") == 2
    assert value("rocketmq_namesrv_clusters") == 1
    assert value("rocketmq_namesrv_topics") == 1
    assert value("rocketmq_namesrv_route_queries_total") == 2


async def test_a_crashed_responder_restarts_alone_on_its_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_registry(metered_config(tmp_path)) as registry, RemotingClient() as client:
        port = registry.metrics_port
        supervisor = registry.metrics_supervisor
        assert port is not None and supervisor is not None
        accept = trio.SocketListener.accept
        crashed = []

        async def fail_once(self: trio.SocketListener) -> trio.SocketStream:
            if not crashed and self.socket.getsockname()[1] == port:
                crashed.append(True)
                raise RuntimeError("injected accept failure")
            return await accept(self)

        monkeypatch.setattr(trio.SocketListener, "accept", fail_once)
        with trio.fail_after(10):  # accepted; the loop's next accept raises and the child ends
            await (await trio.open_tcp_stream("127.0.0.1", port)).aclose()
        with trio.fail_after(20):
            while True:
                port_child, child = supervisor.statistics().children
                if child.restarts == 1 and child.state is ChildState.RUNNING:
                    break
                await trio.sleep(0.01)
        assert child.last_error is not None and "injected accept failure" in child.last_error
        assert (port_child.name, port_child.restarts) == ("metrics-port", 0)
        samples = await scrape(port)  # the same port, served by the restarted responder
        assert ("rocketmq_namesrv_live_brokers", frozenset(
            {("node_type", "nameserver"), ("node_id", registry.address)}
        )) in samples  # fmt: skip
        # The registry itself never stopped.
        with trio.fail_after(10):
            assert await route(client, registry.address, "Missing") is None
