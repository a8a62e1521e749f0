"""The broker's tables as actors, and the JSON config files some of them are kept in.

`TableActor` is the base of the five table owners (topics, consumer offsets, subscription
groups, client connections, orderly locks). Each keeps its table in a plain state class (no I/O,
no clock) and is its only writer: a change is a command in its mailbox, applied by `apply`,
which is a plain function, so a change never awaits and is applied whole before the next
command. Readers read the state inline, between two awaits, without a hop (docs/actors.md).

A persisted table (``path`` given) is written from a worker thread (tmp + fsync + rename,
``.bak`` kept: `supervisors.config_file`) at most once per ``interval`` after a change, from a
snapshot the actor takes in its own task, and once more when the actor stops (also after a
crash). That batching is for the hot paths' casts (offset commits). An operator request that
changes a table uses `call_persisted` instead: it answers only once the file holds the change,
as RocketMQ persists before it answers, so a broker killed right after the answer still has
the change when it restarts. The file is loaded before the actor first runs (`load`). A
restart of the actor keeps the table (it lives on the instance); what each table loses is said
in its module.

`PersistedTable` is the older, plain form (no actor) the schedule service keeps its delay and
timer offsets in.
"""

from __future__ import annotations

import logging
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import attrs
import trio

from protocol.codes import ResponseCode
from protocol.command import RemotingError
from supervisors.actor import (
    Actor,
    ActorError,
    ActorStopped,
    Request,
)
from supervisors.config_file import load_json_config, save_json_config

log = logging.getLogger("boltmq.broker")

C = TypeVar("C")
R = TypeVar("R")

#: Commands a table actor drains in one scheduler pass (see `TableActor`).
TABLE_BATCH_LIMIT = 256
#: Mailbox of a table actor: casts come from synchronous handlers and must rarely be refused.
TABLE_MAILBOX_SIZE = 65536
#: Seconds a snapshot may wait for its turn in the mailbox before the flusher tries again.
_SNAPSHOT_TIMEOUT = 60.0
#: Seconds `TableActor.call_persisted` waits for the file write after the change.
PERSIST_TIMEOUT = 10.0


class TableWriteError(RemotingError):
    """The table changed in memory but its file could not be written (in time); answered to
    the operator as SYSTEM_ERROR with this remark."""

    def __init__(self, remark: str) -> None:
        super().__init__(ResponseCode.SYSTEM_ERROR, remark)


class TableState(Protocol):
    """What the file needs of a persisted table's plain state."""

    #: Bumped by every change; the file is written when it moved.
    version: int

    def to_json(self) -> bytes:
        """The file's content."""
        ...

    def from_json(self, data: bytes) -> None:
        """Load the file's content; raises on bad content."""
        ...


@attrs.frozen
class _TakeSnapshot(Request[tuple[int, bytes]]):
    """The table's version and file content, taken in the actor's task (the flusher asks)."""


@attrs.frozen
class _CallNowait(Generic[R]):
    """A request whose answer goes to a callback instead of a waiting caller."""

    request: Request[R]
    on_answer: Callable[[R], object]
    on_error: Callable[[Exception], object]


