"""`Subscription`: what a consumer's ``subscribe`` returns, awaited or not.

``consumer.subscribe(topic)`` and ``await consumer.subscribe(topic)`` both subscribe: the
consumer records the subscription when ``subscribe`` is called, before anything is awaited,
so a call without ``await`` is never lost the way an unawaited coroutine is. Awaiting the
handle finishes what needs the network and gives its result: a `PullConsumer` fetches the
topic's route and takes its queues (a `PullConsumer` not awaited does that at its next
`poll`); a `PushConsumer` has nothing left to do (its rebalance takes the queues).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, Generic, TypeVar

__all__ = ["Subscription"]

T = TypeVar("T")


class Subscription(Generic[T]):
    """A subscription already recorded; awaiting it finishes its network part, if any."""

    __slots__ = ("_finish", "expression", "topic")

    def __init__(self, topic: str, expression: str, finish: Callable[[], Awaitable[T]]) -> None:
        self.topic = topic
        self.expression = expression
        self._finish = finish

    def __await__(self) -> Generator[Any, Any, T]:
        # A fresh awaitable per await: awaiting the handle twice does the network part twice
        # (harmless: it is idempotent) rather than failing on a spent coroutine.
        return self._finish().__await__()

    def __repr__(self) -> str:
        return f"Subscription(topic={self.topic!r}, expression={self.expression!r})"
