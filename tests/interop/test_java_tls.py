"""RocketMQ's Java client over TLS with a client certificate (RocketMQ's tls.client.* system
properties) against a registry and a broker with tlsServerMode=enforcing and
tlsServerNeedClientAuth=require: with a certificate the trusted CA signed it sends and pulls;
without one it is refused at the handshake.

The client comes from the release named by BOLTMQ_ROCKETMQ_HOME (tests/interop/java_client.py;
skipped, saying so, without it). Loopback only, ephemeral ports, the CAs and certificates made
with openssl at test time, a deadline on every wait.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from pathlib import Path

import pytest

import boltmq
from tests.client.test_tls_client_auth import make_client_certificate
from tests.client.test_websocket import make_certificates

from .java_client import java_client, results, run_java

__all__ = ["java_client"]

pytestmark = pytest.mark.timeout(300)


async def test_java_client_with_a_client_certificate(
    tmp_path: Path, java_client: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    if shutil.which("openssl") is None:
        pytest.fail("the TLS tests make their certificates with the openssl command; install it")
    certs = tmp_path / "certs"
    certs.mkdir()
    ca, server_cert, server_key = make_certificates(certs)
    client_cert, client_key = make_client_certificate(certs, ca, certs / "ca.key", "client")
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"JavaTlsTopic_{suffix}", f"JavaTlsGroup_{suffix}"
    caplog.set_level(logging.WARNING, "boltmq.remoting")
    # RocketMQ's TlsSystemConfig: test mode (on by default) would trust anything and show no
    # certificate, so it is turned off.
    tls = {
        "tls.enable": "true",
        "tls.test.mode.enable": "false",
        "tls.client.authServer": "true",
        "tls.client.trustCertPath": str(ca),
    }
    async with boltmq.embedded(
        tmp_path / "data",
        tls_server_mode="enforcing",
        tls_server_cert_path=str(server_cert),
        tls_server_key_path=str(server_key),
        tls_server_need_client_auth="require",
        tls_server_trust_cert_path=str(ca),
        tls_enable=True,
        tls_client_trust_cert_path=str(ca),
        tls_client_cert_path=str(client_cert),
        tls_client_key_path=str(client_key),
    ) as cluster:
        namesrv = cluster.registry_address
        count = 10
        lines = await run_java(
            java_client, "produce-consume", namesrv, topic, group, str(count),
            properties={
                **tls,
                "tls.client.certPath": str(client_cert),
                "tls.client.keyPath": str(client_key),
            },
        )  # fmt: skip
        assert [status for status, _ in results(lines, "SENT")] == ["SEND_OK"] * count, lines
        bodies = sorted(fields[1].split(" ", 1)[1] for fields in results(lines, "RECEIVED"))
        assert bodies == sorted(f"java message {i}" for i in range(count)), lines

        # No certificate: the registry ends the handshake, so there is no route to send on
        # and no queue to pull from.
        caplog.clear()
        lines = await run_java(java_client, "refused", namesrv, topic, group, properties=tls)
        for kind in ("SEND_REFUSED", "PULL_REFUSED"):
            assert len(results(lines, kind)) == 1, lines
        assert not results(lines, "SEND_OK") and not results(lines, "PULL_OK"), lines
        failures = [
            r.getMessage() for r in caplog.records if "TLS handshake with" in r.getMessage()
        ]
        assert any("PEER_DID_NOT_RETURN_A_CERTIFICATE" in line for line in failures), failures
