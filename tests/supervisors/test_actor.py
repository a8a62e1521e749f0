"""The actor kernel: request/reply, deadlines, backpressure, statistics, stopping and crashes.

Every wait has a deadline (`trio.fail_after`); timed cases run on a MockClock.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing

from supervisors import (
    Actor,
    ActorCrashed,
    ActorStatistics,
    ActorStatus,
    ActorStopped,
    ActorTimeout,
    MailboxFull,
    Request,
)


@attrs.frozen
class Add(Request[int]):
    amount: int


@attrs.frozen
class Divide(Request[float]):
    by: int


@attrs.frozen
class Hold(Request[None]):
    """Blocks the handler until the test releases it."""

    release: trio.Event


@attrs.frozen
class Poke:
    """Fire-and-forget: adds one; a negative value crashes the actor."""

    value: int = 1


Command = Add | Divide | Hold | Poke


@attrs.frozen
class CounterStatistics(ActorStatistics):
    total: int


class Counter(Actor[Command]):
    """Owns one integer."""

    def __init__(self, name: str = "counter", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.total = 0
        self.on_start_calls = 0
        self.in_hold = trio.Event()

    async def on_start(self) -> None:
        self.on_start_calls += 1
        self.total = 0

    async def handle(self, command: Command) -> Any:
        if isinstance(command, Add):
            self.total += command.amount
            return self.total
        if isinstance(command, Divide):
            return self.total / command.by
        if isinstance(command, Hold):
            self.in_hold.set()
            await command.release.wait()
            return None
        if command.value < 0:
            raise RuntimeError(f"poked with {command.value}")
        self.total += command.value
        return None

    def statistics(self) -> CounterStatistics:
        return CounterStatistics(**self._statistics_fields(), total=self.total)


async def start(nursery: trio.Nursery, actor: Actor[Any]) -> None:
    with trio.fail_after(5):
        await nursery.start(actor.run)


async def test_call_returns_the_handler_value(nursery: trio.Nursery) -> None:
    counter = Counter()
    await start(nursery, counter)
    with trio.fail_after(5):
        assert await counter.call(Add(2)) == 2
        assert await counter.call(Add(3)) == 5
        await counter.cast(Poke())
        assert await counter.call(Divide(2)) == 3.0


async def test_call_raises_the_handler_exception_and_the_actor_carries_on(
    nursery: trio.Nursery,
) -> None:
    counter = Counter()
    await start(nursery, counter)
    with trio.fail_after(5):
        with pytest.raises(ZeroDivisionError):
            await counter.call(Divide(0))
        assert await counter.call(Add(1)) == 1
    stats = counter.statistics()
    assert stats.errors == 1
    assert stats.status is ActorStatus.RUNNING
    assert stats.restarts == 0


async def test_reply_slot_is_one_shot(nursery: trio.Nursery) -> None:
    counter = Counter()
    await start(nursery, counter)
    request = Add(1)
    with trio.fail_after(5):
        assert await counter.call(request) == 1
        with pytest.raises(ValueError, match="one-shot"):
            await counter.call(request)


async def test_commands_compare_by_payload_not_by_reply_slot() -> None:
    assert Add(1) == Add(1)
    assert hash(Add(1)) == hash(Add(1))
    assert "reply" not in repr(Add(1))


async def test_call_timeout_names_the_actor_and_the_command(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    counter = Counter("route-table")
    await start(nursery, counter)
    release = trio.Event()
    nursery.start_soon(counter.call, Hold(release), 100.0)
    with trio.fail_after(5):
        await counter.in_hold.wait()
        with pytest.raises(
            ActorTimeout, match=r"actor route-table did not answer Add within 0\.05 s"
        ):
            await counter.call(Add(1), timeout=0.05)
    release.set()
    # The timed-out request is still handled once the actor gets to it.
    with trio.fail_after(5):
        assert await counter.call(Add(1)) == 2


async def test_timeout_on_a_mock_clock(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    counter = Counter()
    await start(nursery, counter)
    release = trio.Event()
    nursery.start_soon(counter.call, Hold(release), 1000.0)
    with trio.fail_after(5):
        await counter.in_hold.wait()
    before = trio.current_time()
    with pytest.raises(ActorTimeout), trio.fail_after(60):
        await counter.call(Add(1), timeout=30)
    assert trio.current_time() - before == pytest.approx(30)
    release.set()


async def test_mailbox_backpressure(nursery: trio.Nursery) -> None:
    counter = Counter(mailbox_size=2)
    await start(nursery, counter)
    release = trio.Event()
    nursery.start_soon(counter.call, Hold(release), 100.0)
    with trio.fail_after(5):
        await counter.in_hold.wait()
    # The handler is busy: two casts fill the mailbox, the third does not fit.
    counter.cast_nowait(Poke())
    counter.cast_nowait(Poke())
    with pytest.raises(MailboxFull, match="mailbox full"):
        counter.cast_nowait(Poke())
    assert counter.statistics().mailbox_used == 2

    blocked_sent = trio.Event()

    async def blocked_cast() -> None:
        await counter.cast(Poke(10))
        blocked_sent.set()

    nursery.start_soon(blocked_cast)
    with trio.fail_after(5):
        while counter.statistics().senders_waiting == 0:
            await trio.sleep(0)
    assert not blocked_sent.is_set()
    release.set()
    with trio.fail_after(5):
        await blocked_sent.wait()
        assert await counter.call(Add(0)) == 12


async def test_statistics_count_commands(nursery: trio.Nursery) -> None:
    counter = Counter("stats", mailbox_size=8)
    await start(nursery, counter)
    with trio.fail_after(5):
        for _ in range(5):
            await counter.cast(Poke())
        with pytest.raises(ZeroDivisionError):
            await counter.call(Divide(0))
        assert await counter.call(Add(0)) == 5
    stats = counter.statistics()
    assert isinstance(stats, CounterStatistics)
    assert stats.name == "stats"
    assert stats.mailbox_size == 8
    assert stats.mailbox_used == 0
    assert stats.commands_handled == 7
    assert stats.errors == 1
    assert stats.total == 5
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        stats.total = 1  # type: ignore[misc]


async def test_calls_before_start_fail_fast() -> None:
    counter = Counter("idle-one")
    with pytest.raises(ActorStopped, match="actor idle-one is idle"), trio.fail_after(5):
        await counter.call(Add(1))
    with pytest.raises(ActorStopped):
        counter.cast_nowait(Poke())


async def test_pending_calls_fail_when_the_actor_is_cancelled() -> None:
    counter = Counter()
    release = trio.Event()
    outcomes: list[BaseException] = []

    async def caller(request: Request[Any]) -> None:
        try:
            await counter.call(request, timeout=100)
        except ActorStopped as exc:
            outcomes.append(exc)

    with trio.fail_after(5):
        async with trio.open_nursery() as callers, trio.open_nursery() as actor_nursery:
            await actor_nursery.start(counter.run)
            callers.start_soon(caller, Hold(release))
            await counter.in_hold.wait()
            callers.start_soon(caller, Add(1))
            callers.start_soon(caller, Add(2))
            while counter.statistics().mailbox_used < 2:
                await trio.sleep(0)
            actor_nursery.cancel_scope.cancel()
    # The one in hand and the two queued all got an error instead of hanging.
    assert all(type(exc) is ActorStopped for exc in outcomes)
    assert sorted(str(exc) for exc in outcomes) == [
        "actor counter stopped before answering Add",
        "actor counter stopped before answering Add",
        "actor counter stopped before answering Hold",
    ]
    assert counter.status is ActorStatus.STOPPED
    with pytest.raises(ActorStopped, match="is stopped"):
        await counter.call(Add(1))


async def test_a_crashing_cast_fails_queued_requests_and_run_raises(nursery: trio.Nursery) -> None:
    counter = Counter(mailbox_size=8)
    release = trio.Event()
    outcomes: list[BaseException] = []

    async def caller(request: Request[Any]) -> None:
        try:
            await counter.call(request, timeout=100)
        except ActorCrashed as exc:
            outcomes.append(exc)

    crash: list[BaseException] = []

    async def run_counter(task_status: trio.TaskStatus[None]) -> None:
        try:
            await counter.run(task_status=task_status)
        except RuntimeError as exc:
            crash.append(exc)

    with trio.fail_after(5):
        await nursery.start(run_counter)
        nursery.start_soon(caller, Hold(release))
        await counter.in_hold.wait()
        counter.cast_nowait(Poke(-1))  # crashes the actor when handled
        counter.cast_nowait(Poke(1))  # lost with the mailbox
        nursery.start_soon(caller, Add(5))
        while counter.statistics().mailbox_used < 3:
            await trio.sleep(0)
        release.set()
        while not crash:
            await trio.sleep(0)
        while not outcomes:
            await trio.sleep(0)
    assert str(crash[0]) == "poked with -1"
    assert len(outcomes) == 1
    assert "actor counter crashed before answering Add: RuntimeError('poked with -1')" in str(
        outcomes[0]
    )
    stats = counter.statistics()
    assert stats.dropped == 1
    assert stats.errors == 1


async def test_restart_runs_on_start_again_and_keeps_the_address(nursery: trio.Nursery) -> None:
    counter = Counter()

    async def crash_once(task_status: trio.TaskStatus[None]) -> None:
        with pytest.raises(RuntimeError):
            await counter.run(task_status=task_status)

    with trio.fail_after(5):
        await nursery.start(crash_once)
        assert await counter.call(Add(7)) == 7
        await counter.cast(Poke(-1))
        while counter.status is not ActorStatus.STOPPED:
            await trio.sleep(0)
        await nursery.start(counter.run)
        # Same object, fresh state from on_start.
        assert await counter.call(Add(1)) == 1
    assert counter.on_start_calls == 2
    assert counter.statistics().restarts == 1


async def test_aclose_drains_the_mailbox_then_stops(nursery: trio.Nursery) -> None:
    counter = Counter()
    await start(nursery, counter)
    release = trio.Event()
    results: list[int] = []

    async def add(n: int) -> None:
        results.append(await counter.call(Add(n), timeout=100))

    with trio.fail_after(5):
        nursery.start_soon(counter.call, Hold(release), 100.0)
        await counter.in_hold.wait()
        nursery.start_soon(add, 1)
        nursery.start_soon(add, 2)
        while counter.statistics().mailbox_used < 2:
            await trio.sleep(0)
        async with trio.open_nursery() as closer:
            closer.start_soon(counter.aclose)
            while counter.status is not ActorStatus.CLOSING:
                await trio.sleep(0)
            with pytest.raises(ActorStopped, match="is closing"):
                await counter.call(Add(100))
            release.set()
    # Both queued requests were answered (in whichever order they were sent).
    assert len(results) == 2
    assert max(results) == 3
    assert counter.statistics().status is ActorStatus.STOPPED


async def test_batches_reach_handle_batch(nursery: trio.Nursery) -> None:
    class Batcher(Actor[Add]):
        def __init__(self) -> None:
            super().__init__("batcher", batch_limit=16)
            self.batches: list[int] = []

        async def handle_batch(self, commands: list[Add]) -> None:
            self.batches.append(len(commands))
            for command in commands:
                command.reply.set_result(command.amount * 2)

    batcher = Batcher()
    await start(nursery, batcher)
    results: list[int] = []

    async def one(n: int) -> None:
        results.append(await batcher.call(Add(n)))

    with trio.fail_after(5):
        async with trio.open_nursery() as callers:
            for n in range(10):
                callers.start_soon(one, n)
    assert sorted(results) == [n * 2 for n in range(10)]
    assert sum(batcher.batches) == 10
    assert len(batcher.batches) < 10  # several commands were handled together
    assert batcher.statistics().commands_handled == 10


async def test_run_twice_at_once_is_refused(nursery: trio.Nursery) -> None:
    counter = Counter()
    await start(nursery, counter)
    with pytest.raises(RuntimeError, match="already running"):
        await counter.run()
