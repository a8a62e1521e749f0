"""Blocking facades for scripts and Spark executors: the async clients behind an anyio portal.

    with BlockingProducer("pg", namesrv_addr="127.0.0.1:9876") as producer:
        producer.send(Message("Orders", b"..."))

Each object runs an event loop in a thread of its own (``anyio.from_thread``) and calls into
it; the async client's context is entered and left inside that loop, in one task.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, Self

from anyio.from_thread import BlockingPortal, start_blocking_portal

from client.message import Message, SendResult
from client.producer import Producer
from client.pull_consumer import PullConsumer
from client.push_consumer import Listener, PushConsumer, PushConsumerStatistics
from client.selector import MessageSelector
from protocol.bodies import MessageQueue
from protocol.message import MessageExt


class _Blocking:
    """Owns the portal thread and the wrapped async client's context."""

    def __init__(self, backend: str) -> None:
        self._backend = backend
        self._stack: contextlib.ExitStack | None = None
        self._portal: BlockingPortal | None = None

    def _open(self, client: Any) -> None:
        stack = contextlib.ExitStack()
        try:
            portal = stack.enter_context(start_blocking_portal(self._backend))
            stack.enter_context(portal.wrap_async_context_manager(client))
        except BaseException:
            stack.close()
            raise
        self._stack, self._portal = stack, portal

    def _call(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        if self._portal is None:
            raise RuntimeError("not started: use 'with ...' or call start()")
        return self._portal.call(functools.partial(func, *args, **kwargs))

    def shutdown(self) -> None:
        """Leave the client's context (commit, unregister) and stop the loop thread."""
        stack, self._stack, self._portal = self._stack, None, None
        if stack is not None:
            stack.close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()

    def start(self) -> None:
        """Start the loop thread and the client."""
        raise NotImplementedError


class BlockingProducer(_Blocking):
    """`Producer` for code without an event loop; same arguments, blocking methods."""

    def __init__(self, group: str, *, backend: str = "asyncio", **options: Any) -> None:
        super().__init__(backend)
        self.producer = Producer(group, **options)

    def start(self) -> None:
        """Start the loop thread and the producer."""
        self._open(self.producer)

    def send(self, message: Message, **kwargs: Any) -> SendResult:
        """`Producer.send`, blocking."""
        result: SendResult = self._call(self.producer.send, message, **kwargs)
        return result

    def request(self, message: Message, timeout: float = 3.0) -> MessageExt:
        """`Producer.request`, blocking until the reply (or `RequestTimeout`)."""
        reply: MessageExt = self._call(self.producer.request, message, timeout)
        return reply

    def send_oneway(self, message: Message, **kwargs: Any) -> None:
        """`Producer.send_oneway`, blocking until written."""
        self._call(self.producer.send_oneway, message, **kwargs)

    def send_batch(self, messages: Sequence[Message], **kwargs: Any) -> SendResult:
        """`Producer.send_batch`, blocking."""
        result: SendResult = self._call(self.producer.send_batch, messages, **kwargs)
        return result

    def send_orderly(self, message: Message, sharding_key: Any, **kwargs: Any) -> SendResult:
        """`Producer.send_orderly`, blocking."""
        result: SendResult = self._call(self.producer.send_orderly, message, sharding_key, **kwargs)
        return result


class BlockingPullConsumer(_Blocking):
    """`PullConsumer` for code without an event loop; same arguments, blocking methods."""

    def __init__(self, group: str, *, backend: str = "asyncio", **options: Any) -> None:
        super().__init__(backend)
        self.consumer = PullConsumer(group, **options)

    def start(self) -> None:
        """Start the loop thread and the consumer."""
        self._open(self.consumer)

    def subscribe(
        self, topic: str, expression: str | MessageSelector = "*"
    ) -> list[MessageQueue]:
        """`PullConsumer.subscribe`, blocking."""
        queues: list[MessageQueue] = self._call(self.consumer.subscribe, topic, expression)
        return queues

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """`PullConsumer.assign`, blocking."""
        self._call(self.consumer.assign, list(queues))

    def poll(self, timeout: float = 5.0) -> list[MessageExt]:
        """`PullConsumer.poll`, blocking."""
        messages: list[MessageExt] = self._call(self.consumer.poll, timeout)
        return messages

    def seek(self, queue: MessageQueue, offset: int) -> None:
        """`PullConsumer.seek`."""
        self._call(self.consumer.seek, queue, offset)

    def commit(self, offsets: dict[MessageQueue, int] | None = None) -> None:
        """`PullConsumer.commit`, blocking."""
        self._call(self.consumer.commit, offsets)

    def committed(self, queue: MessageQueue) -> int | None:
        """`PullConsumer.committed`, blocking."""
        offset: int | None = self._call(self.consumer.committed, queue)
        return offset


class BlockingPushConsumer(_Blocking):
    """`PushConsumer` for code without an event loop: the consumer runs in the loop thread.

    An async listener runs in that thread's event loop; a plain function runs in its worker
    threads, as with the async consumer. ``subscribe`` before ``start`` (or ``with``).
    """

    def __init__(
        self, group: str, listener: Listener, *, backend: str = "asyncio", **options: Any
    ) -> None:
        super().__init__(backend)
        self.consumer = PushConsumer(group, listener, **options)

    def start(self) -> None:
        """Start the loop thread and the consumer (first rebalance done when this returns)."""
        self._open(self.consumer)

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """`PushConsumer.subscribe` (before or after start)."""
        if self._portal is None:
            self.consumer.subscribe(topic, expression)  # applied at once; nothing to await
        else:
            self._portal.call(self.consumer.subscribe, topic, expression)

    def assignment(self) -> list[MessageQueue]:
        """`PushConsumer.assignment`."""
        queues: list[MessageQueue] = self._portal_or_direct(self.consumer.assignment)
        return queues

    def statistics(self) -> PushConsumerStatistics:
        """`PushConsumer.statistics`."""
        stats: PushConsumerStatistics = self._portal_or_direct(self.consumer.statistics)
        return stats

    def _portal_or_direct(self, func: Any) -> Any:
        return func() if self._portal is None else self._portal.call(func)
