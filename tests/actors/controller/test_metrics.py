"""The controller's /metrics: leadership, live brokers, SyncStateSet sizes, elections."""

from __future__ import annotations

import trio
from prometheus_client.parser import text_string_to_metric_families

from actors.controller import ControllerConfig, open_controller
from actors.registry import RegistryConfig, open_registry
from protocol.client import RemotingClient
from supervisors.metrics_http import MetricsExporterType

from .helpers import CLUSTER, GROUP, elect, heartbeat, join

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


async def test_metrics_after_an_election() -> None:
    config = ControllerConfig(
        listen_port=0,
        controller_store_path="",
        metrics_exporter_type=MetricsExporterType.PROM,
        metrics_prom_exporter_port=0,
        metrics_prom_exporter_host="127.0.0.1",
    )
    async with open_controller(config) as controller, RemotingClient() as client:
        assert controller.metrics_port is not None
        broker_id = await join(client, controller.address)
        await heartbeat(client, controller.address, broker_id, timeout_ms=60_000)
        assert (await elect(client, controller.address, broker_id)).code == 0
        samples = await scrape(controller.metrics_port)
        base = {("node_type", "controller"), ("node_id", controller.address)}
        assert samples[("rocketmq_controller_is_leader", frozenset(base))] == 1
        assert samples[("rocketmq_controller_alive_brokers", frozenset(base))] == 1
        size = frozenset(base | {("broker_name", GROUP)})
        assert samples[("rocketmq_controller_sync_state_set_size", size)] == 1
        labels = frozenset(base | {("cluster", CLUSTER), ("broker_name", GROUP),
                                   ("trigger", "broker")})  # fmt: skip
        assert samples[("rocketmq_controller_elections_total", labels)] == 1


async def test_an_embedded_controller_s_series_are_on_the_registry_s_metrics() -> None:
    registry_config = RegistryConfig(
        listen_port=0,
        bind_address="127.0.0.1",
        kv_config_path=None,
        enable_controller_in_namesrv=True,
        metrics_exporter_type=MetricsExporterType.PROM,
        metrics_prom_exporter_port=0,
        metrics_prom_exporter_host="127.0.0.1",
    )
    # The same keys reach the controller (one namesrv.conf): it opens no port of its own.
    controller_config = ControllerConfig(
        controller_store_path="",
        metrics_exporter_type=MetricsExporterType.PROM,
        metrics_prom_exporter_port=0,
    )
    async with open_registry(registry_config, controller_config) as registry:
        assert registry.controller is not None and registry.controller.metrics_port is None
        assert registry.metrics_port is not None
        samples = await scrape(registry.metrics_port)
        names = {name for name, _ in samples}
        assert "rocketmq_controller_is_leader" in names
        assert "rocketmq_namesrv_topics" in names
