"""Streaming offsets without a cluster: the JSON form, the split of maxOffsetsPerTrigger over
the queues, and each micro-batch's end (new queues, the AvailableNow target, data loss)."""

from __future__ import annotations

import logging

import pytest

from pipeline.errors import DataLossError, OptionError
from pipeline.options import QueueKey
from pipeline.planning import QueueOffsets
from pipeline.stream_planning import allocate, from_json, next_offsets, to_json

A0, A1 = ("T", "broker-a", 0), ("T", "broker-a", 1)
B0, B1 = ("T", "broker-b", 0), ("T", "broker-b", 1)


def queue(key: QueueKey, low: int, high: int) -> QueueOffsets:
    return QueueOffsets(key[0], key[1], key[2], f"{key[1]}:1", low, high)


def test_offsets_as_json_and_back() -> None:
    offsets = {B0: 3, A1: 7, ("U", "broker-a", 10): 0, A0: 5}
    document = to_json(offsets)
    assert document == {"T": {"broker-a": {"0": 5, "1": 7}, "broker-b": {"0": 3}},
                        "U": {"broker-a": {"10": 0}}}  # fmt: skip
    assert list(document) == ["T", "U"]
    assert from_json(document) == offsets
    for bad in ({"T": {"broker-a": {"0": -1}}}, {"T": {"broker-a": {"x": 1}}}, {"T": 4},
                {"T": {"broker-a": {"0": True}}}):  # fmt: skip
        with pytest.raises(OptionError, match="a streaming offset must be"):
            from_json(bad)


def test_allocate_takes_everything_when_it_fits() -> None:
    assert allocate({A0: 3, B0: 4}, 7, 0) == {A0: 3, B0: 4}
    assert allocate({A0: 3, B0: 4}, 100, 0) == {A0: 3, B0: 4}


def test_allocate_gives_each_queue_one_then_shares_the_rest_by_backlog() -> None:
    taken = allocate({A0: 100, A1: 1, B0: 50, B1: 10}, 20, 0)
    assert sum(taken.values()) == 20
    assert taken[A1] == 1 and all(n >= 1 for n in taken.values())
    assert taken[A0] > taken[B0] > taken[B1]
    # 16 spare over backlogs 99, 0, 49, 9 (of 157): 10.09, 0, 4.99, 0.92 -> 10, 0, 4, 0 and
    # the two left over to the largest remainders (B0's .99, B1's .92).
    assert taken == {A0: 11, A1: 1, B0: 6, B1: 2}
    for limit in range(4, 161):
        taken = allocate({A0: 100, A1: 1, B0: 50, B1: 10}, limit, 7)
        assert sum(taken.values()) == min(limit, 161)
        assert all(1 <= taken[k] <= n for k, n in {A0: 100, A1: 1, B0: 50, B1: 10}.items())


def test_allocate_with_fewer_messages_than_queues_takes_turns() -> None:
    backlog = {A0: 5, A1: 5, B0: 5, B1: 5}
    assert allocate(backlog, 2, 0) == {A0: 1, A1: 1}
    assert allocate(backlog, 2, 2) == {B0: 1, B1: 1}
    assert allocate(backlog, 3, 3) == {B1: 1, A0: 1, A1: 1}


def test_next_offsets_goes_to_the_max_within_the_limit() -> None:
    queues = [queue(A0, 0, 30), queue(A1, 0, 4), queue(B0, 2, 2)]
    start = {A0: 10, A1: 4, B0: 2}
    assert next_offsets(start, queues, max_rows=None, target=None,
                        fail_on_data_loss=True) == {A0: 30, A1: 4, B0: 2}  # fmt: skip
    assert next_offsets(start, queues, max_rows=5, target=None,
                        fail_on_data_loss=True) == {A0: 15, A1: 4, B0: 2}  # fmt: skip


def test_a_new_queue_starts_at_its_min_offset_and_is_read_from_the_next_batch() -> None:
    queues = [queue(A0, 0, 30), queue(B0, 3, 8)]
    end = next_offsets({A0: 30}, queues, max_rows=None, target=None, fail_on_data_loss=True)
    assert end == {A0: 30, B0: 3}
    assert next_offsets(end, queues, max_rows=None, target=None,
                        fail_on_data_loss=True) == {A0: 30, B0: 8}  # fmt: skip


def test_a_queue_gone_from_the_route_keeps_its_offset() -> None:
    end = next_offsets({A0: 4, B1: 9}, [queue(A0, 0, 6)], max_rows=None, target=None,
                       fail_on_data_loss=True)  # fmt: skip
    assert end == {A0: 6, B1: 9}


def test_the_available_now_target_caps_every_queue() -> None:
    queues = [queue(A0, 0, 30), queue(A1, 0, 9), queue(B0, 0, 5)]
    target = {A0: 20, A1: 9}  # B0 appeared after the target was taken: left out
    end = next_offsets({A0: 10, A1: 0}, queues, max_rows=None, target=target,
                       fail_on_data_loss=True)  # fmt: skip
    assert end == {A0: 20, A1: 9}
    assert next_offsets(end, queues, max_rows=None, target=target,
                        fail_on_data_loss=True) == end  # fmt: skip


def test_a_queue_that_now_ends_before_the_start_is_data_loss(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queues = [queue(A0, 0, 3), queue(A1, 0, 9)]
    with pytest.raises(DataLossError, match="topic T, broker broker-a, queue 0: the query has "
                       "read up to offset 7 but the queue's max offset is now 3"):  # fmt: skip
        next_offsets({A0: 7, A1: 0}, queues, max_rows=None, target=None, fail_on_data_loss=True)
    with caplog.at_level(logging.WARNING, logger="boltmq.pipeline"):
        end = next_offsets({A0: 7, A1: 0}, queues, max_rows=None, target=None,
                           fail_on_data_loss=False)  # fmt: skip
    assert end == {A0: 7, A1: 9}
    assert "waiting until the queue passes offset 7" in caplog.text
