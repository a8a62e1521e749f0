"""Truncating a running store's tail (`MessageStore.truncate_commit_log`), on both stores.

Real files in tmp_path with 64 KiB commit-log files (5,000-byte messages cross file ends),
64-entry consume-queue files and a small index; the memory store runs the same checks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from protocol.message import decode_record
from storage import (
    GetMessageStatus,
    MessageExtBrokerInner,
    MessageStoreConfig,
    PutMessageResult,
    PutMessageStatus,
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
        # Puts continue each queue right after its last kept entry, at the cut.
        again = await store.put_message(message(99, 1))
        assert again.status is PutMessageStatus.PUT_OK
        assert again.queue_offset == len([i for i in range(kept) if i % 2 == 1])
        assert again.wrote_offset == results[kept].wrote_offset
        assert bodies(store, 1, again.queue_offset) == [b"m99"]
        assert len(store.query_message(TOPIC, "key99", 10, 0, 1 << 62).buffers) == 1
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


async def test_truncated_file_store_recovers_the_cut(make_config: MakeConfig) -> None:
    config = make_config()
    async with open_message_store(config) as store:
        results = await put_all(store, 30)
        kept = 11
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
