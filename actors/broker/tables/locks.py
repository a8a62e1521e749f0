"""Queue locks for orderly consumption: LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42).

RocketMQ's RebalanceLockManager (sheet 9.4). An orderly consumer only consumes a queue whose
broker lock it holds, so two members of a group never work on one queue at once, even while a
rebalance moves queues between them. Per group the broker keeps queue -> (client id, last
renewal); a lock lives ``rebalanceLockMaxLiveTime`` (60 s) without renewal, and consumers renew
every 20 s.

`LockTable` is the plain state (times are the caller's); `RebalanceLockManager` is the actor
that alone changes it: LOCK_BATCH_MQ calls it (the answer is the set it granted), UNLOCK_BATCH_MQ
casts (its answer does not depend on the release); `locked_by` reads inline. The table lives in
memory only, as in RocketMQ: after a broker restart consumers simply lock again. A restart of
the actor keeps the table (it lives on the instance, each change applied whole): it loses the
command that crashed it and those queued behind it; a lost unlock frees its queues when their
60 s lease runs out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

import attrs
import trio

from actors.broker.tables.table_actor import TableActor
from protocol.bodies import (
    MessageQueue,
)
from supervisors.actor import ActorStatistics, Request


@attrs.define(slots=True)
class LockEntry:
    """Who holds one queue's lock and when they last renewed it (trio clock, seconds)."""

    client_id: str
    last_update: float


@attrs.frozen
class LockStatistics:
    """The lock table at one moment."""

    groups: int
    locked_queues: int


class LockTable:
    """Group -> queue -> `LockEntry`, with a lease of ``lock_max_live_time`` seconds; plain
    state, no I/O, no clock (``now`` is the caller's, `trio.current_time()` in the broker)."""

    def __init__(self, lock_max_live_time: float = 60.0) -> None:
        self.lock_max_live_time = lock_max_live_time
        self.mq_lock_table: dict[str, dict[MessageQueue, LockEntry]] = {}

    def try_lock_batch(
        self, group: str, mqs: Iterable[MessageQueue], client_id: str, now: float
    ) -> list[MessageQueue]:
        """Lock or renew each queue for ``client_id``; the queues it now holds, in request order.

        A queue is granted when nobody holds it, when this client already does (the lease is
        renewed) or when the holder's lease has run out (the lock passes to this client).
        """
        table = self.mq_lock_table.setdefault(group, {})
        granted: list[MessageQueue] = []
        for mq in mqs:
            entry = table.get(mq)
            if entry is None or entry.client_id == client_id or self._expired(entry, now):
                table[mq] = LockEntry(client_id, now)
                granted.append(mq)
        if not table:
            del self.mq_lock_table[group]
        return granted

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> int:
        """Release the queues of ``mqs`` that ``client_id`` holds (others' stay); how many."""
        table = self.mq_lock_table.get(group)
        if table is None:
            return 0
        released = 0
        for mq in mqs:
            entry = table.get(mq)
            if entry is not None and entry.client_id == client_id:
                del table[mq]
                released += 1
        if not table:
            del self.mq_lock_table[group]
        return released

    def locked_by(self, group: str, mq: MessageQueue, now: float) -> str | None:
        """The client id holding a live lock on ``mq`` for ``group``, or None."""
        entry = self.mq_lock_table.get(group, {}).get(mq)
        if entry is None or self._expired(entry, now):
            return None
        return entry.client_id

    def is_locked(self, group: str, mq: MessageQueue, client_id: str, now: float) -> bool:
        """Whether ``client_id`` holds a live lock on ``mq`` for ``group``."""
        return self.locked_by(group, mq, now) == client_id

    def statistics(self) -> LockStatistics:
        """Groups with locks and queues locked (expired entries included until taken over)."""
        return LockStatistics(
            groups=len(self.mq_lock_table),
            locked_queues=sum(len(table) for table in self.mq_lock_table.values()),
        )

    def _expired(self, entry: LockEntry, now: float) -> bool:
        return now - entry.last_update > self.lock_max_live_time


# -- commands ----------------------------------------------------------------------------------


@attrs.frozen
class LockBatch(Request[list[MessageQueue]]):
    """LOCK_BATCH_MQ: lock or renew ``mqs`` for ``client_id``; answers the queues granted."""

    group: str
    mqs: tuple[MessageQueue, ...]
    client_id: str


@attrs.frozen
class UnlockBatch(Request[int]):
    """UNLOCK_BATCH_MQ: release the queues ``client_id`` holds; answers how many (the handler
    casts it: its answer does not wait for the release)."""

    group: str
    mqs: tuple[MessageQueue, ...]
    client_id: str


LockCommand: TypeAlias = LockBatch | UnlockBatch


@attrs.frozen
class RebalanceLockStatistics(ActorStatistics):
    """The lock actor's counters and its table at one moment."""

    groups: int
    locked_queues: int
    granted: int  # queues granted (locked or renewed) since start
    refused: int  # queues asked for while another client held them


class RebalanceLockManager(TableActor[LockCommand]):
    """Owns the broker's `LockTable`; see the module docstring."""

    def __init__(self, lock_max_live_time_ms: int = 60_000) -> None:
        super().__init__("locks")
        self.state = LockTable(lock_max_live_time_ms / 1000)
        self.granted = 0
        self.refused = 0

    # -- reads (inline, no hop) -------------------------------------------------------------

    def locked_by(self, group: str, mq: MessageQueue) -> str | None:
        """The client id holding a live lock on ``mq`` for ``group``, or None."""
        return self.state.locked_by(group, mq, trio.current_time())

    def is_locked(self, group: str, mq: MessageQueue, client_id: str) -> bool:
        """Whether ``client_id`` holds a live lock on ``mq`` for ``group``."""
        return self.state.is_locked(group, mq, client_id, trio.current_time())

    @property
    def lock_max_live_time(self) -> float:
        """Seconds a lock lives without renewal."""
        return self.state.lock_max_live_time

    @property
    def mq_lock_table(self) -> Mapping[str, Mapping[MessageQueue, LockEntry]]:
        """Group -> queue -> holder."""
        return self.state.mq_lock_table

    # -- the actor --------------------------------------------------------------------------

    def apply(self, command: LockCommand) -> Any:
        """Apply one command."""
        match command:
            case LockBatch():
                granted = self.state.try_lock_batch(
                    command.group, command.mqs, command.client_id, trio.current_time()
                )
                self.granted += len(granted)
                self.refused += len(command.mqs) - len(granted)
                return granted
            case UnlockBatch():
                return self.state.unlock_batch(command.group, command.mqs, command.client_id)
        raise TypeError(f"the lock actor takes no {type(command).__name__}")

    def statistics(self) -> RebalanceLockStatistics:
        """Actor counters and the table's size."""
        table = self.state.statistics()
        return RebalanceLockStatistics(
            **self._statistics_fields(),
            groups=table.groups,
            locked_queues=table.locked_queues,
            granted=self.granted,
            refused=self.refused,
        )
