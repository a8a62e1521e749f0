"""``boltmqs://``: the kombu transport over TLS to a registry and a broker that enforce it.

An embedded cluster in this test's trio loop (TLS enforcing, certificates made with openssl
at test time); kombu's blocking calls run in a worker thread so the cluster goes on serving.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import trio
from kombu import Connection

import boltmq
from boltmq.kombu import RegistryUnreachable
from tests.celery.helpers import unique_queue
from tests.client.test_websocket import make_certificates


async def test_boltmqs_sends_and_receives_over_tls(tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.fail("the TLS test makes its certificates with the openssl command; install it")
    certs = tmp_path / "certs"
    certs.mkdir()
    ca, server_cert, server_key = make_certificates(certs)
    async with boltmq.embedded(
        tmp_path / "data",
        tls_server_mode="enforcing",
        tls_server_cert_path=str(server_cert),
        tls_server_key_path=str(server_key),
        tls_enable=True,  # the broker registers over TLS too
        tls_client_trust_cert_path=str(ca),
    ) as cluster:
        url = f"boltmqs://{cluster.registry_address}"

        def round_trip() -> object:
            with Connection(url, transport_options={"tls_ca_file": str(ca)}) as conn:
                queue = conn.SimpleQueue(unique_queue("tls"))
                queue.put({"over": "tls"})
                message = queue.get(timeout=20)
                message.ack()
                queue.close()
                assert conn.transport.bridge.settings.options.tls is True
                return message.payload

        def plaintext_refused() -> str:
            plain = Connection(f"boltmq://{cluster.registry_address}")
            with pytest.raises(RegistryUnreachable) as refused:
                plain.connect()
            return str(refused.value)

        with trio.fail_after(60):
            assert await trio.to_thread.run_sync(round_trip) == {"over": "tls"}
            refusal = await trio.to_thread.run_sync(plaintext_refused)
        assert f"no BoltMQ registry answers at {cluster.registry_address}" in refusal
