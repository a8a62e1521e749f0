"""The servers' websocket transport (trio-websocket): one binary message carries exactly one
whole frame, its length field included. Clients use `protocol.websocket_client` (wsproto over
anyio), which runs on asyncio too."""

from __future__ import annotations

from collections.abc import Sequence

import trio
import trio_websocket

from protocol.frame import FrameError
from protocol.transport import Part, format_address


class WebSocketTransport:
    """A remoting transport over a trio-websocket connection (the server side)."""

    message_framed = True

    def __init__(self, ws: trio_websocket.WebSocketConnection) -> None:
        self._ws = ws
        self._closed = trio.Event()
        remote = ws.remote
        if isinstance(remote, trio_websocket.Endpoint):
            self.peer = format_address(str(remote.address), remote.port)
        else:
            self.peer = str(remote)

    async def receive_some(self) -> bytes | bytearray:
        try:
            message = await self._ws.get_message()
        except trio_websocket.ConnectionClosed:
            return b""
        if isinstance(message, str):
            raise FrameError("a text websocket message cannot carry a frame; send binary")
        return message

    async def send_frames(self, frames: Sequence[Sequence[Part]]) -> None:
        try:
            for frame in frames:
                data = frame[0] if len(frame) == 1 else b"".join(frame)
                await self._ws.send_message(bytes(data))
        except trio_websocket.ConnectionClosed as exc:
            # The connection knows the stream errors of every transport, not this library's.
            raise trio.BrokenResourceError(f"websocket closed: {exc}") from exc

    async def aclose(self) -> None:
        try:
            await self._ws.aclose()
        finally:
            self._closed.set()

    async def wait_closed(self) -> None:
        """Return once `aclose` was called."""
        await self._closed.wait()
