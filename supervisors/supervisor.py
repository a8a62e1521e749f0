"""Supervision trees over trio nurseries: one-for-one restarts, backoff, restart intensity.

A `Supervisor` starts its children in order, each only after the one before reported ready
(``task_status.started()``), restarts a child that ends according to its `RestartPolicy` after
an exponential backoff, and escalates (`SupervisorEscalation`, raised from `run`) when more
than ``intensity`` restarts happen within ``period`` seconds. On shutdown, whether by `stop`,
by escalation or by cancellation from outside, children stop in reverse start order: each is
offered its ``aclose()`` (bounded by the child's ``shutdown_timeout``), then cancelled, and
the supervisor waits for it to finish before it stops the next one.

A supervisor is itself a child (`ChildSpec.instance(name, supervisor)`), so trees nest: a
child supervisor's escalation is a crash its parent handles like any other.
"""

from __future__ import annotations

import collections
import enum
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import attrs
import trio

log = logging.getLogger("boltmq.supervisor")


class ChildFunction(Protocol):
    """An async function a supervisor runs: ``async def fn(task_status=...)``."""

    def __call__(self, *, task_status: trio.TaskStatus[Any] = ...) -> Awaitable[object]: ...


class Child(Protocol):
    """An object a supervisor runs: it has ``run(task_status=...)``; ``aclose()`` is optional."""

    def run(self, *, task_status: trio.TaskStatus[Any] = ...) -> Awaitable[object]: ...


class RestartPolicy(enum.StrEnum):
    """When a supervisor restarts a child that ended."""

    PERMANENT = "permanent"  # always
    TRANSIENT = "transient"  # only when it raised
    TEMPORARY = "temporary"  # never


class ChildState(enum.StrEnum):
    """Where a supervised child is."""

    STARTING = "starting"
    RUNNING = "running"
    RESTARTING = "restarting"  # ended, waiting out its backoff
    STOPPED = "stopped"


@attrs.frozen
class ChildSpec:
    """How to run one child: ``factory()`` makes the child for each start (and restart)."""

    name: str
    factory: Callable[[], Child]
    restart: RestartPolicy = RestartPolicy.PERMANENT
    shutdown_timeout: float = 5.0  # seconds aclose() may take before the child is cancelled

    @classmethod
    def function(
        cls,
        name: str,
        fn: ChildFunction,
        *,
        aclose: Callable[[], Awaitable[object]] | None = None,
        restart: RestartPolicy = RestartPolicy.PERMANENT,
        shutdown_timeout: float = 5.0,
    ) -> ChildSpec:
        """A child that is an async function (with an optional graceful-close function)."""
        return cls(name, lambda: _FunctionChild(fn, aclose), restart, shutdown_timeout)

    @classmethod
    def instance(
        cls,
        name: str,
        child: Child,
        *,
        restart: RestartPolicy = RestartPolicy.PERMANENT,
        shutdown_timeout: float = 5.0,
    ) -> ChildSpec:
        """The same object on every start: its state survives restarts unless its ``run``
        rebuilds it (an actor's ``on_start``); its mailbox, and so its address, always does."""
        return cls(name, lambda: child, restart, shutdown_timeout)


class SupervisorEscalation(Exception):
    """A supervisor gave up: a child failed to start or restarted too often."""

    def __init__(self, message: str, *, supervisor: str, child: str, cause: BaseException):
        super().__init__(message)
        self.supervisor = supervisor
        self.child = child
        self.cause = cause


@attrs.frozen
class ChildStatistics:
    """One child at one moment."""

    name: str
    state: ChildState
    restart: RestartPolicy
    restarts: int
    last_error: str | None


@attrs.frozen
class SupervisorStatistics:
    """A supervisor and its children at one moment."""

    name: str
    running: bool
    children: tuple[ChildStatistics, ...]
    recent_restarts: int  # within the last `period` seconds
    intensity: int
    period: float


