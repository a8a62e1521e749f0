"""One remoting connection: frame reader, coalescing writer, request dispatch, pending calls.

The same class serves both ends. A server's connection dispatches the peer's requests to the
`Dispatcher`; a client's connection mostly matches responses to its pending calls by opaque,
but also dispatches requests the peer sends it (a broker calls its clients).

Batching rules (trio and asyncio pay per call, see docs/remoting.md): the reader parses every
complete frame one receive delivers; synchronous handlers run inline with no task spawn; the
writer sends every reply that is ready in one send.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import inspect
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeAlias

import anyio
import anyio.abc
import anyio.lowlevel
import attrs
import sniffio
import trio

from protocol.codes import RequestCode, ResponseCode
from protocol.command import (
    ConnectionClosedError,
    RemotingCommand,
    RemotingError,
    RemotingTimeoutError,
)
from protocol.frame import DEFAULT_FRAME_LIMIT, FrameDecoder, FrameError, decode, encode_parts
from protocol.transport import FrameTransport, Part

log = logging.getLogger("boltmq.remoting")

_SEND_ERRORS = (
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    OSError,
)

SyncHandler: TypeAlias = Callable[
    ["Connection", RemotingCommand], "RemotingCommand | Later | None"
]
AsyncHandler: TypeAlias = Callable[
    ["Connection", RemotingCommand], Awaitable[RemotingCommand | None]
]
Handler: TypeAlias = SyncHandler | AsyncHandler


class Later:
    """What a plain handler returns when it cannot answer inline after all (a pull with
    nothing to read yet, to be held): the connection runs ``handler`` in a task of its own, as
    it runs an ``async def`` handler, and sends what it returns. The common case stays inline
    and spawns no task."""

    __slots__ = ("handler",)

    def __init__(self, handler: AsyncHandler) -> None:
        self.handler = handler


CloseListener: TypeAlias = Callable[["Connection"], None]
#: Checks a request before its handler: None lets it through, a command is the refusal.
Guard: TypeAlias = Callable[["Connection", RemotingCommand], RemotingCommand | None]


#: Requests dispatched from one receive before the reader lets other tasks run.
DISPATCH_SLICE = 16


def code_name(code: int) -> str:
    """A request code's RocketMQ name, or the number when unknown."""
    try:
        return RequestCode(code).name
    except ValueError:
        return str(code)


class Dispatcher:
    """Maps request codes to handlers; knows nothing of sockets.

    A plain function is called inline by the connection's reader (cheapest: use it for answers
    that need no waiting); an ``async def`` runs in a task of its own so a slow request does
    not delay the others, and its answer goes out when it is ready. A plain function that only
    sometimes has to wait (a pull: held when there is nothing to read) returns a `Later` then.
    """

    def __init__(self) -> None:
        self._handlers: dict[int, tuple[bool, Handler]] = {}
        self._unguarded: dict[int, Handler] = {}
        self._guard: Guard | None = None
        #: Codes asked for that are not served, each logged once (with the first asker).
        self.unsupported_codes: set[int] = set()

    def register(self, code: int, handler: Handler) -> None:
        """Serve ``code`` with ``handler`` (replacing any previous one)."""
        self._unguarded[int(code)] = handler
        is_async = inspect.iscoroutinefunction(handler)
        if not is_async and inspect.iscoroutinefunction(type(handler).__call__):
            # An object whose __call__ is async: called inline, its coroutine would be taken
            # for the answer (and end the connection's task), so bind it as the method it is.
            handler = functools.partial(type(handler).__call__, handler)
            is_async = True
        if self._guard is not None:
            handler = _guarded(self._guard, handler, is_async)
        self._handlers[int(code)] = (is_async, handler)

    def install_guard(self, guard: Guard) -> None:
        """Run ``guard`` before every handler, now and later registered (the ACL check).

        The guard returns None to let the request through, or the refusal to answer with. The
        handlers are wrapped once here, so a dispatcher without a guard pays nothing per request.
        """
        self._guard = guard
        for code, handler in list(self._unguarded.items()):
            self.register(code, handler)

    def lookup(self, code: int) -> tuple[bool, Handler] | None:
        """(is_async, handler) for a code, or None when the code is not served."""
        return self._handlers.get(code)

    def codes(self) -> list[int]:
        """Every code served, sorted."""
        return sorted(self._handlers)

    def note_unsupported(self, code: int, peer: str, language: object, version: int) -> None:
        """Log, once per code, that a client asked for a code not served here: an operator
        sees what a client needs (the client is answered REQUEST_CODE_NOT_SUPPORTED)."""
        if code in self.unsupported_codes:
            return
        self.unsupported_codes.add(code)
        name = getattr(language, "name", language)
        log.warning(
            "request code %d from %s (language %s, version %d) is not supported here; "
            "answered REQUEST_CODE_NOT_SUPPORTED (logged once per code)",
            code, peer, name, version,
        )  # fmt: skip


