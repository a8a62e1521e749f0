"""Thin byte transports under a remoting `Connection`: TCP (trio or anyio) and websocket.

A transport moves bytes; framing lives in `protocol.frame` and request handling in
`protocol.connection`. TCP delivers an arbitrary chunk per receive and takes many frames per
send; websocket delivers exactly one frame per message and sends one frame per message.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections import deque
from collections.abc import Sequence
from typing import Protocol

import anyio
import anyio.abc
import sniffio
import trio
from anyio.streams.tls import TLSStream

Part = bytes | bytearray | memoryview


class FrameTransport(Protocol):
    """What a `Connection` needs from a transport."""

    #: True when every received chunk is exactly one whole frame (websocket messages).
    message_framed: bool
    #: The peer as ``host:port``.
    peer: str

    async def receive_some(self) -> bytes | bytearray:
        """Next chunk of bytes; empty at end of stream."""
        ...

    async def send_frames(self, frames: Sequence[Sequence[Part]]) -> None:
        """Send whole frames, each given as its parts, in order."""
        ...

    async def aclose(self) -> None:
        """Close the transport; further calls fail."""
        ...


def format_address(host: str, port: int) -> str:
    """``host:port`` with IPv4-mapped IPv6 addresses shown as IPv4 (RocketMQ peers expect it)."""
    if host.startswith("::ffff:") and "." in host:
        host = host[7:]
    if ":" in host:
        return f"[{host}]:{port}"
    return f"{host}:{port}"


def parse_address(address: str) -> tuple[str, int]:
    """Split ``host:port`` (or ``[v6]:port``) into its parts; raises ValueError when malformed."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address {address!r} is not host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def _join(frames: Sequence[Sequence[Part]]) -> bytes:
    # One send per batch: trio and anyio both pay per send call, so coalesce.
    if len(frames) == 1 and len(frames[0]) == 1:
        only = frames[0][0]
        return only if isinstance(only, bytes) else bytes(only)
    return b"".join([part for frame in frames for part in frame])


class TrioStreamTransport:
    """TCP over a `trio.SocketStream`, or a TLS stream over one given with its ``peer``
    (the servers' transport)."""

    message_framed = False

    def __init__(
        self,
        stream: trio.SocketStream | trio.abc.Stream,
        receive_size: int = 256 * 1024,
        *,
        peer: str | None = None,
    ) -> None:
        self._stream = stream
        self._receive_size = receive_size
        if peer is not None:
            self.peer = peer
            return
        try:
            assert isinstance(stream, trio.SocketStream)
            name = stream.socket.getpeername()
            self.peer = format_address(name[0], name[1])
        except OSError:
            self.peer = "unknown"

    async def receive_some(self) -> bytes | bytearray:
        try:
            return await self._stream.receive_some(self._receive_size)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return b""

    async def send_frames(self, frames: Sequence[Sequence[Part]]) -> None:
        await self._stream.send_all(_join(frames))

    async def aclose(self) -> None:
        await self._stream.aclose()


class TrioSocketTransport:
    """Plain TCP over a `trio.SocketStream`'s socket, read and written by its descriptor
    (the servers' transport when TLS is off).

    `trio.SocketStream` yields to the scheduler after every send, and wraps each call in a
    conflict detector and an error-translating context: per request answered that was more
    than a tenth of a broker's single send. Here a send that the kernel takes whole returns
    without yielding (the connection's reader yields in its next receive anyway), and a
    receive yields once, as trio's does, so one connection cannot starve the others.
    """

    message_framed = False

    def __init__(self, stream: trio.SocketStream, receive_size: int = 256 * 1024) -> None:
        self._stream = stream
        self._fd = stream.socket.fileno()
        self._receive_size = receive_size
        try:
            name = stream.socket.getpeername()
            self.peer = format_address(name[0], name[1])
        except OSError:
            self.peer = "unknown"

    async def receive_some(self) -> bytes | bytearray:
        fd = self._fd
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
            try:
                data = os.read(fd, self._receive_size)
            except BlockingIOError:
                while True:
                    await trio.lowlevel.wait_readable(fd)
                    try:
                        return os.read(fd, self._receive_size)
                    except BlockingIOError:
                        pass
            await trio.lowlevel.cancel_shielded_checkpoint()
            return data
        except (OSError, trio.ClosedResourceError):
            return b""  # reset or closed: the end of the stream, as for TrioStreamTransport

    async def send_frames(self, frames: Sequence[Sequence[Part]]) -> None:
        fd = self._fd
        if fd < 0:
            raise trio.ClosedResourceError("the connection's socket is closed")
        await trio.lowlevel.checkpoint_if_cancelled()
        data = _join(frames)
        try:
            sent = os.write(fd, data)
        except BlockingIOError:
            sent = 0  # the socket's buffer is full: wait below
        if sent == len(data):
            return
        with memoryview(data) as view:
            while sent < len(view):
                await trio.lowlevel.wait_writable(fd)
                try:
                    sent += os.write(fd, view[sent:])
                except BlockingIOError:
                    pass

    async def aclose(self) -> None:
        self._fd = -1
        await self._stream.aclose()


