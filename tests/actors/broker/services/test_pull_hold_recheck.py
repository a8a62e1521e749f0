"""The held pulls' safety net: one pass every few seconds wakes the pulls whose queue has
messages beyond their offset (a message stored without an arrival callback) and leaves the
others waiting; no timer per held pull."""

from __future__ import annotations

import trio
import trio.testing

from actors.broker.services.pull_hold import PullHoldService


async def test_the_recheck_pass_wakes_only_pulls_whose_queue_passed_their_offset() -> None:
    hold = PullHoldService(max_held=100)
    max_offsets = {("T", 0): 5, ("T", 1): 5, ("T", 2): 0}
    woken: dict[tuple[str, int], bool] = {}

    async def held(topic: str, queue_id: int, offset: int) -> None:
        woken[(topic, queue_id)] = await hold.wait(topic, queue_id, offset, 60)

    with trio.fail_after(45):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold.run_rechecks, lambda t, q: max_offsets[(t, q)])
            nursery.start_soon(held, "T", 0, 5)  # waits beyond 5
            nursery.start_soon(held, "T", 1, 5)
            nursery.start_soon(held, "T", 2, 0)
            await trio.testing.wait_all_tasks_blocked()
            # Stored without an arrival callback: only the next pass can find them.
            max_offsets[("T", 0)] = 6
            max_offsets[("T", 2)] = 1
            while len(woken) < 2:
                await trio.sleep(0.05)
            assert woken == {("T", 0): True, ("T", 2): True}
            assert hold.rechecks >= 1
            # The same pass saw queue 1 still at 5: its pull holds on.
            hold.notify_message_arriving("T", 1, 6)
            while len(woken) < 3:
                await trio.sleep(0.05)
            assert woken[("T", 1)] is True
            nursery.cancel_scope.cancel()
