"""The actor base: one task owns a piece of state and drains a typed mailbox of commands.

Contract (docs/actors.md has the long form):

* Commands are frozen attrs classes. A command that needs an answer subclasses `Request[R]`
  and so carries a one-shot `Reply[R]` slot; anything else is a fire-and-forget command.
* `call` sends a request and waits for the handler's return value, or re-raises the
  handler's exception, with a deadline (`ActorTimeout` names the actor and the command).
* `cast` sends without waiting for an answer. It blocks while the mailbox is full (that is
  the backpressure); `cast_nowait` raises `MailboxFull` instead.
* An exception from a handler of a request goes to its caller and the actor carries on, so a
  handler must leave the state consistent when it raises (check first, then change). An
  exception from a handler of a cast crashes the actor: `run` raises it, the supervisor
  restarts the actor, and `on_start` rebuilds the state. The mailbox dies with the crash as in
  Erlang: requests still queued fail at once with `ActorCrashed`, queued casts are dropped
  (counted in `statistics().dropped`).
* While `run` is not running (never started, restarting after a crash, stopped) `call` and
  `cast` fail fast with `ActorStopped`; nobody waits on an actor that is not there.
"""

from __future__ import annotations

import enum
import logging
import typing
from typing import Any, Generic, TypeVar

import attrs
import trio

log = logging.getLogger("boltmq.actors")

C = TypeVar("C")
R = TypeVar("R")

DEFAULT_CALL_TIMEOUT = 3.0
"""Seconds `Actor.call` waits by default (RocketMQ's default request timeout)."""

DEFAULT_MAILBOX_SIZE = 1024


class ActorError(Exception):
    """Base of the errors the actor machinery raises (never of a handler's own errors)."""


class ActorStopped(ActorError):
    """The actor is not running, or stopped before it answered."""


class ActorCrashed(ActorStopped):
    """The actor crashed while the request was queued or being handled."""


class ActorTimeout(ActorError, TimeoutError):
    """The actor did not answer within the caller's deadline."""


class MailboxFull(ActorError):
    """`cast_nowait` found the mailbox full."""


class Reply(Generic[R]):
    """A one-shot reply slot: set once by the actor, awaited once by the caller."""

    __slots__ = ("_error", "_event", "_value", "claimed")

    def __init__(self) -> None:
        self._event = trio.Event()
        self._value: R | None = None
        self._error: BaseException | None = None
        # Set by `Actor.call`: a slot is good for one call only.
        self.claimed = False

    @property
    def done(self) -> bool:
        """Whether a result or an error has been set."""
        return self._event.is_set()

    def set_result(self, value: R) -> None:
        """Deliver the answer (ignored when the slot is already set)."""
        if not self._event.is_set():
            self._value = value
            self._event.set()

    def set_error(self, error: BaseException) -> None:
        """Deliver an exception for the caller to raise (ignored when already set)."""
        if not self._event.is_set():
            self._error = error
            self._event.set()

    async def wait(self) -> R:
        """Wait for the answer; raises the delivered exception, if any."""
        await self._event.wait()
        if self._error is not None:
            raise self._error
        return typing.cast(R, self._value)


@attrs.frozen
class Request(Generic[R]):
    """Base of commands that expect an answer of type ``R``; carries the reply slot.

    Subclasses are frozen attrs classes too::

        @attrs.frozen
        class GetRoute(Request[TopicRouteData]):
            topic: str
    """

    reply: Reply[R] = attrs.field(factory=Reply, kw_only=True, eq=False, repr=False)


class ActorStatus(enum.StrEnum):
    """Where an actor is in its life."""

    IDLE = "idle"  # never started
    RUNNING = "running"
    CLOSING = "closing"  # aclose() called: draining what is queued, taking nothing new
    STOPPED = "stopped"  # run() returned or raised; a supervisor may run it again


@attrs.frozen
class ActorStatistics:
    """An actor's counters at one moment.

    Subclasses extend it with their own fields and return it from their `statistics()`::

        @attrs.frozen
        class StoreWriterStatistics(ActorStatistics):
            batches: int

        def statistics(self) -> StoreWriterStatistics:
            return StoreWriterStatistics(**self._statistics_fields(), batches=self._batches)
    """

    name: str
    status: ActorStatus
    mailbox_size: int
    mailbox_used: int
    senders_waiting: int
    commands_handled: int
    errors: int
    restarts: int
    dropped: int