class AnyioStreamTransport:
    """TCP over an anyio byte stream (the client's transport on trio or asyncio)."""

    message_framed = False

    def __init__(
        self, stream: anyio.abc.ByteStream, peer: str, receive_size: int = 256 * 1024
    ) -> None:
        self._stream = stream
        self._receive_size = receive_size
        self.peer = peer

    async def receive_some(self) -> bytes | bytearray:
        try:
            return await self._stream.receive(self._receive_size)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return b""

    async def send_frames(self, frames: Sequence[Sequence[Part]]) -> None:
        try:
            await self._stream.send(_join(frames))
        except anyio.EndOfStream:
            # A TLS stream whose peer closed (a refused client certificate, say).
            raise anyio.BrokenResourceError("the peer closed the TLS connection") from None

    async def aclose(self) -> None:
        await self._stream.aclose()


class _FrameProtocol(asyncio.Protocol):
    """asyncio's callbacks for `AsyncioTransport`: received chunks queued, one waiter woken."""

    def __init__(self) -> None:
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.reading_paused = False
        self.closed = False
        self.waiter: asyncio.Future[None] | None = None
        self.writable: asyncio.Future[None] | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self.buffered += len(data)
        if self.buffered > _READ_PAUSE_BYTES and self.transport is not None:
            # The reader fell behind (the connection applies backpressure): stop reading.
            self.reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._wake()
        self.resume_writing()

    def pause_writing(self) -> None:
        if self.writable is None:
            self.writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        writable, self.writable = self.writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


#: Bytes received and not yet taken after which `AsyncioTransport` stops reading the socket.
_READ_PAUSE_BYTES = 8 * 1024 * 1024


class AsyncioTransport:
    """Plain TCP straight on an asyncio transport (the client's transport under asyncio).

    anyio's asyncio stream resumes and pauses reading around every receive (two epoll
    changes) and yields to the loop after every send; a connection that already coalesces
    its frames needs neither, and per request they cost more than the frame codec.
    """

    message_framed = False

    def __init__(self, transport: asyncio.Transport, protocol: _FrameProtocol, peer: str) -> None:
        self._transport = transport
        self._protocol = protocol
        self.peer = peer

    async def receive_some(self) -> bytes | bytearray:
        protocol = self._protocol
        chunks = protocol.chunks
        while not chunks:
            if protocol.closed:
                return b""
            waiter = protocol.waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                protocol.waiter = None
        data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        protocol.buffered = 0
        if protocol.reading_paused:
            protocol.reading_paused = False
            self._transport.resume_reading()
        return data

    async def send_frames(self, frames: Sequence[Sequence[Part]]) -> None:
        protocol = self._protocol
        if protocol.closed or self._transport.is_closing():
            raise anyio.BrokenResourceError("the connection is closed")
        self._transport.write(_join(frames))
        while protocol.writable is not None and not protocol.closed:
            await protocol.writable  # the kernel's buffer is full: wait until it drains

    async def aclose(self) -> None:
        self._protocol.closed = True
        self._transport.abort()


async def connect_tcp(
    host: str, port: int, ssl_context: ssl.SSLContext | None = None
) -> AnyioStreamTransport | AsyncioTransport:
    """Open a TCP connection with Nagle off (small requests must not wait for acks); TLS over
    it with ``ssl_context``, the server's certificate checked against ``host``."""
    if ssl_context is None and sniffio.current_async_library() == "asyncio":
        loop = asyncio.get_running_loop()
        # asyncio turns Nagle off on TCP sockets itself.
        transport, protocol = await loop.create_connection(_FrameProtocol, host, port)
        assert isinstance(transport, asyncio.Transport)
        return AsyncioTransport(transport, protocol, format_address(host, port))
    raw = await anyio.connect_tcp(host, port)
    try:
        raw.extra(anyio.abc.SocketAttribute.raw_socket).setsockopt(
            socket.IPPROTO_TCP, socket.TCP_NODELAY, 1
        )
    except (OSError, anyio.TypedAttributeLookupError):
        pass
    stream: anyio.abc.ByteStream = raw
    if ssl_context is not None:
        try:
            stream = await TLSStream.wrap(
                raw, hostname=host, ssl_context=ssl_context, standard_compatible=False
            )
        except BaseException:
            await anyio.aclose_forcefully(raw)
            raise
    return AnyioStreamTransport(stream, format_address(host, port))
