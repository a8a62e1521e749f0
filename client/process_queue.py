"""The process queue of the push consumer (RocketMQ's ProcessQueue).

A `ProcessQueue` holds the messages pulled from one queue that are not yet consumed. Its size
drives flow control, its smallest offset is what the consumer may commit (`remove` returns
it), and for orderly consumption it hands out messages in offset order (`take`, `commit`,
`put_back`). It also carries the queue's pull position, the broker id to read from next, the
orderly lock state and the timestamps running info reports. It does no I/O; the pull task
and the consume tasks of its queue meet through its `arrived` event and `consume_lock`.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence

import anyio

from protocol.bodies import MessageQueue, ProcessQueueInfo
from protocol.message import MessageExt

LOCK_EXPIRY = 30.0
"""A local lock older than this is treated as lost (Java's REBALANCE_LOCK_MAX_LIVE_TIME)."""


def now_ms() -> int:
    """Wall-clock milliseconds, as RocketMQ's timestamps are."""
    return int(time.time() * 1000)


class ProcessQueue:
    """The pulled, not yet consumed messages of one queue, by queue offset."""

    def __init__(self, queue: MessageQueue) -> None:
        self.queue = queue
        self.messages: dict[int, MessageExt] = {}
        self._heap: list[int] = []  # offsets; entries no longer in `messages` are skipped
        self.size = 0  # body bytes cached
        self.max_offset = -1  # highest offset ever put
        self.consuming: dict[int, MessageExt] = {}  # orderly: taken, not yet committed
        self.dropped = False
        self.locked = False
        self.last_lock_time = 0.0  # anyio clock
        self.last_lock_timestamp = 0
        self.last_pull_timestamp = 0
        self.last_consume_timestamp = now_ms()
        self.try_unlock_times = 0
        #: Set when messages arrive; the orderly consume task waits on it.
        self.arrived = anyio.Event()
        #: Held while an orderly batch runs, so a queue is not unlocked in the middle of one.
        self.consume_lock = anyio.Lock()
        #: Cancels this queue's pull task when the queue is dropped.
        self.pull_scope: anyio.CancelScope | None = None
        #: The broker id the last pull answer suggested (0 = master).
        self.read_from = 0
        #: The broker address of the last pull (a failed pull retries soon if the route moved).
        self.pull_address = ""
        #: The queue offset the next pull asks for.
        self.next_offset = 0

    @property
    def count(self) -> int:
        """Messages cached, including those an orderly listener is working on."""
        return len(self.messages) + len(self.consuming)

    def put(self, messages: Sequence[MessageExt]) -> None:
        """Add a pulled batch (offsets ascending)."""
        table = self.messages
        for message in messages:
            offset = message.queue_offset
            if offset in table or offset in self.consuming:
                continue
            table[offset] = message
            heapq.heappush(self._heap, offset)
            self.size += len(message.body)
            if offset > self.max_offset:
                self.max_offset = offset
        if table:
            self.arrived.set()

    def min_offset(self) -> int | None:
        """The smallest cached offset (not counting those being consumed orderly)."""
        heap, table = self._heap, self.messages
        while heap and heap[0] not in table:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def max_span(self) -> int:
        """Highest minus lowest cached offset: how far consumption lags behind the pulls."""
        low = self.min_offset()
        return 0 if low is None else self.max_offset - low

    def remove(self, messages: Sequence[MessageExt]) -> int:
        """Drop consumed messages; the offset to commit (smallest left, else max + 1), or -1."""
        table = self.messages
        if not table:
            return -1
        for message in messages:
            if table.pop(message.queue_offset, None) is not None:
                self.size -= len(message.body)
        self.last_consume_timestamp = now_ms()
        low = self.min_offset()
        return self.max_offset + 1 if low is None else low

    # -- orderly --------------------------------------------------------------------------

    def take(self, batch: int) -> list[MessageExt]:
        """Up to ``batch`` messages with the smallest offsets, moved to `consuming`."""
        taken: list[MessageExt] = []
        heap, table = self._heap, self.messages
        while len(taken) < batch and heap:
            offset = heapq.heappop(heap)
            message = table.pop(offset, None)
            if message is not None:
                self.consuming[offset] = message
                taken.append(message)
        if not table:
            self.arrived = anyio.Event()
        self.last_consume_timestamp = now_ms()
        return taken

    def commit(self) -> int:
        """Forget the consumed batch; the offset to commit (its max + 1), or -1 if none."""
        if not self.consuming:
            return -1
        offset = max(self.consuming) + 1
        self.size -= sum(len(m.body) for m in self.consuming.values())
        self.consuming.clear()
        return offset

    def put_back(self, messages: Sequence[MessageExt]) -> None:
        """Return a batch to be consumed again, first in line."""
        for message in messages:
            offset = message.queue_offset
            if self.consuming.pop(offset, None) is not None:
                self.messages[offset] = message
                heapq.heappush(self._heap, offset)
        if self.messages:
            self.arrived.set()

    def lock_expired(self) -> bool:
        """True when the broker lock was last confirmed longer than `LOCK_EXPIRY` ago."""
        return anyio.current_time() - self.last_lock_time > LOCK_EXPIRY

    def info(self, commit_offset: int) -> ProcessQueueInfo:
        """This queue's row of ConsumerRunningInfo.mqTable."""
        low = self.min_offset()
        return ProcessQueueInfo(
            commit_offset=commit_offset,
            cached_msg_min_offset=low if low is not None else 0,
            cached_msg_max_offset=self.max_offset if self.messages else 0,
            cached_msg_count=self.count,
            cached_msg_size_in_mi_b=self.size >> 20,
            locked=self.locked,
            try_unlock_times=self.try_unlock_times,
            last_lock_timestamp=self.last_lock_timestamp,
            droped=self.dropped,
            last_pull_timestamp=self.last_pull_timestamp,
            last_consume_timestamp=self.last_consume_timestamp,
        )