class Supervisor:
    """Runs children one-for-one with restarts; see the module docstring for the rules."""

    def __init__(
        self,
        name: str,
        children: list[ChildSpec],
        *,
        intensity: int = 3,
        period: float = 5.0,
        backoff_initial: float = 0.1,
        backoff_max: float = 10.0,
    ) -> None:
        names = [spec.name for spec in children]
        if len(set(names)) != len(names):
            raise ValueError(f"supervisor {name}: child names repeat: {names}")
        self.name = name
        self.specs = list(children)
        self.intensity = intensity
        self.period = period
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self._children = [_Supervised(spec) for spec in self.specs]
        self._running = False
        self._stopping = False
        self._done = trio.Event()
        self._finished = trio.Event()
        self._start_scope: trio.CancelScope | None = None
        self._escalation: SupervisorEscalation | None = None
        self._restart_times: collections.deque[float] = collections.deque()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the children in order, report ready, supervise until stopped.

        Returns after `stop`/`aclose`; raises `SupervisorEscalation` when it gives up.
        """
        if self._running:
            raise RuntimeError(f"supervisor {self.name} is already running")
        self._reset()
        self._running = True
        try:
            async with trio.open_nursery() as nursery:
                try:
                    with trio.CancelScope() as self._start_scope:
                        for child in self._children:
                            nursery.start_soon(self._supervise, child)
                            await child.first_ready.wait()
                    self._start_scope = None
                    if not self._done.is_set():
                        log.info("supervisor %s: %d children running", self.name, len(self.specs))
                        task_status.started()
                        await self._done.wait()
                finally:
                    # Shielded so that a cancelled supervisor still stops its children
                    # gracefully and in order; every wait inside has its own deadline.
                    with trio.CancelScope(shield=True):
                        await self._stop_children()
        finally:
            self._running = False
            self._finished.set()
        if self._escalation is not None:
            raise self._escalation

    def stop(self) -> None:
        """Ask a running supervisor to stop its children and return (no-op when not running)."""
        if self._running:
            self._finish()

    async def aclose(self) -> None:
        """Stop, and wait until every child has stopped."""
        if self._running:
            self._finish()
            await self._finished.wait()

    def statistics(self) -> SupervisorStatistics:
        """The children's states and restart counts."""
        return SupervisorStatistics(
            name=self.name,
            running=self._running,
            children=tuple(child.statistics() for child in self._children),
            recent_restarts=self._recent_restarts(trio.current_time()) if self._running else 0,
            intensity=self.intensity,
            period=self.period,
        )

    # -- internals ------------------------------------------------------------------------

    def _reset(self) -> None:
        self._children = [_Supervised(spec) for spec in self.specs]
        self._stopping = False
        self._done = trio.Event()
        self._finished = trio.Event()
        self._escalation = None
        self._restart_times.clear()

    def _finish(self) -> None:
        self._stopping = True
        self._done.set()
        if self._start_scope is not None:
            self._start_scope.cancel()

    def _escalate(self, child: _Supervised, message: str, cause: BaseException) -> None:
        log.error("supervisor %s gives up: %s", self.name, message)
        if self._escalation is None:
            self._escalation = SupervisorEscalation(
                f"supervisor {self.name}: {message}",
                supervisor=self.name,
                child=child.spec.name,
                cause=cause,
            )
            self._escalation.__cause__ = cause
        self._finish()

    def _recent_restarts(self, now: float) -> int:
        while self._restart_times and self._restart_times[0] <= now - self.period:
            self._restart_times.popleft()
        return len(self._restart_times)

    async def _supervise(self, child: _Supervised) -> None:
        """One child's whole life: run, and restart per policy, until stopped."""
        spec = child.spec
        # Shielded: only this supervisor stops a child (child.scope.cancel()), so that an
        # outer cancellation cannot stop the children all at once, out of order.
        with trio.CancelScope(shield=True) as child.scope:
            try:
                while True:
                    error: Exception | None = None
                    status = _ChildStatus(child)
                    child.state = ChildState.STARTING
                    try:
                        instance = spec.factory()
                        child.aclose = getattr(instance, "aclose", None)
                        await instance.run(task_status=status)
                    except Exception as exc:
                        error = exc
                    if self._stopping:
                        return
                    if not child.first_ready.is_set():
                        what = f"raised {error!r}" if error else "returned before reporting ready"
                        self._escalate(
                            child,
                            f"child {spec.name} failed to start: {what}",
                            error or RuntimeError(f"child {spec.name} {what}"),
                        )
                        return
                    if error is not None:
                        child.last_error = repr(error)
                    if not self._should_restart(spec.restart, error):
                        log.log(
                            logging.WARNING if error else logging.INFO,
                            "child %s of %s %s; %s, not restarted",
                            spec.name,
                            self.name,
                            f"crashed: {error!r}" if error else "finished",
                            spec.restart.value,
                        )
                        return
                    now = trio.current_time()
                    recent = self._recent_restarts(now) + 1
                    if recent > self.intensity:
                        self._escalate(
                            child,
                            f"child {spec.name} ended {recent} times in {self.period:g} s "
                            f"(more than {self.intensity}); last: "
                            f"{repr(error) if error else 'returned'}",
                            error or RuntimeError(f"child {spec.name} returned"),
                        )
                        return
                    self._restart_times.append(now)
                    delay = self._backoff(child, now)
                    child.state = ChildState.RESTARTING
                    child.restarts += 1
                    log.warning(
                        "child %s of %s %s; restarting in %.1fs (%d of %d in %.0fs)",
                        spec.name,
                        self.name,
                        f"crashed: {error!r}" if error else "returned",
                        delay,
                        recent,
                        self.intensity,
                        self.period,
                        exc_info=error,
                    )
                    await trio.sleep(delay)
            finally:
                child.state = ChildState.STOPPED
                child.first_ready.set()  # never leave the start loop waiting on a dead child
                child.finished.set()

    def _should_restart(self, policy: RestartPolicy, error: Exception | None) -> bool:
        if policy is RestartPolicy.PERMANENT:
            return True
        if policy is RestartPolicy.TRANSIENT:
            return error is not None
        return False

    def _backoff(self, child: _Supervised, now: float) -> float:
        # A child that stayed up a whole period has recovered: its backoff starts over.
        if child.up_since is not None and now - child.up_since >= self.period:
            child.failures = 0
        child.failures += 1
        if self.backoff_initial <= 0:
            return 0.0
        exponent = min(child.failures - 1, 64)  # bound 2**n; backoff_max caps it anyway
        return min(self.backoff_max, self.backoff_initial * math.pow(2, exponent))

    async def _stop_children(self) -> None:
        self._stopping = True
        for child in reversed(self._children):
            if child.scope is None:
                continue  # never started
            if child.state is ChildState.RUNNING and child.aclose is not None:
                with trio.move_on_after(child.spec.shutdown_timeout) as deadline:
                    try:
                        await child.aclose()
                    except Exception as exc:
                        log.warning(
                            "child %s of %s: aclose failed: %r", child.spec.name, self.name, exc
                        )
                if deadline.cancelled_caught:
                    log.warning(
                        "child %s of %s did not close within %.1fs; cancelling it",
                        child.spec.name,
                        self.name,
                        child.spec.shutdown_timeout,
                    )
            child.scope.cancel()
            await child.finished.wait()
            log.debug("child %s of %s stopped", child.spec.name, self.name)


