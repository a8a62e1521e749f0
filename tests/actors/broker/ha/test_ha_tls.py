"""Master/slave replication over TLS: the master's HA port in tlsServerMode enforcing, the slave
dialing it with tlsEnable and the test CA; a plaintext slave gets no link.

Real registry, master and slave on loopback (all enforcing, the certificate made with openssl),
64 KiB commit-log files; every wait has a deadline.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
import trio

from actors.broker.broker import open_broker
from actors.registry import RegistryConfig, open_registry
from protocol import RemotingClient, ResponseCode
from storage import BrokerRole
from tests.actors.broker.ha.helpers import (
    broker_config,
    commit_log_bytes,
    master_service,
    running_slave,
    wait_caught_up,
    wait_for,
    wait_slave_linked,
)
from tests.actors.broker.ha.test_replication import send_many
from tests.client.test_websocket import make_certificates

Certificates = tuple[Path, Path, Path]


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    """(ca.pem, server.pem, server.key) for 127.0.0.1, made here."""
    if shutil.which("openssl") is None:
        pytest.fail("the TLS tests make their certificates with the openssl command; install it")
    return make_certificates(tmp_path_factory.mktemp("tls"))


def tls_settings(certificates: Certificates, *, client: bool = True) -> dict[str, Any]:
    """Listen in enforcing mode; with ``client``, dial peers with TLS checked against the CA."""
    ca, cert, key = (str(path) for path in certificates)
    settings: dict[str, Any] = {
        "tls_server_mode": "enforcing",
        "tls_server_cert_path": cert,
        "tls_server_key_path": key,
    }
    if client:
        settings.update(tls_enable=True, tls_client_trust_cert_path=ca)
    return settings


async def test_sync_master_replicates_to_its_slave_over_tls(
    tmp_path: Path, certificates: Certificates
) -> None:
    tls = tls_settings(certificates)
    server_only = {k: v for k, v in tls.items() if k.startswith("tls_server")}
    registry_config = RegistryConfig(
        listen_port=0, bind_address="127.0.0.1", kv_config_path=None, **server_only
    )
    async with (
        open_registry(registry_config) as registry,
        RemotingClient(tls_ca_file=str(certificates[0])) as client,
    ):
        config = broker_config(tmp_path / "master", registry.address, BrokerRole.SYNC_MASTER, **tls)
        async with (
            open_broker(config) as master,
            running_slave(tmp_path / "slave", registry.address, **tls) as slave,
        ):
            with trio.fail_after(30):
                await wait_slave_linked(master)
            [link] = master_service(master).connections.values()
            assert isinstance(link.stream, trio.SSLStream)
            codes = await send_many(client, master, 120)
            # SYNC_MASTER: each SUCCESS was acknowledged by the slave over the TLS link.
            assert codes == [ResponseCode.SUCCESS] * 120
            await wait_caught_up(master, slave)
            assert commit_log_bytes(slave.store) == commit_log_bytes(master.store)
            # Broker to broker over TLS: the slave copies the master's config tables.
            assert slave.ha.sync is not None
            with trio.fail_after(30):
                assert await slave.ha.sync.sync_all()
            assert "Replicated" in slave.topics.topic_config_table


async def test_a_plaintext_slave_gets_no_link_to_an_enforcing_master(
    tmp_path: Path, certificates: Certificates, caplog: pytest.LogCaptureFixture
) -> None:
    master_config = broker_config(
        tmp_path / "master", "", BrokerRole.ASYNC_MASTER, **tls_settings(certificates)
    )
    async with open_broker(master_config) as master:
        with caplog.at_level(logging.WARNING, "boltmq.remoting"):
            async with running_slave(
                tmp_path / "slave", "", ha_master_address=master.config.ha_addr
            ) as slave:
                client = slave.ha.client
                assert client is not None
                await wait_for(
                    lambda: (
                        client.dropped_links >= 1
                        and any("HA: refused a plaintext" in r.message for r in caplog.records)
                    ),
                    timeout=30,
                )
                assert not master_service(master).connections
