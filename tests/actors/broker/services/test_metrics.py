"""The broker's /metrics: scraped over HTTP after known traffic and parsed with
prometheus_client's own parser; counters equal what was sent and pulled per topic and group,
the lag equals the backlog, and the responder answers bad requests without stopping.

Loopback only, ephemeral ports (metricsPromExporterPort=0), a deadline on every wait.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

import boltmq
from actors.broker.broker import open_broker
from actors.broker.config import BrokerConfig, load_broker_config
from boltmq import EmbeddedCluster
from boltmq.spec import SpecError, parse_spec
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.headers import UpdateConsumerOffsetRequestHeader, encode_header
from protocol.message import MessageConst
from protocol.names import RETRY_GROUP_TOPIC_PREFIX
from supervisors.config import ConfigError
from supervisors.metrics_http import MetricsExporterType
from tests.actors.broker.helpers import SMALL_FILES, heartbeat_request, pull_request, send_request

TOPIC = "MetricsTopic"
DELAYED = "MetricsDelayed"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
async def metered(tmp_path: Path) -> AsyncIterator[EmbeddedCluster]:
    async with boltmq.embedded(
        tmp_path,
        metrics_exporter_type=MetricsExporterType.PROM,
        metrics_prom_exporter_port=0,
        metrics_prom_exporter_host="127.0.0.1",
        **SMALL_FILES,
    ) as running:
        yield running


async def http(port: int, head: bytes) -> tuple[int, bytes]:
    """Send a raw request head; the status code and the body of the answer."""
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(head)
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


async def scrape(port: int) -> Samples:
    """GET /metrics, parsed: (sample name, labels) -> value."""
    status, body = await http(port, b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
    assert status == 200
    samples: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The one sample of ``name`` whose labels include ``labels``."""
    found = [
        v for (n, have), v in samples.items()
        if n == name and set(labels.items()) <= have
    ]  # fmt: skip
    assert len(found) == 1, f"{name}{labels}: {len(found)} samples"
    return found[0]


async def commit(client: RemotingClient, address: str, queue_id: int, offset: int) -> None:
    header = UpdateConsumerOffsetRequestHeader(
        consumer_group="CG", topic=TOPIC, queue_id=queue_id, commit_offset=offset
    )
    request = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, encode_header(header))
    assert (await client.invoke(address, request)).code == ResponseCode.SUCCESS