class _Supervised:
    """A supervisor's record of one child."""

    def __init__(self, spec: ChildSpec) -> None:
        self.spec = spec
        self.state = ChildState.STARTING
        self.scope: trio.CancelScope | None = None
        self.aclose: Callable[[], Awaitable[object]] | None = None
        self.first_ready = trio.Event()
        self.finished = trio.Event()
        self.up_since: float | None = None
        self.restarts = 0
        self.failures = 0  # consecutive, for the backoff
        self.last_error: str | None = None

    def statistics(self) -> ChildStatistics:
        return ChildStatistics(
            name=self.spec.name,
            state=self.state,
            restart=self.spec.restart,
            restarts=self.restarts,
            last_error=self.last_error,
        )


class _ChildStatus(trio.TaskStatus[Any]):
    """The ``task_status`` a child gets: ``started()`` marks it running."""

    def __init__(self, child: _Supervised) -> None:
        self._child = child
        self._called = False

    def started(self, value: Any = None) -> None:
        """Mark the child ready (the value, if any, is ignored)."""
        if self._called:
            raise RuntimeError(f"child {self._child.spec.name} called 'started' twice")
        self._called = True
        self._child.state = ChildState.RUNNING
        self._child.up_since = trio.current_time()
        self._child.first_ready.set()


class _FunctionChild:
    """Adapts an async function (and an optional close function) to `Child`."""

    def __init__(self, fn: ChildFunction, aclose: Callable[[], Awaitable[object]] | None) -> None:
        self._fn = fn
        if aclose is not None:
            self.aclose = aclose

    def run(
        self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED
    ) -> Awaitable[object]:
        return self._fn(task_status=task_status)
