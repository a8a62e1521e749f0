"""Under SYNC_FLUSH the writer answers a flushed group's puts before it indexes their keys.

The producers wait for the answers and nothing needs the keys before them, so the writer lets
the answers go out first (`StoreWriter._index_after_answers`). Whatever reads or changes the
index builds the waiting keys first: a query or any other read (`settle`), a dispatch that is
not deferred, a truncation, a clean shutdown. Real stores in tmp_path; the dispatcher's own
order on a real index.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import trio

from storage import (
    FlushDiskType,
    MessageExtBrokerInner,
    MessageStoreConfig,
    PutMessageResult,
    PutMessageStatus,
    open_message_store,
)
from storage.consume_queue import ConsumeQueueStore
from storage.dispatch import CommitLogDispatcher
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
            # The writer indexes them itself once the answers are out.
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


def test_the_dispatcher_builds_deferred_keys_in_order_before_any_other(tmp_path: Path) -> None:
    index = IndexService(tmp_path / "index", 64, 256, lambda: 1_700_000_000_000)
    index.load()
    dispatcher = CommitLogDispatcher(ConsumeQueueStore(tmp_path / "cq", 64), index)
    dispatcher.dispatch_group([], [("T#a", 100)], 100, 1_700_000_000_000, 1, defer_index=True)
    dispatcher.dispatch_group([], [("T#b", 200)], 200, 1_700_000_000_000, 1, defer_index=True)
    assert index.query("T", "a", 8, 0, 2**62) == []  # waiting
    assert dispatcher.index_end_offset == 200
    # A dispatch that is not deferred adds the waiting keys first, in their order.
    dispatcher.dispatch_group([], [("T#a", 300)], 300, 1_700_000_000_001, 1)
    assert dispatcher.deferred_index == []
    assert index.query("T", "a", 8, 0, 2**62) == [300, 100]  # newest first
    assert index.query("T", "b", 8, 0, 2**62) == [200]
    assert index.end_phy_offset == 300
    dispatcher.build_deferred_index()  # nothing waiting: nothing added twice
    assert index.query("T", "a", 8, 0, 2**62) == [300, 100]
