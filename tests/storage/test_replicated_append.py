"""A slave store's appends: the master's commit-log bytes replicated in arbitrary chunks.

Real files in tmp_path with 64 KiB commit-log files so that records cross file ends.
"""

from __future__ import annotations

import errno
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from protocol.message import decode_record
from storage import (
    BrokerRole,
    FileMessageStore,
    MessageExtBrokerInner,
    MessageStoreConfig,
    PutMessageStatus,
    open_message_store,
)

MakeConfig = Callable[..., MessageStoreConfig]


def message(body: bytes, **props: str) -> Any:
    return MessageExtBrokerInner(
        topic="TopicTest", body=body, queue_id=0, properties=props, born_timestamp=1
    )


@asynccontextmanager
async def master_and_slave(
    make_config: MakeConfig, tmp_path: Path
) -> AsyncIterator[tuple[FileMessageStore, FileMessageStore]]:
    """A master store and a SLAVE store (replicated data is handed over by the test)."""
    slave_config = make_config(store_path_root_dir=tmp_path / "slave", broker_role=BrokerRole.SLAVE)
    async with (
        open_message_store(make_config()) as master,
        open_message_store(slave_config) as slave,
    ):
        yield master, slave


async def test_slave_refuses_puts_and_takes_replicated_data(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    async with master_and_slave(make_config, tmp_path) as (master, slave):
        refused = await slave.put_message(message(b"hello"))
        assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        for i in range(30):
            await master.put_message(message(body=b"m" * 5000, KEYS=f"k{i}"))
        # Replicate in odd-sized chunks that split records, as HA frames may.
        offset = 0
        while offset < master.get_max_phy_offset():
            data = master.get_commit_log_data(offset)
            assert data is not None
            for start in range(0, len(data), 7777):
                chunk = bytes(data[start : start + 7777])
                assert await slave.append_to_commit_log(offset, chunk)
                offset += len(chunk)
        assert not await slave.append_to_commit_log(offset + 10, b"x")  # not at max offset
        assert slave.get_max_phy_offset() == master.get_max_phy_offset()
        assert slave.get_max_offset_in_queue("TopicTest", 0) == 30
        got = slave.get_message("g", "TopicTest", 0, 28, 32)
        assert [decode_record(b).queue_offset for b in got.buffers] == [28, 29]
        assert len(slave.query_message("TopicTest", "k7", 4, 0, 2**62).buffers) == 1


async def test_a_replicated_append_the_disk_refuses_is_refused_and_the_store_goes_on(
    make_config: MakeConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with master_and_slave(make_config, tmp_path) as (master, slave):
        for _ in range(3):
            await master.put_message(message(body=b"m" * 500))
        data = master.get_commit_log_data(0)
        assert data is not None
        whole = bytes(data)

        def disk_full(fd: int, data: bytes, offset: int) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "pwrite", disk_full)
        assert not await slave.append_to_commit_log(0, whole)
        assert slave.get_max_phy_offset() == 0
        monkeypatch.undo()
        assert await slave.append_to_commit_log(0, whole)  # the writer is still there
        assert slave.get_max_offset_in_queue("TopicTest", 0) == 3
