"""Retention: old commit-log files go at the delete hour or when the disk is full; consume
queue and index files that point only below the new min offset follow; min offsets move.
The store's clock is injected, so files are aged without waiting."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import trio
import trio.testing

from protocol.message import decode_record
from storage import (
    FileMessageStore,
    GetMessageStatus,
    MessageExtBrokerInner,
    MessageStoreConfig,
    RetentionService,
    open_message_store,
)

MakeConfig = Callable[..., MessageStoreConfig]
HOUR_MS = 3600 * 1000


class FakeClock:
    """Epoch ms that a test moves forward."""

    def __init__(self) -> None:
        self.now = time.time_ns() // 1_000_000

    def __call__(self) -> int:
        return self.now

    def hour(self) -> str:
        return f"{time.localtime(self.now / 1000).tm_hour:02d}"


def retention_of(store: FileMessageStore) -> RetentionService:
    """A retention service over the store's own files."""
    return RetentionService(store.config, store.commit_log, store.consume_queues, store.index)


async def fill(store: Any, count: int) -> None:
    for i in range(count):
        await store.put_message(
            MessageExtBrokerInner(
                topic="TopicTest",
                body=bytes([i % 256]) * 4000,
                queue_id=0,
                properties={"KEYS": f"key-{i}"},
            )
        )


def other_hour(clock: FakeClock) -> str:
    return f"{(int(clock.hour()) + 1) % 24:02d}"


async def test_expired_files_go_at_the_delete_hour_and_min_offsets_move(
    make_config: MakeConfig,
) -> None:
    clock = FakeClock()
    config = make_config(
        clock=clock,
        delete_when=other_hour(clock),
        delete_files_batch_max=100,
        max_index_num=40,
        disk_usage_ratio=lambda _: 0.10,
    )
    async with open_message_store(config) as store:
        await fill(store, 200)  # ~13 commit-log files, 4 consume-queue files, 5+ index files
        store.query_message("TopicTest", "key-0", 1, 0, 2**62)  # builds the keys that wait
        files_before = len(store.commit_log.files.files)
        index_before = len(store.index.files) if store.index else 0
        assert files_before >= 12 and index_before >= 5
        service = retention_of(store)
        clock.now += 96 * HOUR_MS  # whole days keep the local hour
        assert service.clean_once().commit_log_files == 0  # not the delete hour
        config.delete_when = f"{other_hour(clock)};{clock.hour()}"
        result = service.clean_once()
        assert result.commit_log_files == files_before - 1  # never the file being written
        assert len(store.commit_log.files.files) == 1
        min_phy = store.get_min_phy_offset()
        assert min_phy == store.commit_log.files.files[0].file_from_offset > 0
        assert result.consume_queue_files == 3
        assert result.index_files >= 1
        min_offset = store.get_min_offset_in_queue("TopicTest", 0)
        assert min_offset > 0
        head = store.get_message("g", "TopicTest", 0, min_offset, 1)
        assert head.status is GetMessageStatus.FOUND
        assert decode_record(head.buffers[0]).commit_log_offset >= min_phy
        before = store.get_message("g", "TopicTest", 0, min_offset - 1, 1)
        assert before.status is GetMessageStatus.OFFSET_TOO_SMALL
        assert before.next_begin_offset == min_offset
        assert store.query_message("TopicTest", "key-3", 4, 0, 2**62).buffers == []
        assert len(store.query_message("TopicTest", "key-199", 4, 0, 2**62).buffers) == 1
        head.release()
        # Writing goes on; a restart keeps the moved min offsets.
        await fill(store, 1)
    async with open_message_store(config) as store:
        assert store.get_min_phy_offset() == min_phy
        assert store.get_min_offset_in_queue("TopicTest", 0) == min_offset
        assert store.get_max_offset_in_queue("TopicTest", 0) == 201


async def test_files_not_yet_expired_stay(make_config: MakeConfig) -> None:
    clock = FakeClock()
    config = make_config(clock=clock, delete_when=clock.hour(), disk_usage_ratio=lambda _: 0.1)
    async with open_message_store(config) as store:
        await fill(store, 50)
        clock.now += 48 * HOUR_MS
        assert retention_of(store).clean_once().commit_log_files == 0
        assert store.get_min_phy_offset() == 0


async def test_full_disk_deletes_expired_files_at_once(make_config: MakeConfig) -> None:
    clock = FakeClock()
    ratio = [0.5]
    config = make_config(
        clock=clock,
        delete_when=other_hour(clock),
        delete_files_batch_max=3,
        disk_usage_ratio=lambda _: ratio[0],
    )
    async with open_message_store(config) as store:
        await fill(store, 100)
        service = retention_of(store)
        clock.now += 96 * HOUR_MS  # whole days keep the local hour
        assert service.clean_once().commit_log_files == 0
        ratio[0] = 0.80  # over diskMaxUsedSpaceRatio 75: expired files go, 3 per round
        assert service.clean_once().commit_log_files == 3
        assert store.get_min_phy_offset() == 3 * config.mapped_file_size_commit_log


async def test_disk_over_the_forced_ratio_deletes_unexpired_files(make_config: MakeConfig) -> None:
    clock = FakeClock()
    config = make_config(
        clock=clock,
        delete_when=other_hour(clock),
        delete_files_batch_max=2,
        disk_usage_ratio=lambda _: 0.90,
    )
    async with open_message_store(config) as store:
        await fill(store, 100)
        assert retention_of(store).clean_once().commit_log_files == 2


async def test_retention_service_runs_periodically(
    make_config: MakeConfig, autojump_clock: trio.testing.MockClock
) -> None:
    clock = FakeClock()
    config = make_config(
        clock=clock,
        delete_when=clock.hour(),
        clean_resource_interval_ms=50,
        disk_usage_ratio=lambda _: 0.1,
        delete_files_batch_max=100,
    )
    async with open_message_store(config) as store:
        await fill(store, 50)
        clock.now += 96 * HOUR_MS
        with trio.fail_after(60):  # virtual seconds: the first round runs after 10
            while store.get_min_phy_offset() == 0:
                await trio.sleep(1)
        assert len(store.commit_log.files.files) == 1
