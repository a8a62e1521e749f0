"""Latency-based fault avoidance for producers (RocketMQ's MQFaultStrategy), pure logic.

With ``send_latency_fault_enable`` on, every send attempt reports how long it took and whether
it failed. A slow or failed broker is then *not available* for a while and the queue choice
passes over it:

    latency >=   50   100   550  1000  2000  3000  15000 ms
    avoided      0     0    30    60   120   180    600 s

A failed attempt (connection error, timeout, broker refusal) counts as a latency of 30 000 ms,
so its broker is avoided for the last column's duration, as in the Java producer. When every
broker of a topic is being avoided, the least bad one is used anyway (`pick_one_at_least`).

Nothing here does I/O; the clock is injectable (milliseconds), so tests drive time directly.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable, Sequence

import attrs

from protocol.bodies import MessageQueue

LATENCY_MAX_MS: tuple[int, ...] = (50, 100, 550, 1000, 2000, 3000, 15000)
"""Latency thresholds (ms) of the avoidance table, ascending."""
NOT_AVAILABLE_DURATION_MS: tuple[int, ...] = (0, 0, 30000, 60000, 120000, 180000, 600000)
"""How long (ms) a broker is avoided once a send took at least the matching threshold."""
ISOLATION_LATENCY_MS = 30000
"""The latency a failed send counts as (Java's isolation value)."""


def monotonic_ms() -> float:
    """The default clock: monotonic milliseconds."""
    return time.monotonic() * 1000.0


@attrs.frozen
class FaultItem:
    """One broker's last report: its latency and the time it may be used again (clock ms)."""

    broker_name: str
    current_latency: float
    start_timestamp: float


class LatencyFaultTolerance:
    """Which brokers to avoid for now, from the latency and failures of past sends."""

    def __init__(self, clock: Callable[[], float] = monotonic_ms) -> None:
        self.clock = clock
        self._items: dict[str, FaultItem] = {}
        self._which_item_worst = itertools.count()

    def update(self, broker_name: str, latency_ms: float, not_available_ms: float) -> None:
        """Record a send's latency; the broker is unavailable for ``not_available_ms``."""
        self._items[broker_name] = FaultItem(
            broker_name, latency_ms, self.clock() + not_available_ms
        )

    def is_available(self, broker_name: str) -> bool:
        """True when the broker has no report or its avoidance time is over."""
        item = self._items.get(broker_name)
        return item is None or self.clock() >= item.start_timestamp

    def remove(self, broker_name: str) -> None:
        """Forget a broker (it no longer serves the topic at hand)."""
        self._items.pop(broker_name, None)

    def pick_one_at_least(self) -> str | None:
        """The least bad reported broker: among the better half, in turn; None if none."""
        if not self._items:
            return None
        now = self.clock()
        items = list(self._items.values())
        random.shuffle(items)  # equal items should not always yield the same broker
        items.sort(key=lambda i: (now < i.start_timestamp, i.current_latency, i.start_timestamp))
        half = len(items) // 2
        if half <= 0:
            return items[0].broker_name
        return items[next(self._which_item_worst) % half].broker_name

    def items(self) -> list[FaultItem]:
        """Every report held, by broker name."""
        return [self._items[name] for name in sorted(self._items)]


class MQFaultStrategy:
    """Queue choice and fault bookkeeping of one producer (off unless ``enabled``)."""

    def __init__(
        self,
        *,
        enabled: bool = False,
        latency_max_ms: Sequence[int] = LATENCY_MAX_MS,
        not_available_duration_ms: Sequence[int] = NOT_AVAILABLE_DURATION_MS,
        clock: Callable[[], float] = monotonic_ms,
    ) -> None:
        if len(latency_max_ms) != len(not_available_duration_ms):
            raise ValueError(
                f"latency_max_ms has {len(latency_max_ms)} entries but "
                f"not_available_duration_ms has {len(not_available_duration_ms)}; give one "
                "duration per latency threshold"
            )
        if list(latency_max_ms) != sorted(latency_max_ms):
            raise ValueError(f"latency_max_ms must ascend: {list(latency_max_ms)}")
        self.enabled = enabled
        self.latency_max_ms = tuple(latency_max_ms)
        self.not_available_duration_ms = tuple(not_available_duration_ms)
        self.tolerance = LatencyFaultTolerance(clock)

    def not_available_duration(self, latency_ms: float) -> int:
        """How long (ms) a broker is avoided after a send that took ``latency_ms``."""
        for threshold, duration in zip(
            reversed(self.latency_max_ms), reversed(self.not_available_duration_ms), strict=True
        ):
            if latency_ms >= threshold:
                return duration
        return 0

    def update(self, broker_name: str, latency_ms: float, *, isolation: bool) -> None:
        """Report one send attempt; ``isolation`` for a failed one."""
        if not self.enabled:
            return
        counted = ISOLATION_LATENCY_MS if isolation else latency_ms
        self.tolerance.update(broker_name, latency_ms, self.not_available_duration(counted))

    def select(
        self, queues: Sequence[MessageQueue], index: int, last_broker: str | None
    ) -> MessageQueue:
        """Pick a queue, round robin from ``index``, passing over brokers to avoid.

        Off: the first queue not on ``last_broker`` (the broker that just failed). On: the
        first queue of an available broker, preferring one other than ``last_broker``; if no
        broker is available, a queue of the least bad one.
        """
        count = len(queues)
        if not count:
            raise ValueError("no queue to choose from")
        if not self.enabled:
            if last_broker is not None:
                for step in range(count):
                    candidate = queues[(index + step) % count]
                    if candidate.broker_name != last_broker:
                        return candidate
            return queues[index % count]
        tolerance = self.tolerance
        fallback: MessageQueue | None = None
        for step in range(count):
            candidate = queues[(index + step) % count]
            if tolerance.is_available(candidate.broker_name):
                if last_broker is None or candidate.broker_name != last_broker:
                    return candidate
                fallback = fallback or candidate
        if fallback is not None:
            return fallback
        least_bad = tolerance.pick_one_at_least()
        if least_bad is not None:
            own = [q for q in queues if q.broker_name == least_bad]
            if own:
                return own[index % len(own)]
            tolerance.remove(least_bad)  # not a broker of this topic
        return queues[index % count]
