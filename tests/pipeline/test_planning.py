"""Planning without a cluster: resolving startingOffsets / endingOffsets against a queue's min
and max offsets, and splitting ranges for minPartitions."""

from __future__ import annotations

import logging

import pytest

from pipeline.errors import DataLossError, OptionError
from pipeline.options import EARLIEST, LATEST, OffsetSpec
from pipeline.planning import QueueOffsets, QueueRange, resolve, split_ranges

QUEUE = QueueOffsets("T", "broker-a", 1, "127.0.0.1:1", min_offset=10, max_offset=50)


def spec(option: str, default: int, offset: int | None = None) -> OffsetSpec:
    queues = {} if offset is None else {("T", "broker-a", 1): offset}
    return OffsetSpec(option, default, queues)


def starting(offset: int | None = None) -> OffsetSpec:
    return spec("startingOffsets", EARLIEST, offset)


def ending(offset: int | None = None) -> OffsetSpec:
    return spec("endingOffsets", LATEST, offset)


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (None, None, (10, 50)),
        (EARLIEST, LATEST, (10, 50)),
        (LATEST, None, (50, 50)),
        (None, EARLIEST, (10, 10)),
        (20, 30, (20, 30)),
        (10, 10, (10, 10)),
        (50, None, (50, 50)),
    ],
)
def test_resolved_ranges(start: int | None, end: int | None, expected: tuple[int, int]) -> None:
    assert resolve(QUEUE, starting(start), ending(end), True) == expected


def test_data_loss_fails_or_warns(caplog: pytest.LogCaptureFixture) -> None:
    where = "topic T, broker broker-a, queue 1"
    with pytest.raises(DataLossError, match=f"{where}: startingOffsets 3 is below the queue's "
                       r"min offset 10; messages \[3, 10\) were deleted by retention"):  # fmt: skip
        resolve(QUEUE, starting(3), ending(), True)
    with caplog.at_level(logging.WARNING, "boltmq.pipeline"):
        assert resolve(QUEUE, starting(3), ending(), False) == (10, 50)
    assert "starting at the min offset 10 (failOnDataLoss is false)" in caplog.text
    with pytest.raises(DataLossError, match="startingOffsets 60 is past the queue's max"):
        resolve(QUEUE, starting(60), ending(), True)
    assert resolve(QUEUE, starting(60), ending(), False) == (50, 50)
    with pytest.raises(DataLossError, match="endingOffsets 5 is below the queue's min offset"):
        resolve(QUEUE, starting(EARLIEST), ending(5), True)
    assert resolve(QUEUE, starting(EARLIEST), ending(5), False) == (10, 10)


def test_impossible_ranges_are_refused_either_way() -> None:
    for fail in (True, False):
        with pytest.raises(OptionError, match="endingOffsets 51 of topic T, broker broker-a, "
                           "queue 1 is past the queue's max offset 50"):  # fmt: skip
            resolve(QUEUE, starting(), ending(51), fail)
        with pytest.raises(OptionError, match=r"startingOffsets 30 \(30\) is after endingOffsets "
                           r"20 \(20\)"):  # fmt: skip
            resolve(QUEUE, starting(30), ending(20), fail)
        with pytest.raises(OptionError, match=r"startingOffsets latest \(50\) is after"):
            resolve(QUEUE, starting(LATEST), ending(20), fail)


def ranges(*sizes: int) -> list[QueueRange]:
    return [QueueRange("T", "b", i, "a:1", 100, 100 + size) for i, size in enumerate(sizes)]


def covered(parts: list[QueueRange]) -> dict[int, list[int]]:
    """Queue id -> every offset the parts cover, in order."""
    found: dict[int, list[int]] = {}
    for part in parts:
        assert part.end > part.start
        found.setdefault(part.queue_id, []).extend(range(part.start, part.end))
    return found


@pytest.mark.parametrize(
    ("sizes", "min_partitions", "count"),
    [
        ((10, 20), 1, 2),  # fewer asked than ranges: untouched
        ((10, 20), 2, 2),
        ((10, 20), 3, 3),
        ((10, 20), 9, 9),
        ((1, 1, 1), 4, 3),  # one-message ranges cannot split: as many as there are messages
        ((1, 1, 2), 10, 4),
        ((1000, 1), 7, 7),
        ((5,), 5, 5),
    ],
)
def test_min_partitions_split(sizes: tuple[int, ...], min_partitions: int, count: int) -> None:
    whole = ranges(*sizes)
    parts = split_ranges(whole, min_partitions)
    assert len(parts) == count
    # Together the parts cover every offset exactly once, in order per queue.
    assert covered(parts) == {r.queue_id: list(range(r.start, r.end)) for r in whole}


def test_larger_ranges_get_more_parts_and_parts_are_even() -> None:
    parts = split_ranges(ranges(90, 10), 10)
    assert [p.size for p in parts if p.queue_id == 0] == [10] * 9
    assert [p.size for p in parts if p.queue_id == 1] == [10]
    sizes = [p.size for p in split_ranges(ranges(100), 7)]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 100