async def test_counters_and_lag_match_the_traffic(
    metered: EmbeddedCluster, client: RemotingClient
) -> None:
    broker = metered.broker
    address = metered.broker_address
    port = broker.metrics_port
    assert port is not None
    sizes = 0
    with trio.fail_after(20):
        for i in range(5):
            answer = await client.invoke(address, send_request(TOPIC, b"x" * (100 + i)))
            assert answer.code == ResponseCode.SUCCESS
        for _ in range(3):
            answer = await client.invoke(address, send_request(TOPIC, b"y" * 2000, queue_id=1))
            assert answer.code == ResponseCode.SUCCESS
        delay = {MessageConst.DELAY: "3"}
        for _ in range(2):
            answer = await client.invoke(address, send_request(DELAYED, b"d", properties=delay))
            assert answer.code == ResponseCode.SUCCESS
        refused = await client.invoke(address, send_request("bad topic!"))
        assert refused.code != ResponseCode.SUCCESS
        assert (await client.invoke(address, heartbeat_request("c1", "CG", TOPIC))).code == 0
        pulled = 0
        for queue_id in (0, 1):
            answer = await client.invoke(address, pull_request(TOPIC, queue_id=queue_id))
            assert answer.code == ResponseCode.SUCCESS and answer.body is not None
            sizes += len(answer.body)
            pulled += 5 if queue_id == 0 else 3
        # Committed 3 of 5 on queue 0 and 1 of 3 on queue 1: a backlog of 4.
        await commit(client, address, 0, 3)
        await commit(client, address, 1, 1)
        while broker.offsets.query_offset("CG", TOPIC, 1) != 1:  # the offset actor applies it
            await trio.sleep(0.01)
        broker.stats.sample()
        before_ms = time.time() * 1000
        samples = await scrape(port)
        after_ms = time.time() * 1000

    node = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a"}
    put = broker.stats.topic_put[TOPIC]
    normal = {**node, "topic": TOPIC, "message_type": "normal"}
    assert value(samples, "rocketmq_messages_in_total", **normal) == 8
    assert value(samples, "rocketmq_throughput_in_total", **normal) == put[1]
    delayed = {"topic": DELAYED, "message_type": "delay"}
    assert value(samples, "rocketmq_messages_in_total", **delayed) == 2
    # Five stored records under 1 KiB, three between 1 and 4 KiB.
    assert value(samples, "rocketmq_message_size_bucket", le="1024.0", **normal) == 5
    assert value(samples, "rocketmq_message_size_bucket", le="4096.0", **normal) == 8
    assert value(samples, "rocketmq_message_size_count", **normal) == 8
    assert value(samples, "rocketmq_message_size_sum", **normal) == put[1]
    out = {**node, "topic": TOPIC, "consumer_group": "CG"}
    assert value(samples, "rocketmq_messages_out_total", **out) == pulled == 8
    assert value(samples, "rocketmq_throughput_out_total", **out) == sizes
    lag = {**out, "is_retry": "false", "is_system": "false"}
    assert value(samples, "rocketmq_consumer_lag_messages", **lag) == 4
    # The age of the oldest uncommitted message: offset 3 of queue 0 or offset 1 of queue 1.
    oldest = min(
        broker.store.get_message_store_timestamp(TOPIC, 0, 3),
        broker.store.get_message_store_timestamp(TOPIC, 1, 1),
    )
    latency = value(samples, "rocketmq_consumer_lag_latency", **lag)
    assert before_ms - oldest - 1 <= latency <= after_ms - oldest + 1
    assert value(samples, "rocketmq_group_get_latency_by_storetime", group="CG", topic=TOPIC) == (
        latency
    )
    sends = {"request_code": "send_message_v2", "response_code": "success"}
    assert value(samples, "rocketmq_rpc_latency_count", protocol_type="remoting", **sends) == 10
    assert value(samples, "rocketmq_rpc_latency_bucket", le="+Inf", **sends) == 10
    pulls = {"request_code": "pull_message", "response_code": "success"}
    assert value(samples, "rocketmq_rpc_latency_count", **pulls) == 2
    refusals = [
        v for (n, labels), v in samples.items()
        if n == "rocketmq_rpc_latency_count" and ("request_code", "send_message_v2") in labels
        and ("response_code", "success") not in labels
    ]  # fmt: skip
    assert refusals == [1]
    assert value(samples, "rocketmq_consumer_connections", consumer_group="CG", **node) == 1
    assert value(samples, "rocketmq_storage_dispatch_behind_bytes", **node) >= 0
    assert value(samples, "rocketmq_storage_flush_behind_bytes", **node) >= 0
    # The rocketmq-exporter gauges, with the exporter's own labels.
    exporter = {"cluster": "DefaultCluster", "broker": "broker-a", "topic": TOPIC}
    assert value(samples, "rocketmq_producer_offset", **exporter) == 8
    assert value(samples, "rocketmq_consumer_offset", group="CG", **exporter) == 4
    assert value(samples, "rocketmq_producer_tps", **exporter) >= 0
    assert value(samples, "rocketmq_consumer_tps", group="CG", **exporter) >= 0
    diff = {"group": "CG", "topic": TOPIC, "countOfOnlineConsumers": "1", "msgModel": "1"}
    assert value(samples, "rocketmq_group_diff", **diff) == 4
    assert value(samples, "rocketmq_broker_tps", broker="broker-a", brokerIP=address) >= 0
    assert value(samples, "rocketmq_broker_qps", broker="broker-a", brokerIP=address) >= 0


async def test_dead_letters_are_counted(metered: EmbeddedCluster, client: RemotingClient) -> None:
    retry = RETRY_GROUP_TOPIC_PREFIX + "CG"
    broker = metered.broker
    assert broker.metrics_port is not None
    with trio.fail_after(20):
        # A heartbeat creates the group (and its retry topic); a resend past its
        # maxReconsumeTimes goes to %DLQ%CG.
        assert (await client.invoke(metered.broker_address,
                                    heartbeat_request("c1", "CG", TOPIC))).code == 0  # fmt: skip
        request = send_request(retry, b"dead", reconsume_times=3, max_reconsume_times=3)
        answer = await client.invoke(metered.broker_address, request)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        samples = await scrape(broker.metrics_port)
    labels = {"consumer_group": "CG", "topic": retry}
    assert value(samples, "rocketmq_send_to_dlq_messages_total", **labels) == 1


