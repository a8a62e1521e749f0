"""Truncating a running store's tail (`MessageStore.truncate_commit_log`), on both stores.

Real files in tmp_path with 64 KiB commit-log files (5,000-byte messages cross file ends),
64-entry consume-queue files and a small index; the memory store runs the same checks.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import trio

from protocol.message import decode_record
from storage import (
    FlushDiskType,
    GetMessageStatus,
    MessageBatch,
    MessageExtBrokerInner,
    MessageStoreConfig,
    PutMessageResult,
    PutMessageStatus,
    StoreCheckpoint,
    StoreTruncationError,
    open_message_store,
)
from tests.storage.helpers import StoreOpener

MakeConfig = Callable[..., MessageStoreConfig]
TOPIC = "TopicTest"


def message(i: int, queue_id: int) -> MessageExtBrokerInner:
    return MessageExtBrokerInner(
        topic=TOPIC,
        body=f"m{i}-".encode() + b"x" * 5000,
        queue_id=queue_id,
        properties={"KEYS": f"key{i}"},
        born_timestamp=1,
    )


async def put_all(store: Any, count: int) -> list[PutMessageResult]:
    results = []
    for i in range(count):
        result = await store.put_message(message(i, i % 2))
        assert result.status is PutMessageStatus.PUT_OK
        results.append(result)
    return results


def bodies(store: Any, queue_id: int, offset: int = 0) -> list[bytes]:
    got = store.get_message("g", TOPIC, queue_id, offset, 64, max_total_bytes=1 << 24)
    if got.status is not GetMessageStatus.FOUND:
        return []
    return [decode_record(bytes(buffer)).body.split(b"-")[0] for buffer in got.buffers]


def check_cut(store: Any, results: list[PutMessageResult], kept: int) -> None:
    """The store holds exactly the first ``kept`` messages, on every read path."""
    cut = results[kept].wrote_offset
    assert store.get_max_phy_offset() == cut
    for queue_id in (0, 1):
        expected = [f"m{i}".encode() for i in range(kept) if i % 2 == queue_id]
        assert store.get_max_offset_in_queue(TOPIC, queue_id) == len(expected)
        assert bodies(store, queue_id) == expected
    for i, result in enumerate(results):
        record = store.look_message_by_offset(result.wrote_offset)
        found = store.query_message(TOPIC, f"key{i}", 10, 0, 1 << 62).buffers
        if i < kept:
            assert record is not None and len(found) == 1
        else:
            assert record is None, f"message {i} at {result.wrote_offset} still readable"
            assert found == [], f"key{i} still indexed"


async def test_truncate_at_a_message_then_put(
    open_store: StoreOpener, make_config: MakeConfig
) -> None:
    async with open_store(make_config()) as store:
        results = await put_all(store, 30)  # about 2.3 commit-log files
        kept = 17  # in the second file
        assert await store.truncate_commit_log(results[kept].wrote_offset) == (
            results[kept].wrote_offset
        )
        check_cut(store, results, kept)
        # Puts continue each queue right after its last kept entry, at the cut. The new
        # message has the key of the first one dropped, at the same offset: the dropped
        # index entry must not find it a second time.
        again = await store.put_message(message(kept, 0 if kept % 2 else 1))
        assert again.status is PutMessageStatus.PUT_OK
        assert again.queue_offset == len([i for i in range(kept) if i % 2 == 0])
        assert again.wrote_offset == results[kept].wrote_offset
        assert bodies(store, 0, again.queue_offset) == [f"m{kept}".encode()]
        assert len(store.query_message(TOPIC, f"key{kept}", 10, 0, 1 << 62).buffers) == 1
        # Truncating at or past the end changes nothing.
        end = store.get_max_phy_offset()
        assert await store.truncate_commit_log(end + 10) == end


async def test_truncate_refuses_an_offset_inside_a_record(
    open_store: StoreOpener, make_config: MakeConfig
) -> None:
    async with open_store(make_config()) as store:
        results = await put_all(store, 6)
        with pytest.raises(StoreTruncationError, match="no record starts"):
            await store.truncate_commit_log(results[3].wrote_offset + 7)
        with pytest.raises(StoreTruncationError):
            await store.truncate_commit_log(-1)
        # Nothing changed.
        assert store.get_max_phy_offset() == results[-1].wrote_offset + results[-1].wrote_bytes
        assert store.get_max_offset_in_queue(TOPIC, 0) == 3


async def test_truncate_everything_and_at_a_file_start(
    open_store: StoreOpener, make_config: MakeConfig
) -> None:
    async with open_store(make_config()) as store:
        results = await put_all(store, 30)
        # The first message of the second commit-log file starts it.
        first_of_second = next(r for r in results if r.wrote_offset >= 64 * 1024)
        kept = results.index(first_of_second)
        await store.truncate_commit_log(first_of_second.wrote_offset)
        check_cut(store, results, kept)
        await store.truncate_commit_log(0)
        check_cut(store, results, 0)
        again = await store.put_message(message(7, 0))
        assert (again.wrote_offset, again.queue_offset) == (0, 0)


@pytest.mark.parametrize("where", ["first file", "second file's start", "everything"])
async def test_truncated_file_store_recovers_the_cut(make_config: MakeConfig, where: str) -> None:
    config = make_config()
    async with open_message_store(config) as store:
        results = await put_all(store, 30)
        second = next(i for i, r in enumerate(results) if r.wrote_offset >= 64 * 1024)
        kept = {"first file": 11, "second file's start": second, "everything": 0}[where]
        await store.truncate_commit_log(results[kept].wrote_offset)
    # A clean restart, then a restart after a crash (the abort file left behind).
    for crashed in (False, True):
        if crashed:
            config.abort_path.write_bytes(b"")
        async with open_message_store(make_config()) as store:
            check_cut(store, results, kept)
            again = await store.put_message(message(50 + crashed, 0))
            assert again.queue_offset == len([i for i in range(kept) if i % 2 == 0])
            await store.truncate_commit_log(again.wrote_offset)


async def test_sync_flush_truncation_waits_for_the_puts_ahead(make_config: MakeConfig) -> None:
    # SYNC_FLUSH: puts appended but not yet flushed when the truncation is asked; each
    # consume-queue entry must still point at its own record afterwards.
    async with open_message_store(make_config(flush_disk_type=FlushDiskType.SYNC_FLUSH)) as store:
        results = await put_all(store, 8)
        answered: list[PutMessageResult] = []

        async def put(i: int) -> None:
            answered.append(await store.put_message(message(i, i % 2)))

        async with trio.open_nursery() as nursery:
            for i in range(8, 20):
                nursery.start_soon(put, i)
            nursery.start_soon(store.truncate_commit_log, results[5].wrote_offset)
        assert all(r.status is PutMessageStatus.PUT_OK for r in answered)
        for queue_id in (0, 1):
            queue = store.consume_queues.find(TOPIC, queue_id)
            assert queue is not None
            for queue_offset in range(queue.min_offset, queue.max_offset):
                entry = queue.get(queue_offset)
                assert entry is not None
                record = store.look_message_by_offset(entry[0])
                assert record is not None, f"queue {queue_id} entry {queue_offset} dangles"
                decoded = decode_record(bytes(record))
                assert (decoded.queue_id, decoded.queue_offset) == (queue_id, queue_offset)
        # Puts queued ahead of the truncation were cut with the rest; those behind it follow.
        assert store.get_max_phy_offset() >= results[5].wrote_offset


async def test_truncation_lowers_the_checkpoint_before_the_cut(make_config: MakeConfig) -> None:
    # Each put a second later than the last, so the checkpoint's times say which record.
    ticks = itertools.count(1_700_000_000_000, 1000)
    config = make_config(clock=lambda: next(ticks))
    async with open_message_store(config) as store:
        results = await put_all(store, 12)
        await trio.to_thread.run_sync(store.flush_logics)
        checkpoint = StoreCheckpoint(config.checkpoint_path)
        assert checkpoint.logics_msg_timestamp == results[-1].store_timestamp
        await store.truncate_commit_log(results[4].wrote_offset)
        checkpoint = StoreCheckpoint(config.checkpoint_path)
        newest_left = results[3].store_timestamp
        assert checkpoint.logics_msg_timestamp == newest_left
        assert checkpoint.physic_msg_timestamp <= newest_left


async def test_truncate_inside_a_batch(open_store: StoreOpener, make_config: MakeConfig) -> None:
    # A batch's records are stored back to back: a cut may fall between two of them.
    async with open_store(make_config()) as store:
        elements = [(0, f"b{i}-".encode() + b"z" * 100, "") for i in range(5)]
        put = await store.put_messages(MessageBatch(topic=TOPIC, queue_id=0, elements=elements))
        assert put.status is PutMessageStatus.PUT_OK
        third = put.physical_offsets[2]
        with pytest.raises(StoreTruncationError):
            await store.truncate_commit_log(third + 1)
        assert await store.truncate_commit_log(third) == third
        assert bodies(store, 0) == [b"b0", b"b1"]
        again = await store.put_message(message(9, 0))
        assert (again.wrote_offset, again.queue_offset) == (third, 2)
        assert bodies(store, 0) == [b"b0", b"b1", b"m9"]
