"""TLS on the remoting server's TCP listener (tlsServerMode) and the client's TLS dialing, on
trio and on asyncio: enforcing refuses plaintext, permissive serves both on one port.

The server runs in a thread of its own on a loopback ephemeral port; the CA and the server
certificate are made with openssl; every wait has a deadline.
"""

from __future__ import annotations

import logging
import shutil
import ssl
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from protocol.client import RemotingClient
from protocol.command import ConnectionClosedError, RemotingCommand
from protocol.server import ServerConfig
from protocol.tls import TlsConfigError, tcp_server_ssl_context
from tests.client.test_websocket import make_certificates
from tests.support.waiting import wait_until_sync

from .helpers import echo, serve_in_thread

ECHO = 9201
BACKENDS = pytest.mark.parametrize("backend", ["trio", "asyncio"])


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(ca.pem, server.pem, server.key) for 127.0.0.1, made here."""
    if shutil.which("openssl") is None:
        pytest.fail("the TLS tests make their certificates with the openssl command; install it")
    return make_certificates(tmp_path_factory.mktemp("tls"))


def serve(context: ssl.SSLContext | None, mode: str) -> Iterator[str]:
    """``127.0.0.1:port`` of an echo server in ``mode``, in a thread of its own."""
    config = ServerConfig(tls_mode=mode, tls_context=context)
    for port in serve_in_thread({ECHO: echo}, config=config):
        yield f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def enforcing(certificates: tuple[Path, Path, Path]) -> Iterator[str]:
    _, cert, key = certificates
    yield from serve(tcp_server_ssl_context("enforcing", str(cert), str(key)), "enforcing")


@pytest.fixture(scope="module")
def permissive(certificates: tuple[Path, Path, Path]) -> Iterator[str]:
    _, cert, key = certificates
    yield from serve(tcp_server_ssl_context("permissive", str(cert), str(key)), "permissive")


@pytest.fixture(scope="module")
def mutual(certificates: tuple[Path, Path, Path]) -> Iterator[str]:
    ca, cert, key = certificates
    context = tcp_server_ssl_context("enforcing", str(cert), str(key), str(ca), "require")
    yield from serve(context, "enforcing")


def run(backend: str, test: Callable[[], Awaitable[Any]]) -> Any:
    async def bounded() -> Any:
        with anyio.fail_after(30):
            return await test()

    return anyio.run(bounded, backend=backend)


async def echo_calls(client: RemotingClient, address: str, count: int) -> list[bytes]:
    """``count`` echo calls in flight at once; their answers' bodies in order."""
    answers: list[bytes] = [b""] * count

    async def one(i: int) -> None:
        body = f"call-{i}-".encode() * 2000  # ~16 KB: frames span TLS records
        answer = await client.invoke(address, RemotingCommand.request(ECHO, body=body), 20)
        answers[i] = answer.body or b""

    async with anyio.create_task_group() as tg:
        for i in range(count):
            tg.start_soon(one, i)
    return answers


@BACKENDS
def test_enforcing_serves_a_tls_client_with_the_ca(
    enforcing: str, certificates: tuple[Path, Path, Path], backend: str
) -> None:
    ca = str(certificates[0])

    async def test() -> None:
        async with RemotingClient(tls_ca_file=ca) as client:
            answers = await echo_calls(client, enforcing, 20)
        assert answers == [f"call-{i}-".encode() * 2000 for i in range(20)]

    run(backend, test)


@BACKENDS
def test_enforcing_closes_a_plaintext_client_and_logs_it(
    enforcing: str, backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def test() -> None:
        async with RemotingClient() as client:
            with pytest.raises((ConnectionClosedError, TimeoutError)):
                await client.invoke(enforcing, RemotingCommand.request(ECHO, body=b"x"), 10)

    with caplog.at_level(logging.WARNING, "boltmq.remoting"):
        run(backend, test)
        # The server's line comes from its own thread: poll for it with a deadline.
        wait_until_sync(
            lambda: any("refused a plaintext" in r.message for r in caplog.records),
            10,
            "the refusal logged",
            interval=0.01,
        )
    line = next(r.message for r in caplog.records if "refused a plaintext" in r.message)
    assert "tlsServerMode is enforcing" in line


@BACKENDS
def test_a_client_that_does_not_trust_the_server_fails_to_connect(
    enforcing: str, backend: str
) -> None:
    async def test() -> None:
        async with RemotingClient(tls=True) as client:  # the system CAs: no test CA among them
            with pytest.raises(ConnectionClosedError, match="CERTIFICATE_VERIFY_FAILED"):
                await client.invoke(enforcing, RemotingCommand.request(ECHO, body=b"x"), 10)

    run(backend, test)


@BACKENDS
def test_permissive_serves_plaintext_and_tls_clients_on_one_port(
    permissive: str, certificates: tuple[Path, Path, Path], backend: str
) -> None:
    ca = str(certificates[0])

    async def test() -> None:
        async with RemotingClient() as plain, RemotingClient(tls_ca_file=ca) as secure:
            both = await echo_calls(plain, permissive, 10), await echo_calls(secure, permissive, 10)
        expected = [f"call-{i}-".encode() * 2000 for i in range(10)]
        assert both == (expected, expected)

    run(backend, test)


def test_client_auth_require_refuses_a_client_without_a_certificate(
    mutual: str, certificates: tuple[Path, Path, Path]
) -> None:
    ca = str(certificates[0])

    async def test() -> None:
        async with RemotingClient(tls_ca_file=ca) as client:
            with pytest.raises((ConnectionClosedError, TimeoutError)):
                await client.invoke(mutual, RemotingCommand.request(ECHO, body=b"x"), 10)

    run("trio", test)


def test_bad_tls_settings_name_the_key(
    certificates: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    _, cert, key = certificates
    with pytest.raises(TlsConfigError, match="tlsServerMode is 'strict'; use one of disabled"):
        tcp_server_ssl_context("strict", str(cert), str(key))
    with pytest.raises(TlsConfigError, match="tlsServerKeyPath is not set"):
        tcp_server_ssl_context("enforcing", str(cert), "")
    missing = tmp_path / "missing.pem"
    with pytest.raises(TlsConfigError, match=f"tlsServerCertPath.*{missing}"):
        tcp_server_ssl_context("permissive", str(missing), str(key))
    with pytest.raises(TlsConfigError, match="tlsServerTrustCertPath is not set"):
        tcp_server_ssl_context("enforcing", str(cert), str(key), "", "require")
    assert tcp_server_ssl_context("disabled", "", "") is None
    with pytest.raises(TlsConfigError, match="cannot load the CA file"):
        RemotingClient(tls_ca_file=str(missing))