async def test_bad_requests_get_an_answer_and_the_responder_keeps_serving(
    metered: EmbeddedCluster,
) -> None:
    port = metered.broker.metrics_port
    assert port is not None
    assert (await http(port, b"GET /nothing HTTP/1.1\r\n\r\n"))[0] == 404
    assert (await http(port, b"POST /metrics HTTP/1.1\r\n\r\n"))[0] == 405
    assert (await http(port, b"hello\r\n\r\n"))[0] == 400
    status, body = await http(port, b"HEAD /metrics HTTP/1.1\r\n\r\n")
    assert (status, body) == (200, b"")
    metered.broker.stats.topic_put_typed["Broken"] = []  # makes the collector raise
    assert (await http(port, b"GET /metrics HTTP/1.1\r\n\r\n"))[0] == 500
    del metered.broker.stats.topic_put_typed["Broken"]
    samples = await scrape(port)
    assert value(samples, "rocketmq_broker_permission", node_id="broker-a") == 6


async def test_metrics_are_off_by_default_and_config_errors_are_plain(tmp_path: Path) -> None:
    config = BrokerConfig(listen_port=0, store_path_root_dir=str(tmp_path), **SMALL_FILES)
    async with open_broker(config) as broker, RemotingClient() as client:
        assert broker.metrics_port is None
        with trio.fail_after(10):
            answer = await client.invoke(broker.address, send_request(TOPIC))
        assert answer.code == ResponseCode.SUCCESS
        # Counted for the statistics as ever; no request timed without metrics.
        assert broker.stats.topic_put_typed[TOPIC][0][0] == 1
        assert broker.request_stats.counts == {}
    with pytest.raises(ConfigError, match=r"metricsExporterType.*DISABLE, PROM"):
        load_broker_config(None, {"metricsExporterType": "OTLP_GRPC"})
    with pytest.raises(ConfigError, match=r"metrics_prom_exporter_port.*65535"):
        load_broker_config(None, {"metricsPromExporterPort": "70000"})


async def test_a_taken_port_is_named(tmp_path: Path) -> None:
    holder = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    taken = holder.socket.getsockname()[1]
    config = BrokerConfig(
        listen_port=0, store_path_root_dir=str(tmp_path),
        metrics_exporter_type=MetricsExporterType.PROM,
        metrics_prom_exporter_port=taken, metrics_prom_exporter_host="127.0.0.1",
        **SMALL_FILES,
    )  # fmt: skip
    errors: list[OSError] = []
    try:
        async with open_broker(config):
            pass
    except* OSError as group:
        errors.extend(e for e in group.exceptions if isinstance(e, OSError))
    finally:
        await holder.aclose()
    assert len(errors) == 1
    assert f"metrics on 127.0.0.1:{taken}" in str(errors[0])
    assert "metricsPromExporterPort" in str(errors[0])


def test_a_cluster_spec_names_a_metrics_port_used_twice(tmp_path: Path) -> None:
    spec = """
[defaults]
metricsExporterType = "PROM"
[[registry]]
listenPort = 9876
[broker.broker-a]
[[broker.broker-a.node]]
brokerId = 0
listenPort = 10911
[broker.broker-b]
[[broker.broker-b.node]]
brokerId = 0
listenPort = 10921
"""
    with pytest.raises(SpecError, match=r"broker-b\.node\[1\]\.metricsPromExporterPort.*5557"):
        parse_spec(spec, base_dir=tmp_path)
    fixed = spec.replace("listenPort = 10921", "listenPort = 10921\nmetricsPromExporterPort = 5567")
    nodes = {node.name: node for node in parse_spec(fixed, base_dir=tmp_path).nodes}
    assert nodes["broker-b-0"].properties["metricsPromExporterPort"] == "5567"
