"""The statistics collector alone: exact counts, TPS windows on trio's MockClock (the sampler
driven directly), the daily totals and the runtime-info tps text."""

from __future__ import annotations

import datetime

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.broker.services.stats import (
    BROKER_GET_NUMS,
    BROKER_PUT_NUMS,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    BrokerStatsManager,
    StatsSnapshot,
    human_readable_bytes,
    next_morning,
)


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


def test_counts_are_exact() -> None:
    stats = BrokerStatsManager("C")
    stats.on_put("T", 1, 100)
    stats.on_put("T", 32, 3200)  # a batch: one request
    stats.on_put("U", 1, 7)
    stats.on_get("G", "T", 10, 1000)
    stats.on_get("H", "T", 3, 30)
    assert stats.topic_put == {"T": [33, 3300, 2], "U": [1, 7, 1]}
    assert stats.group_get == {"T": {"G": [10, 1000, 1], "H": [3, 30, 1]}}
    assert stats.broker_put == [34, 3307, 3]
    assert stats.broker_get == [13, 1030, 2]
    summary = stats.statistics()
    assert (summary.put_messages, summary.get_messages, summary.topics, summary.groups) == (
        34, 13, 2, 2,
    )  # fmt: skip


async def test_minute_window_on_mock_clock(mock_clock: trio.testing.MockClock) -> None:
    stats = BrokerStatsManager("C")
    assert stats.stats_item(TOPIC_PUT_NUMS, "T") is None  # not counted, not sampled
    # 12 messages of 10 bytes, 2 per request, every 10 s for a minute.
    for _ in range(6):
        stats.on_put("T", 2, 20)
        stats.on_put("T", 2, 20)
        await trio.sleep(10)
        stats.sample()
    windows = stats.stats_item(TOPIC_PUT_NUMS, "T")
    assert windows is not None
    minute, hour, day = windows
    # Seeded with zero 10 s before the first sample, so the window covers all 24 messages.
    assert minute == StatsSnapshot(sum=24, tps=24 / 60, avgpt=2.0)
    assert hour == StatsSnapshot() and day == StatsSnapshot()  # no 10-minute sample yet
    size = stats.stats_item(TOPIC_PUT_SIZE, "T")
    assert size is not None and size[0] == StatsSnapshot(sum=240, tps=4.0, avgpt=20.0)
    # A seventh sample drops the oldest (the zero seed): the window keeps one minute, from
    # the first sample (4 messages, 2 requests) to now (30 messages, 13 requests).
    stats.on_put("T", 6, 60)
    await trio.sleep(10)
    stats.sample()
    windows = stats.stats_item(TOPIC_PUT_NUMS, "T")
    assert windows is not None and windows[0] == StatsSnapshot(sum=26, tps=26 / 60, avgpt=26 / 11)
    # Nothing more for a minute: the window empties.
    for _ in range(6):
        await trio.sleep(10)
        stats.sample()
    windows = stats.stats_item(TOPIC_PUT_NUMS, "T")
    assert windows is not None and windows[0] == StatsSnapshot(sum=0, tps=0.0, avgpt=0.0)


async def test_hour_and_day_windows(mock_clock: trio.testing.MockClock) -> None:
    stats = BrokerStatsManager("C")
    for _ in range(360):  # one hour of 10 s ticks, one message per tick
        stats.on_get("G", "T", 1, 5)
        await trio.sleep(10)
        stats.sample()
    windows = stats.stats_item(GROUP_GET_NUMS, "T@G")
    assert windows is not None
    minute, hour, day = windows
    assert minute == StatsSnapshot(sum=6, tps=0.1, avgpt=1.0)
    assert hour == StatsSnapshot(sum=360, tps=0.1, avgpt=1.0)  # 6 samples of 10 min + seed
    assert day == StatsSnapshot(sum=360, tps=0.1, avgpt=1.0)  # the first hourly sample + seed
    size = stats.stats_item(GROUP_GET_SIZE, "T@G")
    assert size is not None and size[1].sum == 1800
    assert stats.tps_group_get_nums("G", "T") == pytest.approx(0.1)
    assert stats.tps_group_get_nums("G", "other") == 0.0
    broker_get = stats.stats_item(BROKER_GET_NUMS, "C")
    assert broker_get is not None and broker_get[1].sum == 360
    assert stats.stats_item(BROKER_PUT_NUMS, "not-the-cluster") is None
    assert stats.stats_item("NO_SUCH_STATS", "T") is None


