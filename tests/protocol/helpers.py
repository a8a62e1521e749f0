"""Shared fixtures for remoting tests: a live server on loopback with test handlers.

Rules for these tests: loopback only, port 0, a deadline (`trio.fail_after`) around every I/O
wait so a hang fails instead of freezing the run.
"""

from __future__ import annotations

import queue
import struct
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

import pytest
import trio
import trio_websocket

from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.connection import Connection, Dispatcher, Later
from protocol.frame import FrameDecoder, encode
from protocol.server import RemotingServer, ServerConfig

ECHO = 9001
SLOW = 9002
#: Answered inline without ``delayMillis``, else `Later`, after the delay (SLOW's way).
MAYBE_SLOW = 9006
FAIL = 9003
RECORD = 9004


class Harness:
    """A running server plus what its handlers observed."""

    def __init__(self, kind: str, server: RemotingServer, port: int, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        self.kind = kind
        self.server = server
        self.port = port
        self.recorded: list[RemotingCommand] = []
        self.closed: list[Connection] = []
        self.closed_event = trio.Event()

    @property
    def address(self) -> str:
        if self.kind == "ws":
            return f"ws://127.0.0.1:{self.port}/any/path"
        return f"127.0.0.1:{self.port}"

    async def raw(self) -> RawClient:
        """A raw client speaking bytes to the server."""
        if self.kind == "ws":
            return await RawWebSocketClient.open(self.port, self.nursery)
        return await RawTcpClient.open(self.port)


class RawClient:
    async def send(self, data: bytes) -> None:
        raise NotImplementedError

    async def receive(self) -> RemotingCommand | None:
        """Next frame, or None when the server closed the connection."""
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError


class RawTcpClient(RawClient):
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()
        self.ready: list[RemotingCommand] = []

    @classmethod
    async def open(cls, port: int) -> RawTcpClient:
        return cls(await trio.open_tcp_stream("127.0.0.1", port))

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def receive(self) -> RemotingCommand | None:
        while not self.ready:
            try:
                data = await self.stream.receive_some(65536)
            except trio.BrokenResourceError:
                return None
            if not data:
                return None
            self.ready.extend(self.decoder.feed(data))
        return self.ready.pop(0)

    async def aclose(self) -> None:
        await self.stream.aclose()


class RawWebSocketClient(RawClient):
    def __init__(self, ws: trio_websocket.WebSocketConnection) -> None:
        self.ws = ws

    @classmethod
    async def open(cls, port: int, nursery: trio.Nursery) -> RawWebSocketClient:
        ws = await trio_websocket.connect_websocket_url(nursery, f"ws://127.0.0.1:{port}/raw")
        return cls(ws)

    async def send(self, data: bytes) -> None:
        try:
            await self.ws.send_message(data)
        except trio_websocket.ConnectionClosed:
            pass

    async def receive(self) -> RemotingCommand | None:
        from protocol.frame import decode

        try:
            message = await self.ws.get_message()
        except trio_websocket.ConnectionClosed:
            return None
        assert isinstance(message, bytes)
        return decode(message)

    async def aclose(self) -> None:
        await self.ws.aclose()


def make_dispatcher(harness_ref: list[Harness]) -> Dispatcher:
    dispatcher = Dispatcher()

    def echo(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(ext_fields=dict(request.ext_fields or {}), body=request.body)

    async def slow(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        await trio.sleep(int(request.field("delayMillis", "0") or 0) / 1000)
        return request.response(ext_fields={"slept": request.field("delayMillis", "0") or "0"})

    def fail(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        raise ValueError("the test handler refuses")

    def record(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        harness_ref[0].recorded.append(request)
        return request.response(ResponseCode.SUCCESS)

    def maybe_slow(conn: Connection, request: RemotingCommand) -> RemotingCommand | Later:
        if request.field("delayMillis", ""):
            return Later(slow)
        return request.response(ext_fields={"inline": "true"})

    dispatcher.register(ECHO, echo)
    dispatcher.register(SLOW, slow)
    dispatcher.register(MAYBE_SLOW, maybe_slow)
    dispatcher.register(FAIL, fail)
    dispatcher.register(RECORD, record)
    return dispatcher


async def start_harness(
    nursery: trio.Nursery, kind: str, config: ServerConfig | None = None
) -> Harness:
    ref: list[Harness] = []
    server = RemotingServer(make_dispatcher(ref), config or ServerConfig(idle_timeout=None))
    if kind == "ws":
        port = await nursery.start(server.serve_websocket, 0)
    else:
        port = await nursery.start(server.serve_tcp, 0)
    harness = Harness(kind, server, port, nursery)
    ref.append(harness)

    def on_close(conn: Connection) -> None:
        harness.closed.append(conn)
        harness.closed_event.set()

    server.add_close_listener(on_close)
    return harness


@pytest.fixture(params=["tcp", "ws"])
async def harness(request: pytest.FixtureRequest, nursery: trio.Nursery) -> AsyncIterator[Harness]:
    yield await start_harness(nursery, request.param)


def frame(code: int, opaque: int, ext: dict[str, str] | None = None, flag: int = 0) -> bytes:
    return encode(RemotingCommand(code, opaque=opaque, flag=flag, ext_fields=ext))


def raw_length_frame(length: int, rest: bytes) -> bytes:
    return struct.pack(">i", length) + rest


def echo(conn: Connection, request: RemotingCommand) -> RemotingCommand:
    """A handler that answers with the request's own body."""
    return request.response(body=request.body)


def serve_in_thread(
    handlers: Mapping[int, Callable[..., Any]],
    listen: Callable[[RemotingServer], Callable[..., Any]] = lambda server: server.serve_tcp,
    config: ServerConfig | None = None,
) -> Iterator[int]:
    """The port of a server with ``handlers`` (code -> handler), run by trio in a thread of its
    own so that tests can drive clients on other event loops (asyncio) against it.

    ``listen`` picks the listener (``serve_tcp`` by default, ``serve_websocket``); a generator
    for fixtures: the server stops when the fixture ends.
    """
    ports: queue.Queue[int] = queue.Queue()
    stop = threading.Event()

    async def main() -> None:
        dispatcher = Dispatcher()
        for code, handler in handlers.items():
            dispatcher.register(code, handler)
        server = RemotingServer(dispatcher, config or ServerConfig())
        async with trio.open_nursery() as nursery:
            ports.put(await nursery.start(listen(server), 0))
            while not stop.is_set():
                await trio.sleep(0.02)
            nursery.cancel_scope.cancel()

    thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
    thread.start()
    try:
        yield ports.get(timeout=10)
    finally:
        stop.set()
        thread.join(timeout=10)
