"""The remoting client on asyncio (anyio) against a trio server running in another thread."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Iterator

import pytest
import trio

from protocol.client import RemotingClient
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.connection import Connection, Dispatcher
from protocol.server import RemotingServer


@pytest.fixture
def server_port() -> Iterator[int]:
    ports: queue.Queue[int] = queue.Queue()
    stop = threading.Event()

    def echo(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=request.body)

    async def main() -> None:
        dispatcher = Dispatcher()
        dispatcher.register(1, echo)
        server = RemotingServer(dispatcher)
        async with trio.open_nursery() as nursery:
            ports.put(await nursery.start(server.serve_tcp, 0))
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


def test_client_runs_on_asyncio(server_port: int) -> None:
    async def main() -> list[RemotingCommand]:
        async with RemotingClient() as client:
            address = f"127.0.0.1:{server_port}"
            requests = [RemotingCommand.request(1, body=str(i).encode()) for i in range(50)]
            return await asyncio.wait_for(
                asyncio.gather(*(client.invoke(address, r) for r in requests)), timeout=10
            )

    responses = asyncio.run(main())
    assert [r.code for r in responses] == [ResponseCode.SUCCESS] * 50
    assert [r.body for r in responses] == [str(i).encode() for i in range(50)]
