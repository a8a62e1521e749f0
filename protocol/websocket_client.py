"""The client's websocket transport: wsproto (sans-IO) over an anyio byte stream.

One implementation for trio and asyncio alike: wsproto turns bytes into websocket events and
back, anyio moves the bytes (TCP, or TLS for ``wss://``). As on the server, one binary message
carries exactly one whole frame. trio-websocket stays the servers' library; it runs on trio
only, which is why the client does not use it.

    transport = await connect_websocket("ws://127.0.0.1:9877/", max_message_size=16 << 20)
"""

from __future__ import annotations

import ssl
from collections import deque
from collections.abc import Sequence
from urllib.parse import urlsplit

import anyio
import anyio.abc
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError

from protocol.frame import FrameError, FrameTooLargeError
from protocol.transport import Part, format_address

_RECEIVE_SIZE = 256 * 1024
_STREAM_ERRORS = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


class WebSocketHandshakeError(OSError):
    """The server did not accept the websocket upgrade (the message says what it answered)."""


def split_websocket_url(url: str) -> tuple[bool, str, int, str]:
    """(tls, host, port, path) of a ``ws://`` or ``wss://`` URL; ValueError when malformed."""
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss"):
        raise ValueError(f"{url!r} is not a ws:// or wss:// address")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise ValueError(f"websocket address {url!r} needs a host and a port: ws://host:port/")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return parts.scheme == "wss", parts.hostname, port, path


async def connect_websocket(
    url: str, max_message_size: int, *, ssl_context: ssl.SSLContext | None = None
) -> ClientWebSocketTransport:
    """Open a websocket to ``url`` and finish the upgrade; raises OSError when that fails.

    ``wss://`` verifies the server with ``ssl_context`` (the system CAs when None).
    """
    tls, host, port, path = split_websocket_url(url)
    if tls:
        context = ssl_context or ssl.create_default_context()
        stream: anyio.abc.ByteStream = await anyio.connect_tcp(
            host, port, ssl_context=context, tls_hostname=host, tls_standard_compatible=False
        )
    else:
        stream = await anyio.connect_tcp(host, port)
    ws = WSConnection(ConnectionType.CLIENT)
    try:
        await stream.send(ws.send(Request(host=format_address(host, port), target=path)))
        leftover = await _wait_accepted(stream, ws, url)
    except BaseException:
        await anyio.aclose_forcefully(stream)
        raise
    return ClientWebSocketTransport(
        stream, ws, format_address(host, port), max_message_size, leftover
    )


async def _wait_accepted(stream: anyio.abc.ByteStream, ws: WSConnection, url: str) -> list[bytes]:
    """Read until the server accepts; messages that came in the same read are returned."""
    early: list[bytes] = []
    while True:
        try:
            data: bytes | None = await stream.receive(_RECEIVE_SIZE)
        except _STREAM_ERRORS:
            data = None
        ws.receive_data(data)
        accepted = False
        for event in ws.events():
            if isinstance(event, AcceptConnection):
                accepted = True
            elif isinstance(event, RejectConnection):
                raise WebSocketHandshakeError(
                    f"{url} refused the websocket upgrade with HTTP {event.status_code}"
                )
            elif isinstance(event, RejectData):
                continue
            elif accepted and isinstance(event, BytesMessage) and event.message_finished:
                early.append(bytes(event.data))
        if accepted:
            return early
        if data is None:
            raise WebSocketHandshakeError(f"{url} closed the connection during the upgrade")


class ClientWebSocketTransport:
    """A remoting transport over a client websocket (trio or asyncio)."""

    message_framed = True

    def __init__(
        self,
        stream: anyio.abc.ByteStream,
        ws: WSConnection,
        peer: str,
        max_message_size: int,
        early: list[bytes] | None = None,
    ) -> None:
        self._stream = stream
        self._ws = ws
        self.peer = peer
        self._max_message_size = max_message_size
        self._messages: deque[bytes] = deque(early or ())
        self._partial = bytearray()
        self._ended = False
        self._send_lock = anyio.Lock()
        #: Why the server closed the websocket (code and reason), once it did.
        self.close_reason: str | None = None

    async def receive_some(self) -> bytes | bytearray:
        """The next whole frame; empty once the server closed the websocket or the stream."""
        while not self._messages:
            if self._ended:
                return b""
            try:
                data: bytes | None = await self._stream.receive(_RECEIVE_SIZE)
            except _STREAM_ERRORS:
                data = None
            if data is None:
                self._ended = True
            try:
                self._ws.receive_data(data)
            except LocalProtocolError:
                self._ended = True
                return b""
            await self._handle_events()
        return self._messages.popleft()

    async def _handle_events(self) -> None:
        for event in self._ws.events():
            if isinstance(event, BytesMessage):
                self._partial += event.data
                if len(self._partial) > self._max_message_size:
                    raise FrameTooLargeError(
                        f"websocket message of more than {self._max_message_size} bytes"
                    )
                if event.message_finished:
                    self._messages.append(bytes(self._partial))
                    self._partial.clear()
            elif isinstance(event, TextMessage):
                raise FrameError("a text websocket message cannot carry a frame")
            elif isinstance(event, Ping):
                await self._send_raw(self._ws.send(event.response()))
            elif isinstance(event, CloseConnection):
                self.close_reason = f"websocket closed by the server ({event.code} {event.reason})"
                self._ended = True
                if self._ws.state is ConnectionState.REMOTE_CLOSING:
                    try:
                        await self._send_raw(self._ws.send(event.response()))
                    except _STREAM_ERRORS:
                        pass

    async def send_frames(self, frames: Sequence[Sequence[Part]]) -> None:
        """Each frame as one binary message, all in one write."""
        ws = self._ws
        try:
            data = b"".join(
                ws.send(Message(data=bytes(frame[0]) if len(frame) == 1 else b"".join(frame)))
                for frame in frames
            )
        except LocalProtocolError as exc:
            raise anyio.ClosedResourceError(f"websocket is closing: {exc}") from None
        await self._send_raw(data)

    async def _send_raw(self, data: bytes) -> None:
        async with self._send_lock:
            await self._stream.send(data)

    async def aclose(self) -> None:
        """Say goodbye (a close message) when the websocket is still open, then close."""
        try:
            if self._ws.state is ConnectionState.OPEN:
                with anyio.move_on_after(1):
                    await self._send_raw(self._ws.send(CloseConnection(code=1000)))
        except (*_STREAM_ERRORS, LocalProtocolError):
            pass
        finally:
            await anyio.aclose_forcefully(self._stream)
