"""The dedup index as plain state: lookups, reservations, the time window (on trio's
MockClock) and the bound on keys."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from actors.broker.services.dedup import DedupIndex, KeyInFlight, StoredMessage


def mock_ms() -> int:
    return int(trio.current_time() * 1000)


def stored(offset: int) -> StoredMessage:
    return StoredMessage(f"ID{offset:04d}", 1, offset)


def test_a_recorded_key_is_a_duplicate_and_a_released_one_is_not() -> None:
    index = DedupIndex(window_ms=60_000, max_keys=10, clock=lambda: 1_000)
    assert index.lookup("T", "k1") is None
    index.reserve("T", "k1")
    with pytest.raises(KeyInFlight, match="dedup key 'k1' of topic T is being stored"):
        index.lookup("T", "k1")
    index.record("T", "k1", stored(7))
    assert index.lookup("T", "k1") == stored(7)
    assert index.lookup("Other", "k1") is None  # keys are scoped by topic
    index.reserve("T", "k2")
    index.release("T", "k2")
    assert index.lookup("T", "k2") is None
    stats = index.statistics()
    assert (stats.keys, stats.reserved, stats.duplicates, stats.busy) == (1, 0, 1, 1)


async def test_keys_older_than_the_window_expire(
    autojump_clock: trio.testing.MockClock,
) -> None:
    index = DedupIndex(window_ms=120_000, max_keys=100, clock=mock_ms)
    index.reserve("T", "old")
    index.record("T", "old", stored(1))
    await trio.sleep(100)
    index.reserve("T", "young")
    index.record("T", "young", stored(2))
    await trio.sleep(30)  # "old" is 130 s old, "young" 30 s
    assert index.lookup("T", "old") is None
    assert index.lookup("T", "young") == stored(2)
    assert len(index) == 1 and index.statistics().expired == 1
    await trio.sleep(91)
    assert index.lookup("T", "young") is None
    # A key found in the commit log already older than the window is not added.
    assert not index.add_stored("T", "ancient", mock_ms() - 121_000, stored(3))
    assert index.add_stored("T", "recent", mock_ms() - 1_000, stored(4))
    assert index.lookup("T", "recent") == stored(4)


def test_the_number_of_keys_is_bounded_oldest_first() -> None:
    index = DedupIndex(window_ms=3_600_000, max_keys=3, clock=lambda: 5_000)
    for n in range(5):
        index.reserve("T", f"k{n}")
        index.record("T", f"k{n}", stored(n))
    assert len(index) == 3
    assert [index.lookup("T", f"k{n}") for n in range(5)] == [
        None, None, stored(2), stored(3), stored(4),
    ]  # fmt: skip
    assert index.statistics().evicted == 2
    # A reservation evicted before its put finished is recorded nowhere, and counted out.
    index.reserve("T", "a")
    for n in range(3):
        index.reserve("T", f"x{n}")
    index.record("T", "a", stored(9))
    assert index.lookup("T", "a") is None and index.statistics().reserved == 3


def test_a_bad_window_is_refused() -> None:
    with pytest.raises(ValueError, match="window must be > 0 ms"):
        DedupIndex(window_ms=0, max_keys=1)
    assert not DedupIndex(window_ms=1, max_keys=0).enabled


def test_the_batch_calls_agree_with_the_single_ones() -> None:
    now = [10_000]
    index = DedupIndex(window_ms=1_000, max_keys=10, clock=lambda: now[0])
    index.reserve("T", "old")
    index.record("T", "old", stored(1))
    now[0] += 2_000  # "old" has expired
    index.reserve("T", "busy")
    found, names = index.lookup_batch("T", ["a", None, "old"])
    assert found == [None, None, None] and names == ["T\x01a", None, "T\x01old"]
    index.reserve_batch(["T\x01a", "T\x01old"])
    with pytest.raises(KeyInFlight):
        index.lookup_batch("T", ["b", "a"])
    index.record_batch([(0, "T\x01a"), (1, "T\x01old")], ["ID-A", "ID-OLD"], 2, 40)
    assert index.lookup_batch("T", ["old", "a"])[0] == [
        StoredMessage("ID-OLD", 2, 41), StoredMessage("ID-A", 2, 40),
    ]  # fmt: skip
    index.reserve_batch(["T\x01c"])
    index.release_batch([(0, "T\x01c")])
    assert index.lookup("T", "c") is None
    assert index.statistics().reserved == 1  # "busy"
