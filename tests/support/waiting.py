"""Waiting for a condition in a test: poll it, fail with an AssertionError naming what did not
happen. One async form (trio or asyncio, through anyio; it honours trio's MockClock) and one
for tests whose conditions are set by threads or other processes while the test blocks.

    await wait_until(lambda: len(received) == 4, 10, "4 messages received")
    wait_until_sync(lambda: server.ready, 10, "the server ready")
    stats = poll_until_sync(read_stats, lambda s: s.tps > 0, 30, "a TPS figure")
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

__all__ = ["poll_until_sync", "wait_until", "wait_until_sync"]

T = TypeVar("T")


async def wait_until(
    condition: Callable[[], object] | Callable[[], Awaitable[object]],
    timeout: float = 10.0,
    what: str = "the condition",
    *,
    interval: float = 0.05,
) -> None:
    """Poll ``condition`` (plain or async) every ``interval`` s until it is true; after
    ``timeout`` s raise AssertionError naming ``what``."""
    with anyio.move_on_after(timeout):
        while True:
            result = condition()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return
            await anyio.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def wait_until_sync(
    condition: Callable[[], object],
    timeout: float = 10.0,
    what: str = "the condition",
    *,
    interval: float = 0.05,
) -> None:
    """`wait_until` for a test that blocks its thread (the condition set by another thread or
    process)."""
    poll_until_sync(condition, bool, timeout, what, interval=interval)


def poll_until_sync(
    probe: Callable[[], T],
    check: Callable[[T], bool],
    timeout: float = 10.0,
    what: str = "the condition",
    *,
    interval: float = 0.05,
) -> T:
    """Call ``probe`` until ``check`` holds for its value and return that value; after
    ``timeout`` s raise AssertionError naming ``what`` and the last value seen."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if check(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout:g} s waiting for {what} (last seen: {value!r})"
            )
        time.sleep(interval)
