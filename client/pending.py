"""A call under way that a caller may await: `SendHandle` and `RequestHandle` are this one shape."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Generic, TypeVar

import anyio

from client.message import Message

T = TypeVar("T")


class Pending(Generic[T]):
    """A call under way for ``message``: ``await`` it for its outcome, or its error raised."""

    __slots__ = ("_done", "_error", "_result", "message")

    def __init__(self, message: Message) -> None:
        self.message = message
        self._done = anyio.Event()
        self._result: T | None = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        """True once the call has its outcome or its error."""
        return self._done.is_set()

    async def wait(self) -> T:
        """Wait for the call; its outcome, or its error raised."""
        await self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def __await__(self) -> Generator[Any, None, T]:
        return self.wait().__await__()

    def _finish(self, result: T | None, error: BaseException | None) -> None:
        self._result, self._error = result, error
        self._done.set()