def _guarded(guard: Guard, handler: Handler, is_async: bool) -> Handler:
    if is_async:

        async def guarded_async(
            connection: Connection, request: RemotingCommand
        ) -> RemotingCommand | None:
            refusal = guard(connection, request)
            if refusal is not None:
                return refusal
            return await handler(connection, request)  # type: ignore[misc,no-any-return]

        return guarded_async

    def guarded(
        connection: Connection, request: RemotingCommand
    ) -> RemotingCommand | Later | None:
        refusal = guard(connection, request)
        if refusal is not None:
            return refusal
        return handler(connection, request)  # type: ignore[return-value]

    return guarded


class _Event(Protocol):
    def set(self) -> None: ...
    def wait(self) -> Awaitable[Any]: ...


class _FutureEvent:
    """A one-shot event on one asyncio future: what a call waits on under asyncio.

    asyncio.Event builds a waiter list and a future per wait; a call waits once, so the future
    alone does (measured: about a microsecond less per call).
    """

    __slots__ = ("_future",)

    def __init__(self, future: Any) -> None:
        self._future = future

    def set(self) -> None:
        future = self._future
        if not future.done():  # cancelled when the caller's scope was
            future.set_result(None)

    def wait(self) -> Awaitable[Any]:
        return self._future  # type: ignore[no-any-return]


class _Pending:
    __slots__ = ("error", "event", "response")

    def __init__(self, event: _Event) -> None:
        self.event = event
        self.response: RemotingCommand | None = None
        self.error: BaseException | None = None


def _native_primitives() -> tuple[Callable[[], _Event], Callable[[], float]]:
    # anyio.Event() looks the backend up on every construction; a call waits on one event,
    # so take the running library's own Event and clock once per connection.
    if sniffio.current_async_library() == "trio":
        return trio.Event, trio.current_time
    import asyncio

    loop = asyncio.get_running_loop()
    create_future = loop.create_future
    return lambda: _FutureEvent(create_future()), loop.time


