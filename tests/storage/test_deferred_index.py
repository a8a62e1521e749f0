"""The index lags the puts: the dispatcher keeps a group commit's keys until enough wait.

A writer call costs about as much as a few keys and a group commit holds one millisecond's
keys, so the dispatcher builds them `DEFERRED_INDEX_KEYS` at a time (RocketMQ's index lags the
puts too: its reput service builds it). Under SYNC_FLUSH the writer also answers the puts
before it builds their keys. Whatever reads or changes the index builds the waiting keys
first: a query, the checkpoint, a replayed or replicated dispatch, a truncation, a clean
shutdown; the index files come out byte for byte as when each group's keys went in at once.
Real stores in tmp_path; the dispatcher's own order on a real index.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import (
    FlushDiskType,
    MessageExtBrokerInner,
    MessageStoreConfig,
    PutMessageResult,
    PutMessageStatus,
    open_message_store,
)
from storage.consume_queue import ConsumeQueueStore
from storage.dispatch import DEFERRED_INDEX_KEYS, CommitLogDispatcher
from storage.index_file import IndexService
from tests.storage.helpers import small_config, store_files

MakeConfig = Callable[..., MessageStoreConfig]


def message(i: int) -> MessageExtBrokerInner:
    return MessageExtBrokerInner(
        topic="TopicTest",
        body=b"body-%d" % i,
        queue_id=i % 2,
        properties={"KEYS": f"order-{i}", "UNIQ_KEY": f"U{i:06d}"},
        born_timestamp=1,
    )


async def test_a_sync_flush_put_is_answered_before_its_keys_are_indexed_and_found_at_once(
    make_config: MakeConfig,
) -> None:
    config = make_config(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    async with open_message_store(config) as store:
        waiting_at_answer: list[list[str]] = []

        def answered(result: PutMessageResult) -> None:
            assert result.status is PutMessageStatus.PUT_OK
            deferred = store.dispatcher.deferred_index
            waiting_at_answer.append([key for keys, _ in deferred for key, _ in keys])

        with trio.fail_after(20):
            for i in range(5):
                store.put_message_nowait(message(i), answered)
                while len(waiting_at_answer) <= i:
                    await trio.sleep(0.001)
                # Answered with its keys not yet in the index, and found by a query at once.
                assert f"TopicTest#order-{i}" in waiting_at_answer[i]
                found = store.query_message("TopicTest", f"order-{i}", 4, 0, 2**62)
                assert len(found.buffers) == 1
                assert not store.dispatcher.deferred_index
            # The writer indexes them itself later (the checkpoint round, here).
            store.put_message_nowait(message(5), answered)
            while store.dispatcher.deferred_index or len(waiting_at_answer) < 6:
                await trio.sleep(0.001)
            assert store.index is not None
            assert store.index.query("TopicTest", "U000005", 4, 0, 2**62)


async def test_a_sync_flush_store_leaves_the_same_index_as_an_async_one(tmp_path: Path) -> None:
    """Keys still waiting at shutdown are indexed by it: the files are the same."""
    roots = {mode: tmp_path / mode.name for mode in FlushDiskType}
    for mode, root in roots.items():
        config = small_config(root, flush_disk_type=mode, clock=lambda: 1_700_000_000_000)
        async with open_message_store(config) as store:
            for i in range(40):
                assert (await store.put_message(message(i))).ok
    index = {name: data for name, data in store_files(roots[FlushDiskType.SYNC_FLUSH]).items()
             if name.startswith("index")}  # fmt: skip
    assert index and index == {
        name: data
        for name, data in store_files(roots[FlushDiskType.ASYNC_FLUSH]).items()
        if name.startswith("index")
    }


def test_the_dispatcher_builds_waiting_keys_in_order_when_enough_wait(tmp_path: Path) -> None:
    index = IndexService(tmp_path / "index", 64, 4096, lambda: 1_700_000_000_000)
    index.load()
    dispatcher = CommitLogDispatcher(ConsumeQueueStore(tmp_path / "cq", 64), index)
    dispatcher.dispatch_group([], [("T#a", 100)], 100, 1_700_000_000_000, 1, defer_index=True)
    dispatcher.dispatch_group([], [("T#b", 200)], 200, 1_700_000_000_000, 1, defer_index=True)
    dispatcher.dispatch_group([], [("T#a", 300)], 300, 1_700_000_000_001, 1)
    assert index.query("T", "a", 8, 0, 2**62) == []  # waiting: two keys are not enough
    assert dispatcher.index_end_offset == 300 and dispatcher.deferred_keys == 3
    # Keys enough: a deferred dispatch (SYNC_FLUSH, before its answers) still waits ...
    many = [(f"T#k{i}", 400 + i) for i in range(DEFERRED_INDEX_KEYS)]
    dispatcher.dispatch_group([], many[:-1], 400 + len(many) - 2, 1_700_000_000_002, 1,
                              defer_index=True)  # fmt: skip
    assert dispatcher.index_due and dispatcher.deferred_keys == DEFERRED_INDEX_KEYS + 2
    assert index.query("T", "b", 8, 0, 2**62) == []
    # ... any other builds everything waiting, in dispatch order.
    dispatcher.dispatch_group([], many[-1:], many[-1][1], 1_700_000_000_003, 1)
    assert dispatcher.deferred_index == [] and dispatcher.deferred_keys == 0
    assert index.query("T", "a", 8, 0, 2**62) == [300, 100]  # newest first
    assert index.query("T", "b", 8, 0, 2**62) == [200]
    assert index.query("T", f"k{DEFERRED_INDEX_KEYS - 1}", 8, 0, 2**62) == [many[-1][1]]
    assert index.end_phy_offset == many[-1][1]
    assert index.last_update_timestamp == 1_700_000_000_003
    dispatcher.build_deferred_index()  # nothing waiting: nothing added twice
    assert index.query("T", "a", 8, 0, 2**62) == [300, 100]


def test_a_replayed_dispatch_builds_the_waiting_keys_before_its_own(tmp_path: Path) -> None:
    index = IndexService(tmp_path / "index", 64, 256, lambda: 1_700_000_000_000)
    index.load()
    dispatcher = CommitLogDispatcher(ConsumeQueueStore(tmp_path / "cq", 64), index)
    dispatcher.dispatch_group([], [("T#a", 100)], 100, 1_700_000_000_000, 1)
    assert dispatcher.deferred_keys == 1
    dispatcher.build_deferred_index()
    assert index.query("T", "a", 8, 0, 2**62) == [100]


async def test_an_async_flush_store_indexes_waiting_keys_for_a_query_and_a_checkpoint(
    make_config: MakeConfig,
) -> None:
    config = make_config(flush_interval_consume_queue_ms=50)
    async with open_message_store(config) as store:
        assert store.index is not None
        for i in range(3):
            assert (await store.put_message(message(i))).ok
        # A pull settles the puts (their group commit), not the index: the keys wait.
        store.get_message("g", "TopicTest", 0, 0, 8).release()
        assert store.dispatcher.deferred_keys == 6  # KEYS and UNIQ_KEY of each
        assert store.index.query("TopicTest", "order-2", 4, 0, 2**62) == []
        # A query finds a key at once: it builds what waits first.
        assert len(store.query_message("TopicTest", "order-2", 4, 0, 2**62).buffers) == 1
        assert store.dispatcher.deferred_keys == 0
        assert (await store.put_message(message(3))).ok
        store.get_message("g", "TopicTest", 1, 0, 8).release()
        assert store.dispatcher.deferred_keys == 2
        # The checkpoint round builds them too, before it records the index's time.
        with trio.fail_after(20):
            while store.dispatcher.deferred_keys:
                await trio.sleep(0.01)
        assert store.index.query("TopicTest", "U000003", 4, 0, 2**62)


# Segments as group commits leave them: a few keys each (some none), store times a few
# milliseconds to seconds apart, offsets growing; a small file so that runs cross into new ones.
_SEGMENTS = st.lists(
    st.tuples(st.integers(0, 9), st.sampled_from([0, 1, 3, 400, 999, 1000, 2500])),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(shape=_SEGMENTS, max_index_num=st.sampled_from([8, 13, 64, 4096]))
def test_segments_built_at_once_leave_the_bytes_of_one_build_each(
    tmp_path_factory: pytest.TempPathFactory,
    shape: list[tuple[int, int]],
    max_index_num: int,
) -> None:
    segments: list[tuple[list[tuple[str, int]], int]] = []
    timestamp, offset = 1_700_000_000_500, 1000
    for count, step in shape:
        timestamp += step
        keys = []
        for _ in range(count):
            offset += 97
            keys.append((f"TopicTest#7F0000010001{offset:020X}", offset))
        segments.append((keys, timestamp))
    root = tmp_path_factory.mktemp("segments")
    one_each = IndexService(root / "one", 16, max_index_num, lambda: 1_700_000_000_000)
    at_once = IndexService(root / "once", 16, max_index_num, lambda: 1_700_000_000_000)
    for keys, store_timestamp in segments:
        if keys:  # (an empty one opens no file)
            one_each.build_many(keys, store_timestamp)
    at_once.build_segments(segments)
    assert [f.path.name for f in at_once.files] == [f.path.name for f in one_each.files]
    for merged, single in zip(at_once.files, one_each.files, strict=True):
        assert bytes(merged._map) == bytes(single._map)
    one_each.close()
    at_once.close()