class _Close:
    """The mailbox sentinel `aclose` sends: handle what came before me, then stop."""


_CLOSE = _Close()


class Actor(Generic[C]):
    """Owns its state and handles commands of type ``C`` one at a time, in arrival order.

    Subclasses implement `handle` (and `on_start` when they hold state that a restart must
    rebuild). ``batch_limit`` > 1 lets `handle_batch` see up to that many queued commands at
    once (the store writer's group commit); the default handles them one by one.
    """

    def __init__(
        self, name: str, *, mailbox_size: int = DEFAULT_MAILBOX_SIZE, batch_limit: int = 1
    ) -> None:
        if mailbox_size < 1:
            raise ValueError(f"actor {name}: mailbox_size must be at least 1")
        if batch_limit < 1:
            raise ValueError(f"actor {name}: batch_limit must be at least 1")
        self.name = name
        self.mailbox_size = mailbox_size
        self.batch_limit = batch_limit
        # The mailbox outlives a run: a restarted actor keeps its address.
        send, receive = trio.open_memory_channel[C | _Close](mailbox_size)
        self._send: trio.MemorySendChannel[C | _Close] = send
        self._receive: trio.MemoryReceiveChannel[C | _Close] = receive
        self._status = ActorStatus.IDLE
        self._stopped = trio.Event()
        self._current: list[C] = []
        self._after_close: list[C | _Close] = []
        self._crashed_command: object = None
        self._starts = 0
        self._handled = 0
        self._errors = 0
        self._dropped = 0

    # -- what subclasses implement --------------------------------------------------------

    async def handle(self, command: C) -> Any:
        """Handle one command; the return value answers a `Request`."""
        raise NotImplementedError

    async def handle_batch(self, commands: list[C]) -> None:
        """Handle commands received together; override for group work, answering each
        request through ``command.reply`` (the default calls `handle` one by one)."""
        for command in commands:
            await self._handle_one(command)

    #: Command types whose loss at a stop is expected (counted, not warned about).
    quiet_drops: tuple[type, ...] = ()

    def on_dropped(self, command: object) -> None:
        """Called for each queued command that is not a `Request` when the actor stops
        without handling it (a command with a callback can answer it here)."""

    async def on_start(self) -> None:
        """Called at the start of every run, before readiness: (re)build the owned state."""

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def status(self) -> ActorStatus:
        """Where the actor is in its life."""
        return self._status

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the actor: `on_start`, report ready, then handle commands until cancelled.

        Returns normally after `aclose`; raises what a cast handler raised (a crash).
        """
        if self._status in (ActorStatus.RUNNING, ActorStatus.CLOSING):
            raise RuntimeError(f"actor {self.name} is already running")
        self._starts += 1
        self._stopped = trio.Event()
        crash: BaseException | None = None
        try:
            await self.on_start()
            self._status = ActorStatus.RUNNING
            task_status.started()
            await self._serve()
        except Exception as exc:
            crash = exc
            raise
        finally:
            self._status = ActorStatus.STOPPED
            self._abandon(crash)
            self._stopped.set()

    async def aclose(self) -> None:
        """Stop taking commands, let the actor handle what is queued, wait until it stops."""
        if self._status is not ActorStatus.RUNNING:
            if self._status is ActorStatus.CLOSING:
                await self._stopped.wait()
            return
        self._status = ActorStatus.CLOSING
        await self._send.send(_CLOSE)
        await self._stopped.wait()

    # -- sending --------------------------------------------------------------------------

    async def call(self, request: Request[R], timeout: float = DEFAULT_CALL_TIMEOUT) -> R:
        """Send a request and wait at most ``timeout`` seconds for its answer.

        Raises the handler's exception, `ActorTimeout`, or `ActorStopped`/`ActorCrashed`.
        The deadline covers the wait for mailbox space as well as the handling.
        """
        reply = request.reply
        if reply.claimed:
            raise ValueError(f"{type(request).__name__}: a request's reply slot is one-shot")
        reply.claimed = True
        self._check_accepting(request)
        command = typing.cast(C, request)
        with trio.move_on_after(timeout):
            try:
                self._send.send_nowait(command)
            except trio.WouldBlock:
                await self._send.send(command)
            return await reply.wait()
        raise ActorTimeout(
            f"actor {self.name} did not answer {type(request).__name__} within {timeout:g} s "
            f"(mailbox {self._used()}/{self.mailbox_size} used)"
        )

    async def cast(self, command: C) -> None:
        """Send a command without waiting for it to be handled; blocks while the mailbox is full."""
        self._check_accepting(command)
        try:
            self._send.send_nowait(command)
        except trio.WouldBlock:
            await self._send.send(command)

    def cast_nowait(self, command: C) -> None:
        """Send a command without blocking; raises `MailboxFull` when there is no room."""
        self._check_accepting(command)
        try:
            self._send.send_nowait(command)
        except trio.WouldBlock:
            raise MailboxFull(
                f"actor {self.name}: mailbox full ({self.mailbox_size} commands queued), "
                f"{type(command).__name__} not sent"
            ) from None

    # -- statistics -----------------------------------------------------------------------

    def statistics(self) -> ActorStatistics:
        """The actor's counters; subclasses may return a subclass of `ActorStatistics`."""
        return ActorStatistics(**self._statistics_fields())

    def _statistics_fields(self) -> dict[str, Any]:
        """The base fields of `ActorStatistics`, for subclasses building a larger record."""
        channel = self._send.statistics()
        return {
            "name": self.name,
            "status": self._status,
            "mailbox_size": self.mailbox_size,
            "mailbox_used": channel.current_buffer_used,
            "senders_waiting": channel.tasks_waiting_send,
            "commands_handled": self._handled,
            "errors": self._errors,
            "restarts": max(0, self._starts - 1),
            "dropped": self._dropped,
        }

    # -- internals ------------------------------------------------------------------------

    async def _serve(self) -> None:
        receive = self._receive
        limit = self.batch_limit
        while True:
            first = await receive.receive()
            batch: list[C | _Close] = [first]
            while len(batch) < limit:
                try:
                    batch.append(receive.receive_nowait())
                except trio.WouldBlock:
                    break
            closing = False
            for index, command in enumerate(batch):
                if isinstance(command, _Close):
                    # Whatever came after the sentinel is failed by _abandon.
                    self._current = typing.cast(list[C], batch[:index])
                    self._after_close = batch[index + 1 :]
                    closing = True
                    break
            else:
                self._current = typing.cast(list[C], batch)
            if self._current:
                await self.handle_batch(self._current)
                self._handled += len(self._current)
                self._current = []
            if closing:
                return

    async def _handle_one(self, command: C) -> None:
        reply = command.reply if isinstance(command, Request) else None
        try:
            result = await self.handle(command)
        except Exception as exc:
            self._errors += 1
            if reply is None:
                self._crashed_command = command
                raise
            reply.set_error(exc)
        else:
            if reply is not None:
                reply.set_result(result)

    def _abandon(self, crash: BaseException | None) -> None:
        """Fail every request this run will not answer: in hand, after the sentinel, queued."""
        leftovers: list[object] = [*self._current, *self._after_close]
        crashed, self._crashed_command = self._crashed_command, None
        self._current = []
        self._after_close = []
        while True:
            try:
                leftovers.append(self._receive.receive_nowait())
            except trio.WouldBlock:
                break
        dropped = 0
        for command in leftovers:
            if isinstance(command, Request):
                if not command.reply.done:
                    command.reply.set_error(self._stop_error(command, crash))
            elif not isinstance(command, _Close) and command is not crashed:
                self._dropped += 1
                if not isinstance(command, self.quiet_drops):
                    dropped += 1
                try:
                    self.on_dropped(command)
                except Exception:
                    log.exception("actor %s: on_dropped failed", self.name)
        if dropped:
            log.warning("actor %s: %d queued commands dropped as it stopped", self.name, dropped)

    def _stop_error(self, request: Request[Any], crash: BaseException | None) -> ActorStopped:
        what = type(request).__name__
        if crash is not None:
            return ActorCrashed(f"actor {self.name} crashed before answering {what}: {crash!r}")
        return ActorStopped(f"actor {self.name} stopped before answering {what}")

    def _check_accepting(self, command: object) -> None:
        if self._status is not ActorStatus.RUNNING:
            raise ActorStopped(
                f"actor {self.name} is {self._status.value}: {type(command).__name__} not sent"
            )

    def _used(self) -> int:
        return self._send.statistics().current_buffer_used
