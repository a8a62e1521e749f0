"""The store writer opens the consume-queue files a put will need before appending its record:
a file that cannot be opened (EMFILE at the open-file limit) refuses the put, with nothing
appended, and the writer goes on; files opened ahead are the ones the entries land in, across
file ends, and they load again."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio

from protocol.message import decode_records
from storage import (
    FlushDiskType,
    MessageBatch,
    MessageExtBrokerInner,
    PutMessageResult,
    PutMessageStatus,
    open_message_store,
)
from tests.storage.helpers import small_config, writer_of

ENTRIES = 64  # per consume-queue file (small_config)


def _message(topic: str, queue_id: int, n: int) -> MessageExtBrokerInner:
    return MessageExtBrokerInner(topic=topic, body=b"m%d" % n, queue_id=queue_id)


@contextmanager
def _no_descriptor_left() -> Iterator[None]:
    """Set the soft open-file limit to the lowest free descriptor: the next open is EMFILE."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest = os.dup(0)
    os.close(lowest)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
async def test_a_queue_file_that_cannot_be_opened_refuses_the_put_before_appending(
    tmp_path: Path, flush: FlushDiskType
) -> None:
    config = small_config(tmp_path / "store", flush_disk_type=flush)
    async with open_message_store(config) as store:
        for n in range(ENTRIES):  # the first file of T:0 is full
            assert (await store.put_message(_message("T", 0, n))).status is PutMessageStatus.PUT_OK
        phy = store.get_max_phy_offset()
        answers: list[PutMessageResult] = []
        with _no_descriptor_left():
            # The next entry of T:0 needs its second file; T:1 needs its first.
            refused = [
                await store.put_message(_message("T", 0, ENTRIES)),
                await store.put_message(_message("T", 1, 0)),
                await store.put_messages(MessageBatch("T", 2, [(0, b"b", "")] * 3)),
            ]
            store.put_message_nowait(_message("T", 1, 0), answers.append)
            store.put_messages_nowait(MessageBatch("T", 0, [(0, b"b", "")] * 3), answers.append)
        for result in [*refused, *answers]:
            assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE, result
            assert "open-file limit" in result.remark and "T:" in result.remark, result.remark
        assert len(answers) == 2
        # Nothing was appended: the commit log and the queues are where they were.
        assert store.get_max_phy_offset() == phy
        assert store.get_max_offset_in_queue("T", 0) == ENTRIES
        assert store.get_max_offset_in_queue("T", 1) == 0
        # The writer goes on, at the next dense queue offsets, in the files opened now.
        result = await store.put_message(_message("T", 0, ENTRIES))
        assert result.status is PutMessageStatus.PUT_OK and result.queue_offset == ENTRIES
        result = await store.put_message(_message("T", 1, 0))
        assert result.status is PutMessageStatus.PUT_OK and result.queue_offset == 0
        assert writer_of(store).status.value == "running"
    async with open_message_store(config) as store:
        assert store.get_max_offset_in_queue("T", 0) == ENTRIES + 1
        assert store.get_max_offset_in_queue("T", 1) == 1
        assert store.get_max_offset_in_queue("T", 2) == 0
        got = store.get_message("G", "T", 0, ENTRIES, 1, None)
        assert got.message_count == 1


async def test_files_opened_ahead_take_the_entries_across_file_ends(tmp_path: Path) -> None:
    config = small_config(tmp_path / "store")
    sizes = [ENTRIES - 3, 10, 2 * ENTRIES + 5, 1, 1, 7]  # batches crossing one and two file ends
    results: list[PutMessageResult] = []
    async with open_message_store(config) as store:
        for n, size in enumerate(sizes):
            batch = MessageBatch("A", 0, [(0, b"a%d-%d" % (n, i), "") for i in range(size)])
            # Half awaited, half queued behind each other (the writer's backlog path).
            if n % 2:
                store.put_messages_nowait(batch, results.append)
            else:
                results.append(await store.put_messages(batch))
        with trio.fail_after(30):
            while len(results) < len(sizes):
                await trio.sleep(0.01)
        assert all(r.status is PutMessageStatus.PUT_OK for r in results), results
        total = sum(sizes)
        assert store.get_max_offset_in_queue("A", 0) == total
        queue = store.consume_queues.find("A", 0)
        assert queue is not None
        assert len(queue.files.files) == (total + ENTRIES - 1) // ENTRIES
        assert not queue._opened_ahead  # every file opened ahead was taken by its entries
    async with open_message_store(config) as store:
        assert store.get_max_offset_in_queue("A", 0) == total
        bodies = []
        offset = 0
        while offset < total:
            got = store.get_message("G", "A", 0, offset, 32, None)
            assert got.message_count, offset
            bodies += [m.body for buf in got.buffers for m in decode_records(bytes(buf))]
            offset = got.next_begin_offset
            got.release()
        expected = [b"a%d-%d" % (n, i) for n, size in enumerate(sizes) for i in range(size)]
        assert bodies == expected
