"""The schedule service's pure rules: messageDelayLevel parsing and the timer queues' cascade."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.broker.services.schedule import (
    TIMER_QUEUE_NUMS,
    parse_delay_levels,
    timer_queue_for,
    timer_wake_time,
)
from supervisors.config import ConfigError

THREE_DAYS_MS = 3 * 24 * 3600 * 1000


def test_rocketmq_default_levels() -> None:
    levels = parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")
    assert len(levels) == 18
    assert levels[:4] == [1000, 5000, 10_000, 30_000]
    assert levels[-1] == 7_200_000
    assert parse_delay_levels("  2d 1s ") == [172_800_000, 1000]


@pytest.mark.parametrize("bad", ["", "1x", "s", "1.5s", "-1s", "5"])
def test_bad_levels_name_the_key(bad: str) -> None:
    with pytest.raises(ConfigError, match="messageDelayLevel"):
        parse_delay_levels(bad)


@given(st.integers(min_value=0, max_value=THREE_DAYS_MS))
def test_timer_queue_holds_its_range(remaining: int) -> None:
    k = timer_queue_for(remaining)
    assert 0 <= k < TIMER_QUEUE_NUMS
    if k == 0:
        assert remaining < 1000
    else:
        assert 500 << k <= remaining < 1000 << k


@settings(max_examples=200)
@given(
    st.integers(min_value=1, max_value=THREE_DAYS_MS),
    st.lists(st.integers(min_value=0, max_value=300), min_size=25, max_size=25),
)
def test_timer_cascade_never_early_and_bounded(remaining: int, lateness: list[int]) -> None:
    """Follow one message through the queues, each look taken up to 300 ms late."""
    start = 1_700_000_000_000
    due = start + remaining
    stored, k, hops = start, timer_queue_for(remaining), 0
    for late in lateness:
        now = timer_wake_time(k, stored, due) + late
        assert now >= stored
        if now >= due:
            assert now - due <= late  # delivered at its time, up to the loop's lateness
            break
        stored, k = now, timer_queue_for(due - now)
        hops += 1
    else:
        pytest.fail("not delivered within 25 looks")
    assert hops <= TIMER_QUEUE_NUMS


def test_timer_wake_time_of_queue_zero_is_the_start() -> None:
    assert timer_wake_time(0, 1000, 1900) == 1900
    assert timer_wake_time(3, 1000, 1_000_000) == 5000
    assert timer_wake_time(3, 1000, 2000) == 2000