class Connection:
    """A remoting connection over one transport; `run` drives it until it closes."""

    def __init__(
        self,
        transport: FrameTransport,
        dispatcher: Dispatcher | None = None,
        *,
        frame_limit: int = DEFAULT_FRAME_LIMIT,
        max_in_flight: int = 1024,
        idle_timeout: float | None = None,
        close_listeners: list[CloseListener] | None = None,
    ) -> None:
        self.transport = transport
        self.peer = transport.peer
        self.dispatcher = dispatcher or Dispatcher()
        self.frame_limit = frame_limit
        self.max_in_flight = max_in_flight
        self.idle_timeout = idle_timeout
        #: Free-form per-connection state for handlers (client id, language, ...).
        self.attributes: dict[str, Any] = {}
        self._close_listeners = close_listeners if close_listeners is not None else []
        self._decoder = FrameDecoder(frame_limit)
        self._pending: dict[int, _Pending] = {}
        self._new_event, self._now = _native_primitives()
        self._deadlines: list[tuple[float, int, float, int]] = []
        self._sweep_target = math.inf
        self._sweep_wake = anyio.Event()
        self._outbox: list[list[Part]] = []
        # The running library's own event: anyio.Event() looks the backend up each time.
        self._wake_writer: _Event = self._new_event()
        self._sending = False
        # True while the reader dispatches one receive's frames: it sends their answers itself
        # right after, so queuing one need not wake the writer task (a task switch a receive).
        self._reader_flushes = False
        self._drained: anyio.Event | None = None
        self._room = anyio.Event()
        self._in_flight = 0
        self._later = 0  # requests a plain handler answers Later (held pulls): not bounded here
        self._task_group: anyio.abc.TaskGroup | None = None
        # Starts a request's task (`_run_async`, `_run_later`): see `run`.
        self._spawn: Callable[..., object] | None = None
        self._closed = False
        self._started = anyio.Event()
        self._last_activity = 0.0
        self.requests_handled = 0
        self.close_reason: str | None = None
        #: Called on every request this side sends (the ACL signature); None = send as is.
        self.request_hook: Callable[[RemotingCommand], None] | None = None

    # ----------------------------------------------------------------- lifetime

    @property
    def over_websocket(self) -> bool:
        """True when the peer came over websocket (its transport carries one frame a message)."""
        return self.transport.message_framed

    @property
    def closed(self) -> bool:
        """True once the connection stopped; sends fail from then on."""
        return self._closed

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve the connection until the peer goes away, a frame is bad, or `close` is called."""
        self._last_activity = anyio.current_time()
        try:
            async with anyio.create_task_group() as tg:
                self._task_group = tg
                tg.start_soon(self._writer)
                tg.start_soon(self._deadline_sweeper)
                if self.idle_timeout:
                    tg.start_soon(self._idle_watchdog, self.idle_timeout)
                async with self._request_tasks(tg):
                    self._started.set()
                    task_status.started()
                    await self._reader()
                    tg.cancel_scope.cancel()
        finally:
            await self._shutdown()

    @contextlib.asynccontextmanager
    async def _request_tasks(self, tg: anyio.abc.TaskGroup) -> AsyncIterator[None]:
        """Where requests' tasks start while the connection runs (`_spawn`). Under trio a
        nursery of their own inside ``tg``: its start_soon costs about 4 us where anyio's
        costs about 14, and a held pull is one task each, thousands a second on a busy
        broker."""
        if sniffio.current_async_library() == "trio":
            async with trio.open_nursery() as requests:
                self._spawn = requests.start_soon
                yield
        else:
            self._spawn = tg.start_soon
            yield

    def close(self, reason: str = "closed locally") -> None:
        """Ask the connection to stop; `run` returns once it has."""
        if self.close_reason is None:
            self.close_reason = reason
        if self._task_group is not None:
            self._task_group.cancel_scope.cancel()

    async def _shutdown(self) -> None:
        self._closed = True
        error = ConnectionClosedError(
            f"connection to {self.peer} closed ({self.close_reason or 'peer went away'})"
        )
        for pending in self._pending.values():
            pending.error = error
            pending.event.set()
        self._pending.clear()
        self._room.set()
        if self._drained is not None:
            self._drained.set()
        with anyio.CancelScope(shield=True):
            try:
                with anyio.move_on_after(1):
                    await self.transport.aclose()
            except Exception:
                pass
        for listener in self._close_listeners:
            try:
                listener(self)
            except Exception:
                log.exception("close listener %r failed for %s", listener, self.peer)

    # ----------------------------------------------------------------- calls to the peer

    async def invoke(self, request: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Send a request and wait for its response, at most ``timeout`` seconds."""
        if self._closed:
            raise ConnectionClosedError(f"connection to {self.peer} is closed")
        if self.request_hook is not None:
            self.request_hook(request)
        pending = _Pending(self._new_event())
        opaque = request.opaque
        deadline = self._now() + timeout
        # One sweeper task enforces every call's deadline: a cancel scope per call would cost
        # more than the rest of the round trip (measured with pyinstrument). The entry holds
        # plain numbers only (int(code), not the enum member), so the garbage collector stops
        # tracking it at its first pass instead of counting it towards a full collection.
        heapq.heappush(self._deadlines, (deadline, opaque, timeout, int(request.code)))
        if deadline < self._sweep_target:
            self._sweep_wake.set()
        self._pending[opaque] = pending
        try:
            self._enqueue(request)
            await pending.event.wait()
        finally:
            self._pending.pop(opaque, None)
            if len(self._deadlines) > 2 * len(self._pending) + 1024:
                self._drop_answered_deadlines()
        if pending.error is not None:
            raise pending.error
        assert pending.response is not None
        return pending.response

    def _drop_answered_deadlines(self) -> None:
        """Answered calls leave their deadline in the heap; drop them in one pass. Done from
        the call path every ~1,000 calls: left to the sweeper, which wakes only at the
        earliest deadline, the heap held a timeout's worth of calls (70,000 at 23,000 calls/s)
        and full collections walking them paused the client 12-35 ms each."""
        pending_calls = self._pending
        live = [entry for entry in self._deadlines if entry[1] in pending_calls]
        heapq.heapify(live)
        self._deadlines[:] = live

    async def _deadline_sweeper(self) -> None:
        heap = self._deadlines
        pending_calls = self._pending
        while True:
            now = anyio.current_time()
            while heap and heap[0][0] <= now:
                _, opaque, timeout, code = heapq.heappop(heap)
                pending = pending_calls.pop(opaque, None)
                if pending is not None:
                    pending.error = RemotingTimeoutError(
                        f"no response to {code_name(code)} (opaque {opaque}) from {self.peer} "
                        f"within {timeout:g}s"
                    )
                    pending.event.set()
            self._sweep_target = heap[0][0] if heap else math.inf
            self._sweep_wake = anyio.Event()
            with anyio.move_on_after(self._sweep_target - now):
                await self._sweep_wake.wait()

    def send_oneway(self, request: RemotingCommand) -> None:
        """Send a oneway request (the peer must not answer)."""
        if self._closed:
            raise ConnectionClosedError(f"connection to {self.peer} is closed")
        request.flag |= 0x2
        if self.request_hook is not None:
            self.request_hook(request)
        self._enqueue(request)

    def send(self, command: RemotingCommand) -> None:
        """Queue any command (e.g. a late response) for the writer."""
        if self._closed:
            raise ConnectionClosedError(f"connection to {self.peer} is closed")
        self._enqueue(command)

    def send_frame(self, frame: bytes) -> None:
        """Queue one whole encoded frame, prefix included (`protocol.frame.encode_answer`)."""
        if self._closed:
            raise ConnectionClosedError(f"connection to {self.peer} is closed")
        self._outbox.append([frame])
        if not self._reader_flushes:
            self._wake_writer.set()

    def _enqueue(self, command: RemotingCommand) -> None:
        head, body = encode_parts(command)
        self._outbox.append([head] if body is None else [head, body])
        if not self._reader_flushes:
            self._wake_writer.set()

    # ----------------------------------------------------------------- reader / writer

    async def _reader(self) -> None:
        transport = self.transport
        decoder = self._decoder
        framed = transport.message_framed
        while True:
            try:
                data = await transport.receive_some()
                if not data:
                    self.close_reason = self.close_reason or "peer closed the connection"
                    return
                self._last_activity = self._now()
                commands = [decode(data, self.frame_limit)] if framed else decoder.feed(data)
            except FrameError as exc:
                self.close_reason = f"bad frame: {exc}"
                log.warning("closing connection from %s: %s", self.peer, exc)
                return
            self._reader_flushes = True
            for index, command in enumerate(commands, 1):
                if index % DISPATCH_SLICE == 0 and index < len(commands):
                    # Let the requests dispatched so far be answered before the rest: the
                    # peer then works on those answers while this side handles the rest,
                    # instead of both sides taking turns with whole receives.
                    if self._outbox and not self._sending and not await self._flush():
                        return
                    await anyio.lowlevel.checkpoint()
                if command.is_response:
                    pending = self._pending.get(command.opaque)
                    if pending is not None:
                        pending.response = command
                        pending.event.set()
                    else:
                        log.debug(
                            "late or unknown response opaque %d from %s", command.opaque, self.peer
                        )
                else:
                    self._dispatch(command)
            self._reader_flushes = False
            # Answers of inline handlers go out from here: handing them to the writer task
            # would add a scheduler round trip to every sequential request.
            if self._outbox and not self._sending and not await self._flush():
                return
            while self._in_flight >= self.max_in_flight:
                # Backpressure: stop reading until handlers finish; the peer's sends then block.
                self._room = anyio.Event()
                await self._room.wait()

    async def _writer(self) -> None:
        while True:
            if not self._outbox or self._sending:
                await self._wake_writer.wait()
                self._wake_writer = self._new_event()
                continue
            if not await self._flush():
                return

    async def _flush(self) -> bool:
        """Send everything queued in one send; False when the connection broke."""
        frames, self._outbox = self._outbox, []
        self._sending = True
        try:
            await self.transport.send_frames(frames)
        except _SEND_ERRORS as exc:
            self.close(f"send failed: {exc!r}")
            return False
        finally:
            self._sending = False
        self._last_activity = self._now()
        if self._outbox:
            self._wake_writer.set()
        elif self._drained is not None:
            self._drained.set()
        return True

    async def drain(self) -> None:
        """Wait until every queued frame went to the transport (or the connection closed).

        A server that is stopping calls it so answers it just queued (held pulls released at
        shutdown) reach the peer before the connection is cancelled.
        """
        while (self._outbox or self._sending) and not self._closed:
            self._drained = anyio.Event()
            await self._drained.wait()

    async def _idle_watchdog(self, idle: float) -> None:
        while True:
            deadline = self._last_activity + idle
            now = anyio.current_time()
            if now >= deadline:
                log.info("closing connection from %s: idle for %.0fs", self.peer, idle)
                self.close(f"idle for {idle:g}s")
                return
            await anyio.sleep(deadline - now)

    # ----------------------------------------------------------------- dispatch

    def _dispatch(self, request: RemotingCommand) -> None:
        entry = self.dispatcher.lookup(request.code)
        if entry is None:
            self.dispatcher.note_unsupported(
                request.code, self.peer, request.language, request.version
            )
            if not request.is_oneway:
                self._enqueue(
                    request.response(
                        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                        f" request type {request.code} not supported",
                    )
                )
            return
        is_async, handler = entry
        if is_async:
            self._in_flight += 1
            assert self._spawn is not None
            self._spawn(self._run_async, handler, request)
            return
        try:
            response = handler(self, request)
        except Exception as exc:
            response = self._error_response(request, exc)
        if type(response) is Later:
            # Not counted against max_in_flight: whoever answers Later bounds those requests
            # (the broker holds at most maxHeldPulls pulls), and a consumer holding a pull for
            # each of a thousand queues must still get its heartbeats and commits read.
            self._later += 1
            assert self._spawn is not None
            self._spawn(self._run_later, response.handler, request)
            return
        self.requests_handled += 1
        if response is not None and not request.is_oneway:
            self._enqueue(response)  # type: ignore[arg-type]

    async def _run_async(self, handler: Handler, request: RemotingCommand) -> None:
        try:
            await self._answer_async(handler, request)
        finally:
            self._in_flight -= 1
            if self._in_flight < self.max_in_flight:
                self._room.set()

    async def _run_later(self, handler: AsyncHandler, request: RemotingCommand) -> None:
        try:
            await self._answer_async(handler, request)
        finally:
            self._later -= 1

    async def _answer_async(self, handler: Handler, request: RemotingCommand) -> None:
        try:
            response = await handler(self, request)  # type: ignore[misc]
        except Exception as exc:
            response = self._error_response(request, exc)
        self.requests_handled += 1
        if response is not None and not request.is_oneway and not self._closed:
            self._enqueue(response)

    def _error_response(self, request: RemotingCommand, exc: Exception) -> RemotingCommand:
        if isinstance(exc, RemotingError):
            return request.response(exc.code, exc.remark)
        log.exception(
            "handler for %s from %s failed", code_name(request.code), self.peer, exc_info=exc
        )
        return request.response(
            ResponseCode.SYSTEM_ERROR,
            f"{type(exc).__name__}: {exc} (while handling {code_name(request.code)})",
        )

    def statistics(self) -> ConnectionStatistics:
        """A snapshot of this connection's counters."""
        return ConnectionStatistics(
            peer=self.peer,
            in_flight=self._in_flight + self._later,
            pending_calls=len(self._pending),
            queued_frames=len(self._outbox),
            requests_handled=self.requests_handled,
            buffered_bytes=self._decoder.buffered,
            closed=self._closed,
        )


@attrs.frozen
class ConnectionStatistics:
    """Counters of one connection at one moment."""

    peer: str
    in_flight: int
    pending_calls: int
    queued_frames: int
    requests_handled: int
    buffered_bytes: int
    closed: bool
