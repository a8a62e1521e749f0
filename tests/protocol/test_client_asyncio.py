"""The remoting client on asyncio (anyio) against a trio server running in another thread."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from protocol.client import RemotingClient
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand

from .helpers import echo, serve_in_thread


@pytest.fixture
def server_port() -> Iterator[int]:
    yield from serve_in_thread({1: echo})


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
