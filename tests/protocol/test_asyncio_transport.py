"""The client's plain-TCP transport straight on asyncio: reading pauses, ends and errors."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from protocol.transport import AsyncioTransport, connect_tcp


async def _serve(handler: object) -> tuple[asyncio.Server, int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)  # type: ignore[arg-type]
    port: int = server.sockets[0].getsockname()[1]
    return server, port


def test_a_large_unread_answer_pauses_reading_and_arrives_whole() -> None:
    payload = bytes(range(256)) * (48 * 1024)  # 12 MiB: past the 8 MiB pause mark

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(5)
        writer.write(payload)
        await writer.drain()
        writer.close()

    async def main() -> bytes:
        server, port = await _serve(handler)
        async with server:
            transport = await connect_tcp("127.0.0.1", port)
            assert isinstance(transport, AsyncioTransport)
            await transport.send_frames([[b"he", b"llo"]])
            # Let the whole answer arrive unread: the protocol must stop reading, not grow.
            protocol = transport._protocol
            async with asyncio.timeout(60):
                while not protocol.reading_paused:
                    await asyncio.sleep(0.01)
            assert protocol.buffered <= len(payload)
            received = bytearray()
            async with asyncio.timeout(60):
                while chunk := await transport.receive_some():
                    received += chunk
            await transport.aclose()
            return bytes(received)

    assert asyncio.run(main()) == payload


def test_the_peer_closing_ends_receives_and_fails_sends() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    async def main() -> None:
        server, port = await _serve(handler)
        async with server:
            transport = await connect_tcp("127.0.0.1", port)
            async with asyncio.timeout(30):
                assert await transport.receive_some() == b""
            with pytest.raises(anyio.BrokenResourceError):
                async with asyncio.timeout(30):
                    while True:  # the first sends may still reach the kernel's buffer
                        await transport.send_frames([[b"x" * 65536]])
                        await asyncio.sleep(0.01)
            await transport.aclose()

    asyncio.run(main())


def test_a_refused_connection_raises_oserror() -> None:
    async def main() -> None:
        server, port = await _serve(lambda r, w: w.close())
        server.close()
        await server.wait_closed()
        with pytest.raises(OSError):
            await connect_tcp("127.0.0.1", port)

    asyncio.run(main())