class TableActor(Actor[C | _TakeSnapshot | _CallNowait[Any]], Generic[C]):
    """The only writer of one broker table; subclasses implement `apply`.

    Commands are drained ``TABLE_BATCH_LIMIT`` at a time, so a burst of casts is applied in the
    scheduler pass right after it was queued. That is why a query that follows a cast on the
    same connection sees the change: the handler casts, then its reply is sent; trio's socket
    and websocket streams pass a schedule point after a send and again after a receive, so a
    request the client sends once it has the reply is dispatched two scheduler batches later at
    the earliest, while the actor, woken by the cast, runs in the very next batch (with no
    ``await`` inside `apply`, one pass applies everything queued, up to the limit).
    """

    #: Seconds between writes of a changed table (persisted tables only).
    interval: float = 0.2

    def __init__(
        self,
        name: str,
        state: TableState | None = None,
        path: Path | None = None,
        *,
        mailbox_size: int = TABLE_MAILBOX_SIZE,
        batch_limit: int = TABLE_BATCH_LIMIT,
    ) -> None:
        super().__init__(name, mailbox_size=mailbox_size, batch_limit=batch_limit)
        self.path = path if state is not None else None
        self._file_state = state
        self._seen_version = state.version if state is not None else 0
        self._written_version = self._seen_version
        self._dirty = trio.Event()
        # Set by a waiting `call_persisted`: the flusher writes at once, not after `interval`.
        self._urgent = trio.Event()
        # Set (and replaced) after every write attempt; `wait_written` waits on it.
        self._write_done = trio.Event()
        self._write_error: OSError | None = None
        self.file_writes = 0
        self.file_errors = 0

    # -- what subclasses implement --------------------------------------------------------

    def apply(self, command: C) -> Any:
        """Apply one command to the table; a plain function, so a change never awaits."""
        raise NotImplementedError

    def start_background(self, nursery: trio.Nursery) -> None:
        """Start the actor's own periodic tasks (a scanner) beside it, for this run."""

    # -- sending --------------------------------------------------------------------------

    def call_nowait(
        self,
        request: Request[R],
        on_answer: Callable[[R], object],
        on_error: Callable[[Exception], object],
    ) -> None:
        """Send a request without waiting: the actor hands its answer to ``on_answer`` (or
        the handler's error, or `ActorStopped` when it stops first, to ``on_error``) in its
        own task. For synchronous handlers, which cannot await `call`, as the store writer's
        callbacks. Raises `ActorStopped` or `MailboxFull` at once when it cannot be sent."""
        self.cast_nowait(_CallNowait(request, on_answer, on_error))

    async def call_persisted(self, request: Request[R], timeout: float = 3.0) -> R:
        """`call`, then `wait_written`: for operator requests, answered once the change is
        on disk. Raises `TableWriteError` when the file cannot be written in time."""
        result = await self.call(request, timeout=timeout)
        await self.wait_written()
        return result

    async def wait_written(self, timeout: float = PERSIST_TIMEOUT) -> None:
        """Wait until the file holds every change applied so far, asking the flusher to
        write now. No-op for a table without a file.

        Raises `TableWriteError` when a write fails, or none is done within ``timeout``
        seconds; the change stays applied in memory and later writes retry it.
        """
        state = self._file_state
        if state is None or self.path is None:
            return
        target = state.version
        with trio.move_on_after(timeout):
            while self._written_version < target:
                self._urgent.set()
                done = self._write_done
                await done.wait()
                if self._written_version < target and self._write_error is not None:
                    raise TableWriteError(
                        f"{self.name}: the change is applied but could not be written to "
                        f"{self.path}: {self._write_error}; it will be written again, check "
                        "the disk"
                    )
            return
        raise TableWriteError(
            f"{self.name}: the change is applied but {self.path} was not written within "
            f"{timeout:g} s; it will be written later, check the disk and the broker's load"
        )

    # -- the file -------------------------------------------------------------------------

    def load(self) -> bool:
        """Read the file (or its .bak) into the table before the actor first runs; False
        when there is none. Raises `ConfigFileError` when neither copy parses."""
        state = self._file_state
        if state is None or self.path is None:
            return False
        loaded = load_json_config(self.path, _parser(state)) is not None
        self._seen_version = self._written_version = state.version
        return loaded

    def persist(self) -> None:
        """Write the file now (blocking); for the broker's start, before the actor runs."""
        state = self._file_state
        if state is None or self.path is None:
            return
        version = state.version
        save_json_config(self.path, state.to_json())
        self._written_version = version
        self.file_writes += 1

    # -- life -----------------------------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Apply commands until closed; the flusher (and `start_background`'s tasks) beside
        it. Writes the table once more as it stops, however it stops."""
        try:
            async with trio.open_nursery() as nursery:
                if self.path is not None:
                    nursery.start_soon(self._flusher)
                self.start_background(nursery)
                await super().run(task_status=task_status)
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The crash itself, not the nursery's wrapper, is what the supervisor reports.
            if len(group.exceptions) == 1:
                inner = group.exceptions[0]
                raise inner from inner.__cause__
            raise
        finally:
            self._write_at_stop()

    async def handle(self, command: C | _TakeSnapshot | _CallNowait[Any]) -> Any:
        """Apply a command (or answer the flusher's snapshot request)."""
        if isinstance(command, _CallNowait):
            self._answer_by_callback(command)
            return None
        if isinstance(command, _TakeSnapshot):
            state = self._file_state
            assert state is not None
            return state.version, state.to_json()
        try:
            return self.apply(command)
        finally:
            self._note_change()

    def on_dropped(self, command: object) -> None:
        """A `call_nowait` the actor will not answer gets `ActorStopped` through its callback."""
        # The kernel also passes commands of the crashed batch that were handled before the
        # crash: their reply slot says so.
        if isinstance(command, _CallNowait) and not command.request.reply.done:
            what = type(command.request).__name__
            error = ActorStopped(f"actor {self.name} stopped before answering {what}")
            command.request.reply.set_error(error)
            _safely(command.on_error, error)

    # -- internals ------------------------------------------------------------------------

    def _answer_by_callback(self, command: _CallNowait[Any]) -> None:
        # The request's own reply slot records that it was answered (see `on_dropped`).
        reply = command.request.reply
        try:
            result = self.apply(typing.cast(C, command.request))
        except Exception as exc:
            self._note_change()
            reply.set_error(exc)
            _safely(command.on_error, exc)
            return
        self._note_change()
        reply.set_result(result)
        _safely(command.on_answer, result)

    def _note_change(self) -> None:
        state = self._file_state
        if state is not None and state.version != self._seen_version:
            self._seen_version = state.version
            self._dirty.set()

    async def _flusher(self) -> None:
        while True:
            await self._dirty.wait()
            with trio.move_on_after(self.interval):
                await self._urgent.wait()
            self._urgent = trio.Event()
            # Changes from here on set the new event: the next round writes them.
            self._dirty = trio.Event()
            try:
                version, data = await self.call(_TakeSnapshot(), timeout=_SNAPSHOT_TIMEOUT)
            except ActorStopped:
                return  # stopping or crashed: `run` writes the table as it ends
            except ActorError as exc:
                log.warning("%s: no snapshot for %s (%s); trying again", self.name, self.path, exc)
                self._dirty.set()
                continue
            if version == self._written_version:
                self._wrote(None)
                continue
            assert self.path is not None
            try:
                await trio.to_thread.run_sync(save_json_config, self.path, data)
            except OSError as exc:
                # The table stays changed in memory: the next round writes it again.
                self.file_errors += 1
                log.error("could not write %s: %s; trying again", self.path, exc)
                self._dirty.set()
                self._wrote(exc)
                continue
            self._written_version = max(self._written_version, version)
            self.file_writes += 1
            self._wrote(None)

    def _wrote(self, error: OSError | None) -> None:
        # Wakes the `wait_written` callers, who check whether their version is on disk.
        self._write_error = error
        done, self._write_done = self._write_done, trio.Event()
        done.set()

    def _write_at_stop(self) -> None:
        state = self._file_state
        if state is None or self.path is None or state.version == self._written_version:
            return
        try:
            self.persist()
        except OSError as exc:
            self.file_errors += 1
            log.error("could not write %s as %s stopped: %s", self.path, self.name, exc)
            self._wrote(exc)
            return
        self._wrote(None)


def _parser(state: TableState) -> Callable[[bytes], bool]:
    def parse(data: bytes) -> bool:
        state.from_json(data)
        return True

    return parse


def _safely(callback: Callable[[Any], object], value: object) -> None:
    # A callback runs in the actor's task: its failure must not crash the table's owner.
    try:
        callback(value)
    except Exception:
        log.exception("a table actor's answer callback failed")


class PersistedTable:
    """A plain table in a JSON file: `load`, `mark_dirty`, `persist`, `run`.

    Changed inline by its one owner and marked dirty; `run` writes the file from a worker
    thread at most once per interval, and once more when it stops. A crash loses the changes
    of the last interval.
    """

    #: Seconds between writes of a dirty table.
    interval: float = 0.2

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.version = 0  # bumped on every change
        self._persisted_version = 0
        self._dirty = trio.Event()

    def to_json(self) -> bytes:
        """The file's content."""
        raise NotImplementedError

    def from_json(self, data: bytes) -> None:
        """Replace the table with the file's content; raises on bad content."""
        raise NotImplementedError

    def load(self) -> bool:
        """Read the file (or its .bak); False when there is none. Raises ConfigFileError."""
        if self.path is None:
            return False
        return load_json_config(self.path, self._parse) is not None

    def _parse(self, data: bytes) -> bool:
        self.from_json(data)
        return True

    def mark_dirty(self) -> None:
        """Record a change; the run task writes it soon."""
        self.version += 1
        self._dirty.set()

    def persist(self) -> None:
        """Write the file now (blocking)."""
        if self.path is None:
            return
        version = self.version
        save_json_config(self.path, self.to_json())
        self._persisted_version = version

    async def persist_async(self) -> None:
        """Write the file from a worker thread when there are unwritten changes."""
        if self.path is None or self._persisted_version == self.version:
            return
        version = self.version
        data = self.to_json()
        await trio.to_thread.run_sync(save_json_config, self.path, data)
        self._persisted_version = max(self._persisted_version, version)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write the table whenever it changed, at most once per `interval`; and at the end."""
        task_status.started()
        try:
            while True:
                await self._dirty.wait()
                self._dirty = trio.Event()
                await trio.sleep(self.interval)
                await self.persist_async()
        finally:
            if self.path is not None and self._persisted_version != self.version:
                try:
                    self.persist()
                except OSError as exc:
                    log.error("could not write %s at shutdown: %s", self.path, exc)
