"""Shared helpers of the client tests."""

from __future__ import annotations

import socket

import anyio
import anyio.abc

from actors.client import ClientInstance, PullConsumer
from protocol.message import MessageExt

from .conftest import BoltProcess

__all__ = ["BoltProcess", "SilentPeer", "free_port", "poll_until", "wait_for_route"]


async def poll_until(consumer: PullConsumer, count: int, timeout: float = 10.0) -> list[MessageExt]:
    """Poll until ``count`` messages arrived; fail after ``timeout`` s (more than count fails)."""
    got: list[MessageExt] = []
    with anyio.fail_after(timeout):
        while len(got) < count:
            got.extend(await consumer.poll(timeout=1.0))
    assert len(got) == count, [m.body for m in got]
    return got


async def wait_for_route(instance: ClientInstance, topic: str, timeout: float = 10.0) -> None:
    """Wait until a registry routes ``topic``: a broker registers a topic it auto-created for a
    send a moment after storing the message, so a consumer subscribing at once may be early."""
    with anyio.fail_after(timeout):
        while await instance.update_route(topic) is None:
            await anyio.sleep(0.05)


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class SilentPeer:
    """A TCP server on loopback that takes connections and requests but never answers.

    ``connections`` holds the accepted streams, so a test can cut one from the server side.
    """

    def __init__(self) -> None:
        self.address = ""
        self.connections: list[anyio.abc.SocketStream] = []
        self.received = 0

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Listen until cancelled; started with ``await task_group.start(peer.serve)``."""
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.address = f"127.0.0.1:{listener.extra(anyio.abc.SocketAttribute.local_port)}"
        task_status.started()
        await listener.serve(self._swallow)

    async def _swallow(self, stream: anyio.abc.SocketStream) -> None:
        self.connections.append(stream)
        async with stream:
            try:
                async for chunk in stream:
                    self.received += len(chunk)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass
