"""The memory store on its own: the file store's bytes without files, what it refuses, its
life as a supervisor child, and its retention.

The tests of the `MessageStore` protocol it shares with the file store are in test_store.py
(parametrised over both stores). No files are written here except the file store's, under
tmp_path, to compare bytes with.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

from protocol.message import decode_record
from storage import (
    GetMessageStatus,
    MemoryMessageStore,
    MessageBatch,
    MessageExtBrokerInner,
    MessageStore,
    MessageStoreConfig,
    PutMessageResult,
    PutMessageStatus,
    StoreError,
    StoreUnsupportedError,
    open_memory_store,
    open_message_store,
)

MakeConfig = Callable[..., MessageStoreConfig]
HOUR_MS = 3600 * 1000


def message(i: int, queue_id: int = 0) -> MessageExtBrokerInner:
    return MessageExtBrokerInner(
        topic="TopicTest",
        body=f"body-{i}".encode() * 10,
        queue_id=queue_id,
        properties={"TAGS": f"Tag{i % 2}", "KEYS": f"k{i}", "UNIQ_KEY": f"U{i:04d}"},
        born_timestamp=1_700_000_000_000 + i,
    )


async def test_records_and_msg_ids_are_the_file_stores_bytes(make_config: MakeConfig) -> None:
    now = [1_700_000_000_000]
    config = make_config(clock=lambda: now[0])
    batch = MessageBatch(
        topic="TopicTest", queue_id=1, elements=[(0, b"b0", "TAGS\x01T"), (0, b"b1", "")]
    )
    answers: dict[str, list[PutMessageResult]] = {}
    records: dict[str, list[bytes]] = {}
    for name, opener in (("file", open_message_store), ("memory", open_memory_store)):
        now[0] = 1_700_000_000_000
        async with opener(config) as store:
            results = []
            for i in range(6):
                now[0] += 7
                results.append(await store.put_message(message(i, queue_id=i % 2)))
            results.append(await store.put_messages(batch))
            answers[name] = results
            records[name] = [
                bytes(buffer)
                for queue_id in (0, 1)
                for buffer in store.get_message("g", "TopicTest", queue_id, 0, 32).buffers
            ]
            assert bytes(store.look_message_by_offset(results[3].wrote_offset) or b"") == bytes(
                store.get_message("g", "TopicTest", 1, 1, 1).buffers[0]
            )
    assert records["memory"] == records["file"]
    assert [r.msg_id for r in answers["memory"]] == [r.msg_id for r in answers["file"]]
    assert [decode_record(r).store_host for r in records["memory"]] == [config.store_host] * 8


async def test_ha_replication_is_refused_with_a_clear_error(make_config: MakeConfig) -> None:
    async with open_memory_store(make_config()) as store:
        await store.put_message(message(0))
        with pytest.raises(StoreUnsupportedError, match=r"memory store.*file store"):
            await store.append_to_commit_log(store.get_max_phy_offset(), b"\0" * 16)
        with pytest.raises(StoreUnsupportedError, match=r"memory store.*file store") as raised:
            store.get_commit_log_data(0)
        assert isinstance(raised.value, StoreError)
        # Refusing changed nothing.
        assert store.get_max_offset_in_queue("TopicTest", 0) == 1


async def test_run_is_a_supervisor_child_and_a_second_run_keeps_the_messages(
    make_config: MakeConfig,
) -> None:
    store = MemoryMessageStore(make_config())
    typed: MessageStore = store
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            await nursery.start(typed.run)
            assert store.running
            await store.put_message(message(0))
            await store.aclose()
        assert not store.running
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            assert store.get_max_offset_in_queue("TopicTest", 0) == 1
            assert (await store.put_message(message(1))).queue_offset == 1
            nursery.cancel_scope.cancel()  # cancellation ends it as aclose does
    assert not store.running


async def test_retention_drops_records_older_than_the_reserved_hours(
    make_config: MakeConfig,
) -> None:
    now = [1_700_000_000_000]
    config = make_config(clock=lambda: now[0], file_reserved_time_hours=1)
    async with open_memory_store(config) as store:
        old = [await store.put_message(message(i)) for i in range(3)]
        now[0] += HOUR_MS // 2
        young = [await store.put_message(message(i)) for i in range(3, 5)]
        assert isinstance(store, MemoryMessageStore)
        assert store.clean_once() == 0
        now[0] += HOUR_MS // 2
        dropped = store.clean_once()
        assert dropped == sum(r.wrote_bytes for r in old)
        assert store.get_min_phy_offset() == young[0].wrote_offset
        assert store.get_min_offset_in_queue("TopicTest", 0) == 3
        assert store.get_max_offset_in_queue("TopicTest", 0) == 5
        too_small = store.get_message("g", "TopicTest", 0, 0, 32)
        assert (too_small.status, too_small.next_begin_offset) == (
            GetMessageStatus.OFFSET_TOO_SMALL,
            3,
        )
        assert store.get_message("g", "TopicTest", 0, 3, 32).queue_offsets == [3, 4]
        assert store.look_message_by_offset(old[0].wrote_offset) is None
        assert store.query_message("TopicTest", "k1", 4, 0, 2**62).buffers == []
        assert len(store.query_message("TopicTest", "k4", 4, 0, 2**62).buffers) == 1
        assert store.get_earliest_message_store_time() == young[0].store_timestamp
        assert store.get_earliest_message_time("TopicTest", 0) == young[0].store_timestamp
        now[0] += HOUR_MS
        store.clean_once()
        assert store.get_min_phy_offset() == store.get_max_phy_offset()
        assert store.get_min_offset_in_queue("TopicTest", 0) == 5
        assert store.get_earliest_message_store_time() == 0
        # Offsets go on where they were.
        assert (await store.put_message(message(5))).queue_offset == 5


async def test_a_message_too_large_for_a_commit_log_file_is_illegal(
    make_config: MakeConfig,
) -> None:
    # The file store's limit too, so that both stores take the same messages.
    config = make_config(max_message_size=1 << 20)
    async with open_memory_store(config) as store:
        huge = await store.put_message(MessageExtBrokerInner(topic="TopicTest", body=b"h" * 70_000))
        assert huge.status is PutMessageStatus.MESSAGE_ILLEGAL
        assert "commit-log file" in huge.remark
        assert store.get_max_phy_offset() == 0
        assert store.statistics().put_failures == 1
