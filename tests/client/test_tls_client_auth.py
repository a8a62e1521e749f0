"""Client certificates (tlsServerNeedClientAuth=require) on a registry and a broker that
enforce TLS: a client whose certificate the trusted CA signed sends and pulls; a client with
no certificate, or with one from another CA, is refused at the handshake.

The broker registers with the registry over TLS with its own client certificate
(tlsEnable, tlsClientCertPath), so that path is exercised too. Loopback only, ephemeral ports,
the CAs and certificates made with openssl at test time, a deadline on every wait.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import boltmq
from boltmq import cli
from client import Message, MQClientError, Producer, PullConsumer, SendStatus
from tests.client.test_websocket import make_certificates

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """`boltmq admin` configures the root logger; put it back for the tests after this one."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def make_client_certificate(
    directory: Path, ca: Path, ca_key: Path, name: str
) -> tuple[Path, Path]:
    """A client certificate (extendedKeyUsage clientAuth) signed by ``ca``: (cert, key)."""
    key, csr, cert = (directory / f"{name}{suffix}" for suffix in (".key", ".csr", ".pem"))
    ext = directory / f"{name}.ext"
    ext.write_text(
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=clientAuth\n"
    )
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    steps = [
        ["req", *ec, "-subj", f"/CN={name}", "-keyout", key, "-out", csr],
        ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
         "-days", "2", "-out", cert, "-extfile", ext],
    ]  # fmt: skip
    for step in steps:
        subprocess.run(["openssl", *map(str, step)], check=True, capture_output=True, timeout=60)
    return cert, key


def make_ca(directory: Path) -> tuple[Path, Path]:
    """A self-signed CA of its own: (ca.pem, ca.key)."""
    directory.mkdir()
    ca, ca_key = directory / "ca.pem", directory / "ca.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "2", "-subj", "/CN=Another CA", "-keyout", str(ca_key),
         "-out", str(ca), "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return ca, ca_key


async def test_require_serves_a_client_certificate_and_refuses_the_others(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    restore_logging: None,
) -> None:
    if shutil.which("openssl") is None:
        pytest.fail("the TLS tests make their certificates with the openssl command; install it")
    certs = tmp_path / "certs"
    certs.mkdir()
    ca, server_cert, server_key = make_certificates(certs)
    client_cert, client_key = make_client_certificate(certs, ca, certs / "ca.key", "client")
    other_ca, other_ca_key = make_ca(tmp_path / "other")
    stranger_cert, stranger_key = make_client_certificate(
        tmp_path / "other", other_ca, other_ca_key, "stranger"
    )
    topic = "MutualTlsTopic"
    caplog.set_level(logging.WARNING, "boltmq.remoting")
    async with boltmq.embedded(
        tmp_path / "data",
        tls_server_mode="enforcing",
        tls_server_cert_path=str(server_cert),
        tls_server_key_path=str(server_key),
        tls_server_need_client_auth="require",
        tls_server_trust_cert_path=str(ca),
        # The broker's own calls (its registration) show the client certificate too.
        tls_enable=True,
        tls_client_trust_cert_path=str(ca),
        tls_client_cert_path=str(client_cert),
        tls_client_key_path=str(client_key),
    ) as cluster:
        namesrv = cluster.registry_address
        with trio.fail_after(60):
            async with Producer(
                "MutualTlsProducers",
                namesrv_addr=namesrv,
                tls_ca_file=str(ca),
                tls_cert_file=str(client_cert),
                tls_key_file=str(client_key),
            ) as producer:
                for i in range(5):
                    result = await producer.send(Message(topic, f"mutual {i}".encode()))
                    assert result.status == SendStatus.SEND_OK
            async with PullConsumer(
                "MutualTlsConsumers",
                namesrv_addr=namesrv,
                tls_ca_file=str(ca),
                tls_cert_file=str(client_cert),
                tls_key_file=str(client_key),
            ) as consumer:
                queues = await consumer.subscribe(topic)
                for queue in queues:
                    await consumer.seek_to_begin(queue)
                bodies: list[bytes] = []
                while len(bodies) < 5:
                    bodies += [message.body for message in await consumer.poll(5)]
        assert sorted(bodies) == [f"mutual {i}".encode() for i in range(5)]

        # No certificate, or one another CA signed: the handshake fails, nothing is served.
        for cert, key, reason in (
            ("", "", "PEER_DID_NOT_RETURN_A_CERTIFICATE"),
            (str(stranger_cert), str(stranger_key), "CERTIFICATE_VERIFY_FAILED"),
        ):
            caplog.clear()
            with trio.fail_after(60):
                async with Producer(
                    "MutualTlsRefused",
                    namesrv_addr=namesrv,
                    tls_ca_file=str(ca),
                    tls_cert_file=cert,
                    tls_key_file=key,
                    retry_times_when_send_failed=0,
                ) as refused:
                    with pytest.raises(MQClientError, match=r"no registry answered.*closed"):
                        await refused.send(Message(topic, b"must not arrive"))
            lines = [r.getMessage() for r in caplog.records]
            assert any(
                "TLS handshake with 127.0.0.1:" in line
                and reason in line
                and "tlsServerTrustCertPath" in line
                for line in lines
            ), lines

        # boltmq admin: --tlsCertFile/--tlsKeyFile show the certificate; without, a hint.
        route = ["admin", "topicRoute", "-n", namesrv, "-t", topic, "--tlsCaFile", str(ca)]
        mine = ["--tlsCertFile", str(client_cert), "--tlsKeyFile", str(client_key)]
        capsys.readouterr()
        with trio.fail_after(60):
            code = await trio.to_thread.run_sync(cli.main, [*route, *mine])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert cluster.broker.config.broker_name in out, out
        with trio.fail_after(60):
            code = await trio.to_thread.run_sync(cli.main, route)
        out, err = capsys.readouterr()
        assert code != 0
        assert "tlsServerNeedClientAuth" in err and "--tlsCertFile" in err, err
