"""Shared helpers of the client tests."""

from __future__ import annotations

import anyio

from actors.client import PullConsumer
from protocol.message import MessageExt


async def poll_until(consumer: PullConsumer, count: int, timeout: float = 10.0) -> list[MessageExt]:
    """Poll until ``count`` messages arrived; fail after ``timeout`` s (more than count fails)."""
    got: list[MessageExt] = []
    with anyio.fail_after(timeout):
        while len(got) < count:
            got.extend(await consumer.poll(timeout=1.0))
    assert len(got) == count, [m.body for m in got]
    return got
