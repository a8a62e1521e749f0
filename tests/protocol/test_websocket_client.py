"""The client's websocket transport (wsproto over anyio) on trio and on asyncio, against the
trio server's websocket listener running in another thread.

Loopback only, port 0, a deadline around every wait (``anyio.fail_after``).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import pytest

from protocol.client import RemotingClient
from protocol.codes import ResponseCode
from protocol.command import ConnectionClosedError, RemotingCommand
from protocol.connection import Connection, Dispatcher
from protocol.websocket_client import split_websocket_url

from .helpers import echo, serve_in_thread

ECHO, BIG, CLOSE, CALL_BACK, CLIENT_SIDE = 9101, 9102, 9103, 9104, 9150
BACKENDS = pytest.mark.parametrize("backend", ["trio", "asyncio"])


@pytest.fixture(scope="module")
def ws_url() -> Iterator[str]:
    """``ws://127.0.0.1:port/`` of a server with test handlers, in a thread of its own."""
    def big(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        size = int((request.ext_fields or {})["size"])
        return request.response(body=bytes(i % 251 for i in range(size)))

    def close(conn: Connection, request: RemotingCommand) -> None:
        conn.close("the test handler closes it")

    async def call_back(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        # As a broker calls a consumer: a request of its own over the client's connection.
        answer = await conn.invoke(RemotingCommand.request(CLIENT_SIDE, body=request.body), 5)
        return request.response(body=b"client said: " + (answer.body or b""))

    handlers = {ECHO: echo, BIG: big, CLOSE: close, CALL_BACK: call_back}
    for port in serve_in_thread(handlers, lambda server: server.serve_websocket):
        yield f"ws://127.0.0.1:{port}/any/path"


def run(backend: str, test: Callable[[], Awaitable[Any]]) -> Any:
    async def bounded() -> Any:
        with anyio.fail_after(30):
            return await test()

    return anyio.run(bounded, backend=backend)


@BACKENDS
def test_many_calls_in_flight_and_frames_larger_than_a_read(ws_url: str, backend: str) -> None:
    async def test() -> None:
        async with RemotingClient() as client:
            requests = [RemotingCommand.request(ECHO, body=str(i).encode()) for i in range(200)]
            answers: dict[int, RemotingCommand] = {}

            async def one(index: int, request: RemotingCommand) -> None:
                answers[index] = await client.invoke(ws_url, request, 10)

            async with anyio.create_task_group() as tg:
                for index, request in enumerate(requests):
                    tg.start_soon(one, index, request)
            assert [answers[i].body for i in range(200)] == [str(i).encode() for i in range(200)]
            # 3 MiB answer: many TCP reads and websocket fragments make one frame.
            size = 3 << 20
            big = await client.invoke(ws_url, RemotingCommand.request(BIG, {"size": str(size)}))
            assert big.body == bytes(i % 251 for i in range(size))
            assert client.addresses() == [ws_url]

    run(backend, test)


@BACKENDS
def test_a_frame_over_the_client_limit_closes_that_connection_only(
    ws_url: str, backend: str
) -> None:
    async def test() -> None:
        async with RemotingClient(frame_limit=64 * 1024) as client:
            request = RemotingCommand.request(BIG, {"size": str(256 * 1024)})
            with pytest.raises(ConnectionClosedError, match="closed"):
                await client.invoke(ws_url, request, 10)
            # The next call opens a new connection and works.
            echo = await client.invoke(ws_url, RemotingCommand.request(ECHO, body=b"again"))
            assert echo.body == b"again"

    run(backend, test)


@BACKENDS
def test_the_server_closing_the_socket_fails_pending_calls_at_once_then_reconnects(
    ws_url: str, backend: str
) -> None:
    async def test() -> None:
        async with RemotingClient() as client:
            await client.invoke(ws_url, RemotingCommand.request(ECHO, body=b"first"))
            # Well within the 20 s call timeout: the close, not the deadline, ends the call.
            with anyio.fail_after(10), pytest.raises(ConnectionClosedError) as closed:
                await client.invoke(ws_url, RemotingCommand.request(CLOSE), timeout=20)
            assert ws_url.split("/any")[0].removeprefix("ws://") in str(closed.value)
            echo = await client.invoke(ws_url, RemotingCommand.request(ECHO, body=b"back"))
            assert echo.body == b"back"

    run(backend, test)


@BACKENDS
def test_the_server_calls_the_client_back_over_the_same_websocket(
    ws_url: str, backend: str
) -> None:
    async def test() -> None:
        dispatcher = Dispatcher()

        def client_side(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            return request.response(body=(request.body or b"").upper())

        dispatcher.register(CLIENT_SIDE, client_side)
        async with RemotingClient(dispatcher) as client:
            request = RemotingCommand.request(CALL_BACK, body=b"notify")
            answer = await client.invoke(ws_url, request, 10)
            assert answer.code == ResponseCode.SUCCESS
            assert answer.body == b"client said: NOTIFY"

    run(backend, test)


@BACKENDS
def test_nothing_listening_fails_fast_with_the_address(backend: str) -> None:
    async def test() -> None:
        async with RemotingClient() as client:
            with pytest.raises(
                ConnectionClosedError, match=re.escape("cannot connect to ws://127.0.0.1:1/")
            ):
                await client.invoke("ws://127.0.0.1:1/", RemotingCommand.request(ECHO))

    run(backend, test)


def test_websocket_urls_are_checked() -> None:
    assert split_websocket_url("ws://127.0.0.1:9877/") == (False, "127.0.0.1", 9877, "/")
    assert split_websocket_url("wss://h:1/p?x=1") == (True, "h", 1, "/p?x=1")
    assert split_websocket_url("ws://[::1]:9877") == (False, "::1", 9877, "/")
    for bad, reason in (("ws://host/", "needs a host and a port"),
                        ("http://h:1/", "not a ws:// or wss://"),
                        ("ws://h:99999/", "needs a host and a port")):  # fmt: skip
        with pytest.raises(ValueError, match=reason):
            split_websocket_url(bad)
