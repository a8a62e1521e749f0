"""The proxy's face: ACL on gRPC calls, the Prometheus metrics, the config file and the command.

Same rules as test_proxy.py: the shared cluster process, loopback, ephemeral ports, a
deadline on every wait.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.request
import uuid
from datetime import datetime
from pathlib import Path

import anyio
import grpc
import pytest

from actors.acl import AccessValidator
from boltmq.cli import main
from boltmq.cli.proxy import PlainAclBook
from proxy import ConfigError, ProxyConfig, ProxyServer, load_config
from proxy.acl import sign
from tests.client.helpers import ROOT, BoltProcess

from .helpers import V2Stub, create_topic, pb, running_proxy, spb, v2_message

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

ACL = """
accounts:
  - accessKey: producer1
    secretKey: secret-one
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - {topic}=PUB
"""


@pytest.fixture
def anyio_backend() -> str:
    """grpc.aio runs on asyncio only."""
    return "asyncio"


def _id() -> str:
    return uuid.uuid4().hex.upper()


def _signed(stub: V2Stub, access_key: str, secret_key: str) -> list[tuple[str, str]]:
    now = datetime.now().strftime("%Y%m%dT%H%M%SZ")
    authorization = (
        f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, "
        f"Signature={sign(secret_key, now)}"
    )
    return [*stub.metadata(), ("x-mq-date-time", now), ("authorization", authorization)]


async def test_acl_checks_signature_and_permissions(
    proxy_cluster: BoltProcess, tmp_path: Path
) -> None:
    topic, other = f"AclTopic_{_id()[:8]}", f"AclOther_{_id()[:8]}"
    await create_topic(proxy_cluster.registry, topic, queues=1)
    await create_topic(proxy_cluster.registry, other, queues=1)
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL.format(topic=topic))
    validator = AccessValidator(acl_file)
    validator.load()
    async with (
        running_proxy(proxy_cluster.registry, acl_enable=True, accounts=PlainAclBook(validator))
        as proxy,
        grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}") as channel,
    ):  # fmt: skip
        stub = V2Stub(channel)
        send = channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/SendMessage",
            request_serializer=spb.SendMessageRequest.SerializeToString,
            response_deserializer=spb.SendMessageResponse.FromString,
        )

        async def send_to(name: str, metadata: list[tuple[str, str]]) -> pb.Status:
            request = spb.SendMessageRequest(messages=[v2_message(name, b"x", _id())])
            with anyio.fail_after(10):
                return (await send(request, metadata=metadata, timeout=10)).status

        unsigned = await send_to(topic, stub.metadata())
        assert unsigned.code == pb.UNAUTHORIZED and "not signed" in unsigned.message
        wrong = await send_to(topic, _signed(stub, "producer1", "not-the-secret"))
        assert wrong.code == pb.UNAUTHORIZED and "signature" in wrong.message
        stranger = await send_to(topic, _signed(stub, "nobody-here", "whatever"))
        assert stranger.code == pb.UNAUTHORIZED and "nobody-here" in stranger.message
        forbidden = await send_to(other, _signed(stub, "producer1", "secret-one"))
        assert forbidden.code == pb.FORBIDDEN and other in forbidden.message
        allowed = await send_to(topic, _signed(stub, "producer1", "secret-one"))
        assert allowed.code == pb.OK, allowed

        # The file is re-read when it changes: the new permission holds at once after.
        acl_file.write_text(ACL.format(topic=other))
        os.utime(acl_file, (1, 1))
        with anyio.fail_after(10):
            while (await send_to(other, _signed(stub, "producer1", "secret-one"))).code != pb.OK:
                await anyio.sleep(0.2)
    assert proxy.service is not None and proxy.service.acl is not None
    assert proxy.service.acl.refused >= 4


async def test_metrics_count_calls_and_messages(proxy_cluster: BoltProcess) -> None:
    topic = f"MetricsTopic_{_id()[:8]}"
    await create_topic(proxy_cluster.registry, topic, queues=1)
    async with (
        running_proxy(
            proxy_cluster.registry, metrics_exporter_type="PROM", metrics_prom_exporter_port=0
        ) as proxy,
        grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}") as channel,
    ):
        stub = V2Stub(channel)
        for _ in range(3):
            message = v2_message(topic, b"m", _id(), message_type=pb.NORMAL)
            answer = await stub.unary("SendMessage", spb.SendMessageRequest(messages=[message]))
            assert answer.status.code == pb.OK
        missing = spb.QueryRouteRequest(topic=pb.Resource(name=f"Missing_{_id()[:8]}"))
        assert (await stub.unary("QueryRoute", missing)).status.code == pb.TOPIC_NOT_FOUND
        url = f"http://127.0.0.1:{proxy.metrics_port}/metrics"
        text = await anyio.to_thread.run_sync(lambda: urllib.request.urlopen(url, timeout=5).read())
    lines = text.decode().splitlines()

    def value(pattern: str) -> float:
        found = [line for line in lines if re.match(pattern, line)]
        assert found, pattern
        return float(found[0].rsplit(" ", 1)[1])

    assert value(
        rf'rocketmq_messages_in_total\{{message_type="normal",protocol_type="grpc",'
        rf'topic="{topic}"\}}'
    ) == 3  # fmt: skip
    assert value(
        r'rocketmq_rpc_latency_count\{protocol_type="grpc",request_code="SendMessage",'
        r'response_code="ok"\}'
    ) >= 3  # fmt: skip
    assert value(
        r'rocketmq_rpc_latency_count\{protocol_type="grpc",request_code="QueryRoute",'
        r'response_code="topic_not_found"\}'
    ) >= 1  # fmt: skip


def test_config_file_uses_rocketmq_key_names(tmp_path: Path) -> None:
    path = tmp_path / "rmq-proxy.json"
    path.write_text(json.dumps({
        "namesrvAddr": "10.0.0.1:9876;10.0.0.2:9876", "grpcServerPort": 18081,
        "proxyMode": "cluster", "remotingListenPort": 8080, "requestTimeout": 5000,
        "aclEnable": "false",
    }))  # fmt: skip
    config = load_config(path, keyed={"grpcServerPort": "0"})
    assert config.namesrv_addr == "10.0.0.1:9876;10.0.0.2:9876"
    assert config.grpc_server_port == 0  # the flag wins over the file
    assert config.request_timeout == 5.0 and not config.acl_enable

    path.write_text(json.dumps({"grpcServerPort": "eighty"}))
    with pytest.raises(ConfigError, match="grpcServerPort must be a int"):
        load_config(path)
    path.write_text(json.dumps({"proxyMode": "local"}))
    with pytest.raises(ConfigError, match="only 'cluster'"):
        load_config(path)
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="is not JSON"):
        load_config(path)
    with pytest.raises(ConfigError, match="no ACL accounts"):
        ProxyServer(ProxyConfig(acl_enable=True))


def test_command_prints_its_port_serves_and_stops_on_sigterm(proxy_cluster: BoltProcess) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "boltmq.cli", "proxy", "-n", proxy_cluster.registry,
         "--grpcServerPort", "0"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            if "proxy ready" in line:
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert ready.wait(30), "".join(lines)
        match = re.search(
            r"proxy ready: gRPC port (\d+) on 127\.0\.0\.1; registries: (\S+);", lines[-1]
        )
        assert match and match.group(2) == proxy_cluster.registry, lines[-1]
        assert "codecs: " in lines[-1]
        with grpc.insecure_channel(f"127.0.0.1:{match.group(1)}") as channel:
            route = channel.unary_unary(
                "/apache.rocketmq.v2.MessagingService/QueryRoute",
                request_serializer=spb.QueryRouteRequest.SerializeToString,
                response_deserializer=spb.QueryRouteResponse.FromString,
            )
            answer = route(
                spb.QueryRouteRequest(topic=pb.Resource(name="NoSuchTopicAtAll")),
                metadata=[("x-mq-client-id", "cli-test")], timeout=10,
            )  # fmt: skip
        assert answer.status.code == pb.TOPIC_NOT_FOUND
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert any("stopped" in line for line in lines), "".join(lines)


def test_command_refuses_bad_settings_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["proxy", "--grpcServerPort", "99999"]) == 2
    assert "grpcServerPort 99999 is not a port" in capsys.readouterr().err
    assert main(["proxy", "--aclEnable", "true", "--plainAclFile", "/nonexistent/acl.yml"]) == 2
    assert "/nonexistent/acl.yml" in capsys.readouterr().err
