"""A registry and a broker with TLS on their TCP listeners, driven by the project's client.

enforcing: a client with the CA sends and consumes, a plaintext client is refused (a log line,
the connection closed); permissive: a plaintext and a TLS client on the same ports both work;
a bad certificate path stops the start naming the key. Loopback, ephemeral ports, real stores
in tmp dirs, a deadline around every wait.
"""

from __future__ import annotations

import logging
import shutil
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from actors.broker.broker import Broker, open_broker
from actors.broker.config import BrokerConfig
from actors.registry import Registry, RegistryConfig, open_registry
from client import Message, MQClientError, Producer, PullConsumer
from protocol.bodies import ConsumeFromWhere
from tests.client.helpers import poll_until
from tests.client.test_websocket import make_certificates

pytestmark = pytest.mark.timeout(90)
Certificates = tuple[Path, Path, Path]


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    """(ca.pem, server.pem, server.key) for 127.0.0.1, made here."""
    if shutil.which("openssl") is None:
        pytest.fail("the TLS tests make their certificates with the openssl command; install it")
    return make_certificates(tmp_path_factory.mktemp("tls"))


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


@asynccontextmanager
async def tls_cluster(
    root: Path, certificates: Certificates, mode: str
) -> AsyncIterator[tuple[Registry, Broker]]:
    """A registry and a broker, both listening in ``mode``; the broker registers over TLS."""
    ca, cert, key = (str(path) for path in certificates)
    tls = {"tls_server_mode": mode, "tls_server_cert_path": cert, "tls_server_key_path": key}
    registry_config = RegistryConfig(
        listen_port=0, bind_address="127.0.0.1", kv_config_path=None, **tls
    )
    async with open_registry(registry_config) as registry:
        broker_config = BrokerConfig(
            listen_port=0,
            bind_address="127.0.0.1",
            fast_port_enable=False,
            store_path_root_dir=str(root / "store"),
            namesrv_addr=registry.address,
            mapped_file_size_commit_log=1 << 20,
            tls_enable=True,
            tls_client_trust_cert_path=ca,
            **tls,
        )
        async with open_broker(broker_config) as broker:
            with trio.fail_after(20):
                while not registry.actor.route_table.broker_addr_table:
                    await trio.sleep(0.02)
            yield registry, broker


async def send_and_consume(namesrv: str, ca: str | None) -> None:
    """One message sent and pulled back through ``namesrv`` (with TLS when ``ca`` is given)."""
    topic = unique("TlsTopic")
    async with Producer(unique("PG"), namesrv_addr=namesrv, tls_ca_file=ca) as producer:
        result = await producer.send(Message(topic, b"over tls", tags="T"))
    async with PullConsumer(
        unique("CG"),
        namesrv_addr=namesrv,
        tls_ca_file=ca,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    ) as consumer:
        with trio.fail_after(20):
            while await consumer.instance.update_route(topic) is None:
                await trio.sleep(0.05)
        await consumer.subscribe(topic)
        [got] = await poll_until(consumer, 1, timeout=20)
    assert (got.body, got.tags, got.msg_id) == (b"over tls", "T", result.msg_id)


async def test_enforcing_a_client_with_the_ca_sends_and_consumes(
    tmp_path: Path, certificates: Certificates, caplog: pytest.LogCaptureFixture
) -> None:
    async with tls_cluster(tmp_path, certificates, "enforcing") as (registry, broker):
        await send_and_consume(registry.address, str(certificates[0]))
        # Without TLS the registry closes the connection: the client gets no route.
        with caplog.at_level(logging.WARNING, "boltmq.remoting"), pytest.raises(MQClientError):
            async with Producer(unique("PG"), namesrv_addr=registry.address) as producer:
                with trio.fail_after(30):
                    await producer.send(Message(unique("T"), b"plaintext"))
        refused = [r.message for r in caplog.records if "refused a plaintext" in r.message]
        assert refused and "tlsServerMode is enforcing" in refused[0]
        # ... and still serves TLS clients.
        await send_and_consume(registry.address, str(certificates[0]))
        assert broker.registrar is not None and broker.registrar.registrations >= 1
        # boltmq admin: --tlsCaFile reaches the cluster; without TLS one line says it failed.
        admin = [sys.executable, "-m", "boltmq.cli", "admin", "clusterList", "-n", registry.address]
        with trio.fail_after(60):
            secure = await trio.run_process(
                [*admin, "--tlsCaFile", str(certificates[0]), "--json"],
                capture_stdout=True, capture_stderr=True, check=False,
            )  # fmt: skip
            plain = await trio.run_process(
                [*admin, "--timeout", "3"], capture_stdout=True, capture_stderr=True, check=False
            )
        assert secure.returncode == 0, secure.stderr
        assert broker.config.broker_name in secure.stdout.decode()
        [line] = plain.stderr.decode().strip().splitlines()
        assert plain.returncode != 0 and "add --tls or --tlsCaFile" in line, line


async def test_permissive_plaintext_and_tls_clients_share_the_ports(
    tmp_path: Path, certificates: Certificates
) -> None:
    async with tls_cluster(tmp_path, certificates, "permissive") as (registry, _broker):
        await send_and_consume(registry.address, None)
        await send_and_consume(registry.address, str(certificates[0]))


async def test_a_bad_certificate_path_stops_the_start_in_one_line_naming_the_key(
    tmp_path: Path, certificates: Certificates
) -> None:
    missing = tmp_path / "missing.pem"
    conf = tmp_path / "broker.conf"
    # RocketMQ's dotted key names work in the properties file.
    conf.write_text(
        f"tls.server.mode=enforcing\ntls.server.certPath={missing}\n"
        f"tls.server.keyPath={certificates[2]}\n"
    )
    runs = {
        "broker": ["broker", "-c", str(conf), "--listenPort", "0",
                   "--storePathRootDir", str(tmp_path / "store")],
        "registry": ["registry", "--listenPort", "0", "--tlsServerMode", "permissive",
                     "--tlsServerCertPath", str(certificates[1])],
    }  # fmt: skip
    for command, args in runs.items():
        with trio.fail_after(60):
            done = await trio.run_process(
                [sys.executable, "-m", "boltmq.cli", *args], capture_stderr=True, check=False
            )
        lines = done.stderr.decode().strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, (command, lines)
        expected = (
            f"tlsServerCertPath/tlsServerKeyPath: cannot load the certificate {missing}"
            if command == "broker"
            else "tlsServerKeyPath is not set"
        )
        assert expected in lines[0], lines
