"""Queue locks for orderly consumption: LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42).

RocketMQ's RebalanceLockManager (sheet 9.4). An orderly consumer only consumes a queue whose
broker lock it holds, so two members of a group never work on one queue at once, even while a
rebalance moves queues between them. Per group the broker keeps queue -> (client id, last
renewal); a lock lives ``rebalanceLockMaxLiveTime`` (60 s) without renewal, and consumers renew
every 20 s.

The table is a single-writer table like the broker's others (docs/actors.md): plain methods that
never await, called inline by the connection reader. It lives in memory only, as in RocketMQ:
after a broker restart consumers simply lock again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import attrs
import trio

from protocol.bodies import (
    BodyError,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    UnlockBatchRequestBody,
)
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.connection import Connection

if TYPE_CHECKING:
    from actors.broker.service import Broker


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


class RebalanceLockManager:
    """Group -> queue -> `LockEntry`, with a lease of ``lock_max_live_time_ms``."""

    def __init__(self, lock_max_live_time_ms: int = 60_000) -> None:
        self.lock_max_live_time = lock_max_live_time_ms / 1000
        self.mq_lock_table: dict[str, dict[MessageQueue, LockEntry]] = {}

    def try_lock_batch(
        self, group: str, mqs: Iterable[MessageQueue], client_id: str
    ) -> list[MessageQueue]:
        """Lock or renew each queue for ``client_id``; the queues it now holds, in request order.

        A queue is granted when nobody holds it, when this client already does (the lease is
        renewed) or when the holder's lease has run out (the lock passes to this client).
        """
        now = trio.current_time()
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

    def locked_by(self, group: str, mq: MessageQueue) -> str | None:
        """The client id holding a live lock on ``mq`` for ``group``, or None."""
        entry = self.mq_lock_table.get(group, {}).get(mq)
        if entry is None or self._expired(entry, trio.current_time()):
            return None
        return entry.client_id

    def is_locked(self, group: str, mq: MessageQueue, client_id: str) -> bool:
        """Whether ``client_id`` holds a live lock on ``mq`` for ``group``."""
        return self.locked_by(group, mq) == client_id

    def statistics(self) -> LockStatistics:
        """Groups with locks and queues locked (expired entries included until taken over)."""
        return LockStatistics(
            groups=len(self.mq_lock_table),
            locked_queues=sum(len(table) for table in self.mq_lock_table.values()),
        )

    def _expired(self, entry: LockEntry, now: float) -> bool:
        return now - entry.last_update > self.lock_max_live_time


class LockHandlers:
    """Handlers of LOCK_BATCH_MQ and UNLOCK_BATCH_MQ."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def lock_batch_mq(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        try:
            body = LockBatchRequestBody.from_json(request.body or b"")
        except BodyError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad LOCK_BATCH_MQ body: {exc}")
        refused = self._check_group(request, body.consumer_group)
        if refused is not None:
            return refused
        granted = self.broker.locks.try_lock_batch(body.consumer_group, body.mq_set, body.client_id)
        answer = LockBatchResponseBody(lock_ok_mq_set=granted)
        return request.response(ResponseCode.SUCCESS, None, None, answer.to_json())

    def unlock_batch_mq(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        try:
            body = UnlockBatchRequestBody.from_json(request.body or b"")
        except BodyError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad UNLOCK_BATCH_MQ body: {exc}")
        refused = self._check_group(request, body.consumer_group)
        if refused is not None:
            return refused
        self.broker.locks.unlock_batch(body.consumer_group, body.mq_set, body.client_id)
        return request.response(ResponseCode.SUCCESS)

    def _check_group(self, request: RemotingCommand, group: str) -> RemotingCommand | None:
        if self.broker.groups.find_subscription_group_config(group) is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group {group!r} does not exist on broker "
                f"{self.broker.config.broker_name}; create it (updateSubGroup) or enable "
                "autoCreateSubscriptionGroup",
            )
        return None
