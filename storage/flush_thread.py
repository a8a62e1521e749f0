"""The SYNC_FLUSH group commit's flush thread: one long-lived thread that runs fdatasync.

RocketMQ's GroupCommitService is a thread of its own that flushes while the put threads keep
appending. Here the group commit service is a trio task; it used to run each flush through
``trio.to_thread.run_sync``, whose hand-off (thread cache, capacity limiter, context copy,
the reschedule) cost about 55-65 us of CPU per flush in the trio thread, on the path of every
SYNC_FLUSH answer. `FlushThread` keeps one thread waiting on a condition variable instead: a
flush is one notify to start and one ``TrioToken.run_sync_soon`` to hand the outcome back.

Requests that arrive while a flush runs are served by the next one (each caller waits for a
flush that *starts* after its request, so the flush covers everything appended before it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import trio

__all__ = ["FlushRequest", "FlushThread"]


class FlushRequest:
    """One caller waiting for a flush: woken with the flush's error (None when it worked)."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.error: BaseException | None = None


class FlushThread:
    """Runs ``flush`` in a dedicated thread for trio callers (`request`, `wait`); `stop` ends it."""

    def __init__(self, flush: Callable[[], object], name: str = "commit-log-flush") -> None:
        self._flush = flush
        self._name = name
        self._condition = threading.Condition(threading.Lock())
        self._requests: list[FlushRequest] = []
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None

    def start(self) -> None:
        """Start the thread (from the trio thread whose callers it answers)."""
        self._token = trio.lowlevel.current_trio_token()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Let the thread end after the flush it may be running (never blocks)."""
        with self._condition:
            self._stopping = True
            self._condition.notify()
        self._thread = None

    def request(self) -> FlushRequest:
        """Ask for a flush that starts after this call; `wait` for it (or drop it)."""
        request = FlushRequest()
        with self._condition:
            if self._stopping or self._thread is None:
                raise RuntimeError("the commit log's flush thread is not running")
            self._requests.append(request)
            self._condition.notify()
        return request

    @staticmethod
    async def wait(request: FlushRequest) -> None:
        """Wait for ``request``'s flush; raises what the flush raised.

        Cancelled (a flush timeout), the caller stops waiting; the flush still runs and a
        later request is served by the next one."""
        await request.done.wait()
        if request.error is not None:
            raise request.error

    async def flush_once(self) -> None:
        """`request` a flush and `wait` for it."""
        await self.wait(self.request())

    def _run(self) -> None:
        condition = self._condition
        token = self._token
        assert token is not None
        while True:
            with condition:
                while not self._requests and not self._stopping:
                    condition.wait()
                if self._stopping:
                    requests, self._requests = self._requests, []
                    error: BaseException | None = RuntimeError("the store writer stopped")
                    self._answer(token, requests, error)
                    return
                requests, self._requests = self._requests, []
            error = None
            try:
                self._flush()
            except BaseException as exc:  # handed to the waiting trio task, raised there
                error = exc
            if not self._answer(token, requests, error):
                return

    @staticmethod
    def _answer(
        token: trio.lowlevel.TrioToken, requests: list[FlushRequest], error: BaseException | None
    ) -> bool:
        """Wake ``requests`` in the trio thread; False once that trio run has ended."""
        if not requests:
            return True
        try:
            token.run_sync_soon(_wake, requests, error)
        except trio.RunFinishedError:
            return False
        return True


def _wake(requests: list[FlushRequest], error: BaseException | None) -> None:
    for request in requests:
        request.error = error
        request.done.set()
