"""One remoting request with a deadline, so a peer that never answers fails the test instead
of hanging it."""

from __future__ import annotations

import anyio

from protocol.client import RemotingClient
from protocol.command import RemotingCommand

__all__ = ["call"]


async def call(
    client: RemotingClient,
    address: str,
    request: RemotingCommand,
    timeout: float = 10.0,
    *,
    deadline: float | None = None,
) -> RemotingCommand:
    """Send ``request`` to ``address`` and return the answer: ``timeout`` is the remoting
    timeout, ``deadline`` (default: the same) bounds the whole call, connecting included."""
    with anyio.fail_after(timeout if deadline is None else deadline):
        return await client.invoke(address, request, timeout)