async def test_a_key_counted_between_samples_starts_from_zero(
    mock_clock: trio.testing.MockClock,
) -> None:
    stats = BrokerStatsManager("C")
    for _ in range(3):
        await trio.sleep(10)
        stats.sample()
    stats.on_put("Late", 5, 50)
    await trio.sleep(10)
    stats.sample()
    windows = stats.stats_item(TOPIC_PUT_NUMS, "Late")
    assert windows is not None and windows[0] == StatsSnapshot(sum=5, tps=0.5, avgpt=5.0)


async def test_run_samples_every_interval(mock_clock: trio.testing.MockClock) -> None:
    stats = BrokerStatsManager("C")
    async with trio.open_nursery() as nursery:
        await nursery.start(stats.run)
        stats.on_put("T", 1, 1)
        await trio.sleep(65)
        assert stats.ticks == 6
        nursery.cancel_scope.cancel()
    assert stats.put_tps() == "0.0 0.016666666666666666 "  # no 600 s figure yet


def test_put_tps_text_has_three_windows() -> None:
    stats = BrokerStatsManager("C")
    assert stats.put_tps() == "  "
    for tick in range(1, 61):
        stats.on_put("T", 10, 10)
        stats.sample(float(tick * 10))
    ten, sixty, six_hundred = stats.put_tps().split(" ")
    assert (float(ten), float(sixty), float(six_hundred)) == (1.0, 1.0, 1.0)
    found = stats.get_found_tps()
    assert found.split(" ") == ["0.0", "0.0", "0.0"]


def test_daily_totals_roll_at_midnight() -> None:
    now = [datetime.datetime(2026, 11, 22, 23, 59, 0).timestamp()]
    stats = BrokerStatsManager("C", wall_clock=lambda: now[0])
    stats.on_put("T", 7, 70)
    stats.on_get("G", "T", 3, 30)
    stats.record_day()
    assert (stats.msg_put_total_today_morning, stats.msg_put_total_yesterday_morning) == (7, 0)
    assert (stats.msg_get_total_today_morning, stats.msg_get_total_yesterday_morning) == (3, 0)
    stats.on_put("T", 1, 10)
    stats.record_day()
    assert (stats.msg_put_total_today_morning, stats.msg_put_total_yesterday_morning) == (8, 7)
    assert (stats.msg_get_total_today_morning, stats.msg_get_total_yesterday_morning) == (3, 3)


async def test_run_rolls_the_day_when_the_wall_clock_passes_midnight(
    mock_clock: trio.testing.MockClock,
) -> None:
    now = [datetime.datetime(2026, 11, 22, 23, 59, 55).timestamp()]
    stats = BrokerStatsManager("C", wall_clock=lambda: now[0])
    stats.on_put("T", 4, 4)
    async with trio.open_nursery() as nursery:
        await nursery.start(stats.run)
        await trio.sleep(10.5)  # one tick, still before midnight
        assert stats.msg_put_total_today_morning == 0
        now[0] += 10
        await trio.sleep(10)  # the next tick sees the new day
        assert stats.msg_put_total_today_morning == 4
        nursery.cancel_scope.cancel()


def test_next_morning_is_the_next_local_midnight() -> None:
    noon = datetime.datetime(2026, 11, 22, 12, 0, 0)
    assert next_morning(noon.timestamp()) == datetime.datetime(2026, 11, 23).timestamp()


@settings(max_examples=200)
@given(st.lists(st.tuples(st.integers(0, 100), st.integers(0, 10_000)), max_size=50))
def test_counts_match_any_traffic(puts: list[tuple[int, int]]) -> None:
    stats = BrokerStatsManager("C")
    for nums, size in puts:
        stats.on_put("T", nums, size)
    expected = [sum(n for n, _ in puts), sum(s for _, s in puts), len(puts)]
    assert stats.broker_put == expected
    assert stats.topic_put.get("T", [0, 0, 0]) == expected


def test_human_readable_bytes() -> None:
    assert human_readable_bytes(512) == "512 B"
    assert human_readable_bytes(1536) == "1.5 KiB"
    assert human_readable_bytes(3 * 1024**3) == "3.0 GiB"
