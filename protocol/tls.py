"""TLS for the listeners and the clients that dial them: websocket (``wss://``) and TCP.

A TCP listener runs in one of RocketMQ's ``tls.server.mode`` modes: ``disabled`` (plaintext
only, the default), ``permissive`` (one port serves both: a connection whose first byte is 0x16,
a TLS handshake record, gets TLS; any other byte is a plaintext remoting frame) or
``enforcing`` (TLS only; a plaintext connection is closed and logged). No plaintext peer can
start with 0x16: a remoting frame would need a length of 369 MB or more, an HA offset report an
offset of 2^60 bytes.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from typing import Final

import trio

from protocol.transport import format_address

log = logging.getLogger("boltmq.remoting")

TLS_MODES: Final = ("disabled", "permissive", "enforcing")
#: RocketMQ's tls.server.need.client.auth values.
CLIENT_AUTH_MODES: Final = ("none", "optional", "require")
#: The first byte of a TLS record carrying a handshake (a ClientHello opens with one).
TLS_HANDSHAKE_RECORD: Final = 0x16
#: Seconds an accepted connection has to send its first byte and finish the TLS handshake.
HANDSHAKE_TIMEOUT: Final = 10.0


def one_of(key: str, choices: tuple[str, ...]) -> Callable[[object, object, str], None]:
    """An attrs validator refusing a value outside ``choices`` in one line naming ``key``."""

    def check(_instance: object, _attribute: object, value: str) -> None:
        if value not in choices:
            raise ValueError(f"{key} is {value!r}; use one of {', '.join(choices)}")

    return check


class TlsConfigError(ValueError):
    """A certificate, key or CA file that cannot be used; the message says which and why."""


def server_ssl_context(cert_path: str, key_path: str) -> ssl.SSLContext | None:
    """A server context from PEM files, or None when no certificate is configured.

    Raises `TlsConfigError` naming the setting when one is missing or a file cannot be loaded.
    """
    if not cert_path and not key_path:
        return None
    if not cert_path or not key_path:
        missing = "websocketTlsCertPath" if not cert_path else "websocketTlsKeyPath"
        raise TlsConfigError(
            f"{missing} is not set: wss:// needs both websocketTlsCertPath and "
            "websocketTlsKeyPath (PEM files)"
        )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert_path, key_path)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(
            f"cannot load the websocket TLS certificate {cert_path} with key {key_path}: {exc}"
        ) from None
    return context


def tcp_server_ssl_context(
    mode: str,
    cert_path: str,
    key_path: str,
    trust_cert_path: str = "",
    need_client_auth: str = "none",
) -> ssl.SSLContext | None:
    """The context for a TCP listener in ``mode`` (tlsServerMode); None when disabled.

    Raises `TlsConfigError` naming the key (tlsServerCertPath, ...) that is missing or bad.
    """
    if mode not in TLS_MODES:
        raise TlsConfigError(f"tlsServerMode is {mode!r}; use one of {', '.join(TLS_MODES)}")
    if need_client_auth not in CLIENT_AUTH_MODES:
        raise TlsConfigError(
            f"tlsServerNeedClientAuth is {need_client_auth!r}; use one of "
            f"{', '.join(CLIENT_AUTH_MODES)}"
        )
    if mode == "disabled":
        return None
    for key, value in (("tlsServerCertPath", cert_path), ("tlsServerKeyPath", key_path)):
        if not value:
            raise TlsConfigError(
                f"{key} is not set: tlsServerMode={mode} needs tlsServerCertPath and "
                "tlsServerKeyPath (PEM files)"
            )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert_path, key_path)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(
            f"tlsServerCertPath/tlsServerKeyPath: cannot load the certificate {cert_path} "
            f"with key {key_path}: {exc}"
        ) from None
    if need_client_auth != "none":
        if not trust_cert_path:
            raise TlsConfigError(
                f"tlsServerTrustCertPath is not set: tlsServerNeedClientAuth={need_client_auth} "
                "needs the CAs (PEM) that client certificates are checked against"
            )
        try:
            context.load_verify_locations(cafile=trust_cert_path)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(
                f"tlsServerTrustCertPath: cannot load {trust_cert_path}: {exc}"
            ) from None
        context.verify_mode = (
            ssl.CERT_REQUIRED if need_client_auth == "require" else ssl.CERT_OPTIONAL
        )
    return context


def client_ssl_context(
    ca_file: str | None = None, cert_path: str = "", key_path: str = ""
) -> ssl.SSLContext:
    """A client context that verifies the server against ``ca_file`` (PEM) or the system CAs,
    presenting ``cert_path``/``key_path`` when given (for tlsServerNeedClientAuth).

    Raises `TlsConfigError` when a file cannot be loaded.
    """
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"cannot load the CA file {ca_file} for TLS: {exc}") from None
    if cert_path or key_path:
        try:
            context.load_cert_chain(cert_path, key_path or None)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(
                f"cannot load the client certificate {cert_path} with key {key_path}: {exc}"
            ) from None
    return context


class ReplayStream(trio.abc.Stream):
    """A stream whose first receive returns bytes already read from it (the peeked prefix)."""

    def __init__(self, stream: trio.SocketStream, prefix: bytes) -> None:
        self.transport_stream = stream
        self.socket = stream.socket
        self._prefix = prefix

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self._prefix:
            if max_bytes is None or max_bytes >= len(self._prefix):
                data, self._prefix = self._prefix, b""
            else:
                data, self._prefix = self._prefix[:max_bytes], self._prefix[max_bytes:]
            return data
        return await self.transport_stream.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.transport_stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self.transport_stream.send_eof()

    async def aclose(self) -> None:
        await self.transport_stream.aclose()


async def accept_tls(
    stream: trio.SocketStream, mode: str, context: ssl.SSLContext, what: str = "remoting"
) -> trio.abc.Stream | None:
    """The stream to serve an accepted connection on: TLS, or plaintext in permissive mode.

    Returns None (the connection closed and a line logged) when the peer sends plaintext to an
    enforcing listener, fails the handshake or stays silent for `HANDSHAKE_TIMEOUT` seconds.
    """
    peer = _peer(stream)
    with trio.move_on_after(HANDSHAKE_TIMEOUT) as deadline:
        try:
            first = await stream.receive_some(4096)
            if not first:
                await stream.aclose()
                return None
            replay = ReplayStream(stream, first)
            if first[0] != TLS_HANDSHAKE_RECORD:
                if mode == "permissive":
                    return replay
                log.warning(
                    "%s: refused a plaintext connection from %s: tlsServerMode is enforcing "
                    "(the client must use TLS)",
                    what,
                    peer,
                )
                await stream.aclose()
                return None
            secure = trio.SSLStream(replay, context, server_side=True)
            await secure.do_handshake()
            return secure
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            reason = exc.__cause__ or exc
            hint = ""
            if context.verify_mode != ssl.CERT_NONE and "CERTIFICATE" in str(reason).upper():
                hint = (
                    " (tlsServerNeedClientAuth: the client must present a certificate that a CA "
                    "of tlsServerTrustCertPath signed)"
                )
            log.warning("%s: TLS handshake with %s failed: %s%s", what, peer, reason, hint)
    if deadline.cancelled_caught:
        log.warning("%s: no TLS handshake from %s within %.0f s", what, peer, HANDSHAKE_TIMEOUT)
    await trio.aclose_forcefully(stream)
    return None


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
    except OSError:
        return "unknown"
    return format_address(host, port)
