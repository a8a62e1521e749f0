"""Supervisors: start order, one-for-one restarts, backoff, intensity, policies, shutdown order.

Everything timed runs on `autojump_clock` (a MockClock with autojump_threshold=0), so seconds
of backoff take microseconds; every wait has a deadline.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from supervisors import (
    Actor,
    ActorStatus,
    ChildSpec,
    ChildState,
    Request,
    RestartPolicy,
    Supervisor,
    SupervisorEscalation,
)
from tests.support.waiting import wait_until


class Journal:
    """What the children did, in order."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.starts: dict[str, list[float]] = {}

    def add(self, event: str) -> None:
        self.events.append(event)


def steady(journal: Journal, name: str, ready_after: float = 0.0) -> Any:
    """A child that becomes ready after ``ready_after`` seconds and runs until cancelled."""

    async def run(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        journal.starts.setdefault(name, []).append(trio.current_time())
        journal.add(f"start {name}")
        await trio.sleep(ready_after)
        journal.add(f"ready {name}")
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            journal.add(f"stop {name}")

    return run


def crashing(journal: Journal, name: str, crashes: int = 10**9, after: float = 0.0) -> Any:
    """Ready at once; raises ``after`` seconds later for its first ``crashes`` runs."""

    async def run(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        runs = journal.starts.setdefault(name, [])
        runs.append(trio.current_time())
        task_status.started()
        if len(runs) <= crashes:
            await trio.sleep(after)
            raise RuntimeError(f"{name} boom {len(runs)}")
        await trio.sleep_forever()

    return run


class Ticker:
    """A sibling that counts seconds; `runs` counts how often it was started."""

    def __init__(self) -> None:
        self.ticks = 0
        self.runs = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.runs += 1
        task_status.started()
        while True:
            await trio.sleep(1)
            self.ticks += 1


async def test_children_start_in_order_each_after_the_previous_is_ready(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    journal = Journal()
    supervisor = Supervisor(
        "root",
        [
            ChildSpec.function("a", steady(journal, "a", ready_after=3)),
            ChildSpec.function("b", steady(journal, "b", ready_after=1)),
            ChildSpec.function("c", steady(journal, "c")),
        ],
    )
    with trio.fail_after(60):
        await nursery.start(supervisor.run)
    assert journal.events == ["start a", "ready a", "start b", "ready b", "start c", "ready c"]
    stats = supervisor.statistics()
    assert [child.state for child in stats.children] == [ChildState.RUNNING] * 3
    assert stats.running


async def test_a_crashing_child_restarts_alone_while_its_sibling_keeps_running(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    journal = Journal()
    ticker = Ticker()
    supervisor = Supervisor(
        "broker",
        [
            ChildSpec.instance("ticker", ticker),
            ChildSpec.function("ha-link", crashing(journal, "ha-link", crashes=3, after=2.5)),
        ],
        intensity=5,
        period=60,
        backoff_initial=0.5,
    )
    with trio.fail_after(60):
        await nursery.start(supervisor.run)
        ticks_seen = []
        while len(journal.starts["ha-link"]) < 4:
            ticks_seen.append(ticker.ticks)
            await trio.sleep(1)
    # The sibling's counter moved the whole time and it was never restarted.
    assert ticks_seen == sorted(ticks_seen)
    assert ticks_seen[-1] > ticks_seen[0] + 5
    assert ticker.runs == 1
    stats = {child.name: child for child in supervisor.statistics().children}
    assert stats["ticker"].restarts == 0
    assert stats["ticker"].state is ChildState.RUNNING
    assert stats["ha-link"].restarts == 3
    assert stats["ha-link"].last_error == "RuntimeError('ha-link boom 3')"
    with trio.fail_after(60):
        await wait_until(
            lambda: stats_of(supervisor, "ha-link").state is ChildState.RUNNING, 120, interval=0.01
        )


def stats_of(supervisor: Supervisor, name: str) -> Any:
    return next(c for c in supervisor.statistics().children if c.name == name)


async def test_backoff_doubles_up_to_its_cap(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    journal = Journal()
    supervisor = Supervisor(
        "root",
        [ChildSpec.function("flaky", crashing(journal, "flaky", crashes=6))],
        intensity=100,
        period=1000,
        backoff_initial=0.1,
        backoff_max=1.0,
    )
    with trio.fail_after(60):
        await nursery.start(supervisor.run)
        await wait_until(lambda: len(journal.starts["flaky"]) == 7, 120, interval=0.01)
    starts = journal.starts["flaky"]
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert gaps == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])


async def test_the_crash_log_line_says_what_and_when(
    nursery: trio.Nursery,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    journal = Journal()
    supervisor = Supervisor(
        "registry",
        [ChildSpec.function("scanner", crashing(journal, "scanner", crashes=1))],
        intensity=3,
        period=5,
        backoff_initial=0.25,
    )
    with caplog.at_level(logging.WARNING, logger="boltmq.supervisor"), trio.fail_after(60):
        await nursery.start(supervisor.run)
        await wait_until(lambda: len(journal.starts["scanner"]) == 2, 120, interval=0.01)
    assert (
        "child scanner of registry crashed: RuntimeError('scanner boom 1'); "
        "restarting in 0.2s (1 of 3 in 5s)" in caplog.messages
    )


async def test_too_many_restarts_escalate_and_stop_the_siblings(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    supervisor = Supervisor(
        "root",
        [
            ChildSpec.function("steady", steady(journal, "steady")),
            ChildSpec.function("flaky", crashing(journal, "flaky", after=1)),
        ],
        intensity=2,
        period=10,
        backoff_initial=0.1,
    )
    with trio.fail_after(60), pytest.raises(SupervisorEscalation) as caught:
        await supervisor.run()
    escalation = caught.value
    assert escalation.supervisor == "root"
    assert escalation.child == "flaky"
    assert isinstance(escalation.cause, RuntimeError)
    assert escalation.__cause__ is escalation.cause
    assert "child flaky ended 3 times in 10 s (more than 2)" in str(escalation)
    assert len(journal.starts["flaky"]) == 3  # two restarts allowed, the third crash escalates
    assert journal.events[-1] == "stop steady"
    assert not supervisor.statistics().running


async def test_restarts_spread_wider_than_the_period_do_not_escalate(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    journal = Journal()
    supervisor = Supervisor(
        "root",
        [ChildSpec.function("slow-crasher", crashing(journal, "slow-crasher", crashes=5, after=4))],
        intensity=1,
        period=3,
        backoff_initial=0.1,
    )
    with trio.fail_after(60):
        await nursery.start(supervisor.run)
        await wait_until(lambda: len(journal.starts["slow-crasher"]) == 6, 120, interval=0.01)
    assert stats_of(supervisor, "slow-crasher").restarts == 5


async def test_a_parent_restarts_an_escalating_child_supervisor_then_escalates_itself(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    inner = Supervisor(
        "inner",
        [ChildSpec.function("flaky", crashing(journal, "flaky"))],
        intensity=1,
        period=10,
        backoff_initial=0.1,
    )
    outer = Supervisor(
        "outer",
        [ChildSpec.instance("inner", inner)],
        intensity=1,
        period=10,
        backoff_initial=0.1,
    )
    with trio.fail_after(60), pytest.raises(SupervisorEscalation) as caught:
        await outer.run()
    assert caught.value.supervisor == "outer"
    assert caught.value.child == "inner"
    assert isinstance(caught.value.cause, SupervisorEscalation)
    assert caught.value.cause.supervisor == "inner"
    # inner ran twice (once restarted by outer), each time flaky crashed twice.
    assert len(journal.starts["flaky"]) == 4


async def test_stop_stops_children_in_reverse_start_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()

    async def close_b() -> None:
        journal.add("aclose b")

    supervisor = Supervisor(
        "root",
        [
            ChildSpec.function("a", steady(journal, "a")),
            ChildSpec.function("b", steady(journal, "b"), aclose=close_b),
            ChildSpec.function("c", steady(journal, "c")),
        ],
    )
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run)
            journal.events.clear()
            await supervisor.aclose()
    assert journal.events == ["stop c", "aclose b", "stop b", "stop a"]
    assert [c.state for c in supervisor.statistics().children] == [ChildState.STOPPED] * 3


async def test_cancellation_from_outside_also_stops_in_reverse_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    supervisor = Supervisor(
        "root",
        [ChildSpec.function(name, steady(journal, name)) for name in ("a", "b", "c", "d")],
    )
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run)
            journal.events.clear()
            nursery.cancel_scope.cancel()
    assert journal.events == ["stop d", "stop c", "stop b", "stop a"]


async def test_an_aclose_that_hangs_is_cut_off_by_its_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()

    async def hang() -> None:
        journal.add("aclose a")
        await trio.sleep_forever()

    supervisor = Supervisor(
        "root",
        [ChildSpec.function("a", steady(journal, "a"), aclose=hang, shutdown_timeout=7)],
    )
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run)
            before = trio.current_time()
            await supervisor.aclose()
    assert trio.current_time() - before == pytest.approx(7)
    assert journal.events[-2:] == ["aclose a", "stop a"]


async def test_a_child_that_fails_to_start_escalates_and_stops_earlier_children(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()

    async def broken(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        raise OSError("address already in use")

    supervisor = Supervisor(
        "root",
        [
            ChildSpec.function("a", steady(journal, "a")),
            ChildSpec.function("b", steady(journal, "b")),
            ChildSpec.function("listener", broken),
            ChildSpec.function("d", steady(journal, "d")),
        ],
    )
    ready: list[bool] = []

    class Status(trio.TaskStatus[None]):
        def started(self, value: None = None) -> None:
            ready.append(True)

    with trio.fail_after(60), pytest.raises(SupervisorEscalation, match="failed to start"):
        await supervisor.run(task_status=Status())
    assert not ready  # the supervisor never reported ready
    assert journal.events == ["start a", "ready a", "start b", "ready b", "stop b", "stop a"]


async def test_temporary_child_is_not_restarted_and_siblings_carry_on(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    journal = Journal()
    ticker = Ticker()
    supervisor = Supervisor(
        "root",
        [
            ChildSpec.instance("ticker", ticker),
            ChildSpec.function(
                "once", crashing(journal, "once", after=1), restart=RestartPolicy.TEMPORARY
            ),
        ],
    )
    with trio.fail_after(60):
        await nursery.start(supervisor.run)
        await wait_until(
            lambda: stats_of(supervisor, "once").state is ChildState.STOPPED, 120, interval=0.01
        )
        await trio.sleep(30)
    assert len(journal.starts["once"]) == 1
    assert stats_of(supervisor, "once").last_error == "RuntimeError('once boom 1')"
    assert ticker.ticks >= 30
    assert supervisor.statistics().running


async def test_transient_child_restarts_on_error_but_not_on_return(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    journal = Journal()

    async def crash_then_finish(
        *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        runs = journal.starts.setdefault("job", [])
        runs.append(trio.current_time())
        task_status.started()
        await trio.sleep(1)
        if len(runs) == 1:
            raise ValueError("first run fails")
        journal.add("job finished")

    supervisor = Supervisor(
        "root",
        [ChildSpec.function("job", crash_then_finish, restart=RestartPolicy.TRANSIENT)],
    )
    with trio.fail_after(60):
        await nursery.start(supervisor.run)
        await wait_until(
            lambda: stats_of(supervisor, "job").state is ChildState.STOPPED, 120, interval=0.01
        )
        await trio.sleep(30)
    assert len(journal.starts["job"]) == 2
    assert journal.events == ["job finished"]


async def test_permanent_child_restarts_even_when_it_returns(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    runs: list[float] = []

    async def short(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        runs.append(trio.current_time())
        task_status.started()
        if len(runs) < 3:
            await trio.sleep(1)
        else:
            await trio.sleep_forever()

    supervisor = Supervisor("root", [ChildSpec.function("short", short)], backoff_initial=0.1)
    with trio.fail_after(60):
        await nursery.start(supervisor.run)
        await wait_until(lambda: len(runs) == 3, 120, interval=0.01)
    assert stats_of(supervisor, "short").restarts == 2


async def test_a_factory_child_gets_fresh_state_on_restart(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    made: list[Ticker] = []

    class Fragile(Ticker):
        async def run(
            self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
        ) -> None:
            task_status.started()
            await trio.sleep(2.5)
            if len(made) < 3:
                raise RuntimeError("fragile")
            await trio.sleep_forever()

    def make() -> Fragile:
        child = Fragile()
        made.append(child)
        return child

    supervisor = Supervisor("root", [ChildSpec("fragile", make)], backoff_initial=0.1)
    with trio.fail_after(60):
        await nursery.start(supervisor.run)
        await wait_until(lambda: len(made) == 3, 120, interval=0.01)
    assert len({id(child) for child in made}) == 3


async def test_statistics_are_an_immutable_record(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    journal = Journal()
    supervisor = Supervisor("root", [ChildSpec.function("a", steady(journal, "a"))])
    with trio.fail_after(60):
        await nursery.start(supervisor.run)
    stats = supervisor.statistics()
    assert stats.name == "root"
    assert stats.children[0].restart is RestartPolicy.PERMANENT
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        stats.name = "other"  # type: ignore[misc]


# -- an actor under a supervisor --------------------------------------------------------------


@attrs.frozen
class Put(Request[int]):
    value: int


@attrs.frozen
class Corrupt:
    """A cast whose handler raises: crashes the actor."""


class Store(Actor[Put | Corrupt]):
    def __init__(self) -> None:
        super().__init__("store")
        self.values: list[int] = []
        self.closed_with: list[int] | None = None

    async def on_start(self) -> None:
        self.values = []

    async def handle(self, command: Put | Corrupt) -> Any:
        if isinstance(command, Corrupt):
            raise RuntimeError("state corrupted")
        self.values.append(command.value)
        return len(self.values)

    async def aclose(self) -> None:
        await super().aclose()
        self.closed_with = list(self.values)


async def test_an_actor_crash_is_restarted_by_its_supervisor_with_state_rebuilt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = Store()
    supervisor = Supervisor("root", [ChildSpec.instance("store", store)], backoff_initial=0.1)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run)
            assert await store.call(Put(1)) == 1
            assert await store.call(Put(2)) == 2
            await store.cast(Corrupt())
            await wait_until(lambda: store.statistics().restarts == 1, 120, interval=0.01)
            await wait_until(lambda: store.status is ActorStatus.RUNNING, 120, interval=0.01)
            assert await store.call(Put(3)) == 1  # on_start rebuilt the state
            await supervisor.aclose()
    assert store.closed_with == [3]  # the graceful close ran before cancellation
    assert stats_of(supervisor, "store").restarts == 1
