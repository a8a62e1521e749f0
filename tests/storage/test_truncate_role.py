"""A running store changing role (`MessageStore.change_role`): a slave that replicated its
master's log becomes master and continues every queue where it ends; a master becomes a
slave that refuses puts and takes replicated data at its max offset.

Real files in tmp_path (64 KiB commit-log files); the replicated data is handed over by the
test, in chunks that split records, as HA frames may.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from protocol.message import decode_record
from storage import (
    BrokerRole,
    FileMessageStore,
    GetMessageStatus,
    MessageExtBrokerInner,
    MessageStoreConfig,
    PutMessageStatus,
    open_memory_store,
    open_message_store,
)

MakeConfig = Callable[..., MessageStoreConfig]
TOPIC = "TopicTest"


def message(i: int, queue_id: int) -> MessageExtBrokerInner:
    return MessageExtBrokerInner(
        topic=TOPIC,
        body=f"m{i}-".encode() + b"y" * 3000,
        queue_id=queue_id,
        properties={"KEYS": f"key{i}"},
        born_timestamp=1,
    )


async def replicate(master: FileMessageStore, slave: FileMessageStore, until: int) -> None:
    """Copy the master's log into the slave up to ``until``, in 777-byte chunks."""
    offset = slave.get_max_phy_offset()
    while offset < until:
        data = master.get_commit_log_data(offset)
        assert data is not None
        chunk = bytes(data[: min(777, until - offset)])
        assert await slave.append_to_commit_log(offset, chunk)
        offset += len(chunk)


def queue_bodies(store: FileMessageStore, queue_id: int) -> list[bytes]:
    got = store.get_message("g", TOPIC, queue_id, 0, 64, max_total_bytes=1 << 24)
    assert got.status is GetMessageStatus.FOUND
    return [decode_record(bytes(b)).body.split(b"-")[0] for b in got.buffers]


async def test_slave_becomes_master_and_continues_the_queues(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    slave_config = make_config(store_path_root_dir=tmp_path / "slave", broker_role=BrokerRole.SLAVE)
    async with (
        open_message_store(make_config()) as master,
        open_message_store(slave_config) as slave,
    ):
        results = [await master.put_message(message(i, i % 3)) for i in range(40)]
        # Everything but the last record, plus half of it: the slave ends inside a record.
        last = results[-1]
        await replicate(master, slave, last.wrote_offset + last.wrote_bytes // 2)
        assert (await slave.put_message(message(0, 0))).status is (
            PutMessageStatus.SERVICE_NOT_AVAILABLE
        )
        assert await slave.change_role(BrokerRole.SYNC_MASTER) == last.wrote_offset
        assert slave.get_max_phy_offset() == last.wrote_offset  # the partial record is gone
        for queue_id in range(3):
            have = [i for i in range(39) if i % 3 == queue_id]
            assert slave.get_max_offset_in_queue(TOPIC, queue_id) == len(have)
            put = await slave.put_message(message(100 + queue_id, queue_id))
            assert put.status is PutMessageStatus.PUT_OK
            # No gap and no duplicate: the next offset after the replicated entries.
            assert put.queue_offset == len(have)
            assert queue_bodies(slave, queue_id) == [
                f"m{i}".encode() for i in [*have, 100 + queue_id]
            ]


async def test_master_becomes_slave_and_takes_replicated_data(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    new_master_config = make_config(store_path_root_dir=tmp_path / "new-master")
    async with (
        open_message_store(make_config()) as old,
        open_message_store(new_master_config) as new,
    ):
        for i in range(5):
            await old.put_message(message(i, 0))
            await new.put_message(message(i, 0))
        assert old.get_max_phy_offset() == new.get_max_phy_offset()
        end = await old.change_role(BrokerRole.SLAVE)
        assert end == old.get_max_phy_offset()
        refused = await old.put_message(message(9, 0))
        assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert "slave" in refused.remark
        for i in range(5, 12):
            await new.put_message(message(i, 0))
        await replicate(new, old, new.get_max_phy_offset())
        assert queue_bodies(old, 0) == [f"m{i}".encode() for i in range(12)]
        assert len(old.query_message(TOPIC, "key11", 5, 0, 1 << 62).buffers) == 1


async def test_memory_store_changes_role(make_config: MakeConfig) -> None:
    async with open_memory_store(make_config()) as store:
        await store.put_message(message(0, 0))
        await store.change_role(BrokerRole.SLAVE)
        assert (await store.put_message(message(1, 0))).status is (
            PutMessageStatus.SERVICE_NOT_AVAILABLE
        )
        await store.change_role(BrokerRole.ASYNC_MASTER)
        assert (await store.put_message(message(2, 0))).queue_offset == 1


async def test_slave_whose_log_ends_inside_an_end_of_file_blank_becomes_master(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    slave_config = make_config(store_path_root_dir=tmp_path / "slave", broker_role=BrokerRole.SLAVE)
    async with (
        open_message_store(make_config()) as master,
        open_message_store(slave_config) as slave,
    ):
        results = [await master.put_message(message(i, 0)) for i in range(30)]
        second = next(r for r in results if r.wrote_offset >= 64 * 1024)
        before = results[results.index(second) - 1]
        blank_start = before.wrote_offset + before.wrote_bytes
        # The blank's 8-byte header and a few of the bytes it covers, not the rest.
        await replicate(master, slave, blank_start + 20)
        assert await slave.change_role(BrokerRole.ASYNC_MASTER) == 64 * 1024
        put = await slave.put_message(message(500, 0))
        assert (put.wrote_offset, put.queue_offset) == (64 * 1024, results.index(second))
    # The log reads back whole after a restart.
    async with open_message_store(make_config(store_path_root_dir=tmp_path / "slave")) as again:
        assert again.get_max_phy_offset() == put.wrote_offset + put.wrote_bytes
        assert queue_bodies(again, 0)[-1] == b"m500"
