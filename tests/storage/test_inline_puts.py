"""Puts appended in their callers' tasks: order, visibility, flush, cancellation, failure.

The order, visibility and cancellation cases are the `MessageStore` protocol's too: they run
on the memory store as well (the `open_store` fixture).

Real stores in tmp_path with small files (64 KiB commit log, 64-entry consume-queue files).
A put with nothing queued ahead, awaited or with a callback (the send path), is appended
inline; with ASYNC_FLUSH it is answered at once, with SYNC_FLUSH after the flush covering it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

from protocol.message import decode_record
from storage import (
    FileMessageStore,
    FlushDiskType,
    GetMessageStatus,
    MessageExtBrokerInner,
    MessageStoreConfig,
    PutMessageResult,
    PutMessageStatus,
    open_message_store,
)
from storage._encode import encode_message
from storage._record import patch_append_fields
from storage.commit_log import EncodedPut
from tests.storage.helpers import StoreOpener, writer_of

MakeConfig = Callable[..., MessageStoreConfig]


def message(i: int, queue_id: int = 0, **props: str) -> MessageExtBrokerInner:
    return MessageExtBrokerInner(
        topic="TopicTest",
        body=f"body-{i}".encode() * 20,
        queue_id=queue_id,
        properties={"TAGS": f"Tag{i % 2}", "UNIQ_KEY": f"U{i:06d}", **props},
        born_timestamp=1,
    )


async def test_callback_and_awaited_puts_keep_each_callers_order(
    make_config: MakeConfig, open_store: StoreOpener
) -> None:
    # Each task alternates callback puts and awaited puts, both appended in the task when
    # nothing is queued: per queue, the offsets follow the call order and the answers come
    # in that order too (a callback put is answered at once, as an awaited one returns).
    async with open_store(make_config()) as store:
        tasks, per_task = 6, 40
        answered: dict[int, list[int]] = {q: [] for q in range(tasks)}
        callbacks_done = trio.Event()
        pending = [0]

        async def caller(queue_id: int) -> None:
            for i in range(per_task):
                msg = message(queue_id * 1000 + i, queue_id=queue_id)
                if i % 3 == 0:
                    pending[0] += 1

                    def done(result: PutMessageResult, q: int = queue_id) -> None:
                        answered[q].append(result.queue_offset)
                        pending[0] -= 1
                        if not pending[0]:
                            callbacks_done.set()

                    store.put_message_nowait(msg, done)
                else:
                    result = await store.put_message(msg)
                    assert result.status is PutMessageStatus.PUT_OK
                    answered[queue_id].append(result.queue_offset)

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                for q in range(tasks):
                    nursery.start_soon(caller, q)
            if pending[0]:
                await callbacks_done.wait()
        for q in range(tasks):
            assert answered[q] == list(range(per_task)), q
            bodies: list[bytes] = []
            while len(bodies) < per_task:
                got = store.get_message("g", "TopicTest", q, len(bodies), per_task)
                assert got.status is GetMessageStatus.FOUND
                bodies.extend(decode_record(b).body for b in got.buffers)
                got.release()
            assert bodies == [f"body-{q * 1000 + i}".encode() * 20 for i in range(per_task)]
        if isinstance(store, FileMessageStore):
            stats = writer_of(store).statistics()
            assert stats.inline_puts == tasks * per_task
            assert stats.records == tasks * per_task


async def test_a_get_right_after_an_inline_put_sees_it(
    make_config: MakeConfig, open_store: StoreOpener
) -> None:
    async with open_store(make_config()) as store:
        for i in range(5):
            result = await store.put_message(message(i, queue_id=1, KEYS=f"key{i}"))
            # No yield between the answer and the reads: they complete the open group.
            assert store.get_max_offset_in_queue("TopicTest", 1) == i + 1
            got = store.get_message("g", "TopicTest", 1, i, 1)
            assert got.status is GetMessageStatus.FOUND
            assert decode_record(got.buffers[0]).body == f"body-{i}".encode() * 20
            got.release()
            assert store.look_message_by_offset(result.wrote_offset) is not None
            assert len(store.query_message("TopicTest", f"key{i}", 4, 0, 2**62).buffers) == 1
            assert store.statistics().dispatch_behind_bytes == 0
        if isinstance(store, FileMessageStore):
            assert writer_of(store).statistics().inline_puts == 5


async def test_sync_flush_inline_put_is_answered_after_the_flush_covers_it(
    make_config: MakeConfig,
) -> None:
    config = make_config(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    async with open_message_store(config) as store:
        for i in range(3):
            result = await store.put_message(message(i))
            assert result.status is PutMessageStatus.PUT_OK
            assert store.commit_log.flushed_offset >= result.wrote_offset + result.wrote_bytes
            # Visible to readers once flushed, with its queue entry.
            assert store.get_max_offset_in_queue("TopicTest", 0) == i + 1
        # A callback put is appended inline too, and answered after the flush as well: not
        # before put_message_nowait returns, and before the awaited put after it.
        flushed_at_callback: list[bool] = []

        def done(result: PutMessageResult) -> None:
            end = result.wrote_offset + result.wrote_bytes
            flushed_at_callback.append(store.commit_log.flushed_offset >= end)

        store.put_message_nowait(message(3), done)
        assert flushed_at_callback == []
        result = await store.put_message(message(4))
        assert result.queue_offset == 4
        assert store.commit_log.flushed_offset >= result.wrote_offset + result.wrote_bytes
        assert flushed_at_callback == [True]
        assert writer_of(store).statistics().inline_puts == 5


async def test_an_async_flush_callback_put_is_answered_at_once_and_readable(
    make_config: MakeConfig,
) -> None:
    # The send path: appended in the caller's task and answered before put_message_nowait
    # returns; a read right after the answer sees the message, and the record is byte for
    # byte the one the queued path encodes (storage._encode.encode_message).
    async with open_message_store(make_config()) as store:
        for i in range(5):
            answered: list[PutMessageResult] = []
            msg = message(i, queue_id=2, KEYS=f"key{i}")
            store.put_message_nowait(msg, answered.append)
            assert [(r.status, r.queue_offset) for r in answered] == [(PutMessageStatus.PUT_OK, i)]
            got = store.get_message("g", "TopicTest", 2, i, 1)
            assert got.status is GetMessageStatus.FOUND
            record = bytes(got.buffers[0])
            got.release()
            expected = encode_message(msg, store.config.store_host, store.config.max_message_size)
            assert isinstance(expected, EncodedPut)
            patched = bytearray(expected.data)
            patch_append_fields(
                patched, 0, i, answered[0].wrote_offset, answered[0].store_timestamp
            )
            assert record == bytes(patched)
            assert len(store.query_message("TopicTest", f"key{i}", 4, 0, 2**62).buffers) == 1
        assert writer_of(store).statistics().inline_puts == 5


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
async def test_a_put_cancelled_before_it_is_appended_stores_nothing(
    make_config: MakeConfig, flush: FlushDiskType, open_store: StoreOpener
) -> None:
    async with open_store(make_config(flush_disk_type=flush)) as store:
        with trio.CancelScope() as scope:
            scope.cancel()
            await store.put_message(message(0))
        assert scope.cancelled_caught
        assert store.get_max_phy_offset() == 0
        assert store.get_max_offset_in_queue("TopicTest", 0) == 0
        result = await store.put_message(message(1))
        assert (result.status, result.queue_offset, result.wrote_offset) == (
            PutMessageStatus.PUT_OK,
            0,
            0,
        )


async def test_a_failed_dispatch_of_inline_puts_crashes_the_writer_not_the_caller(
    make_config: MakeConfig,
) -> None:
    boom = OSError("no space left for a consume-queue file")
    answered: list[PutMessageResult] = []
    with pytest.raises(BaseExceptionGroup) as raised:
        async with open_message_store(make_config()) as store:

            def fail(*args: object) -> None:
                raise boom

            store.dispatcher.dispatch_group = fail  # type: ignore[method-assign]
            answered.append(await store.put_message(message(0)))
            # This read completes the open group: the failure is the writer's, so the read
            # itself answers, and the writer stops the store (its supervisor restarts it).
            assert store.get_max_offset_in_queue("TopicTest", 0) == 0
            with trio.fail_after(5):
                await trio.sleep_forever()
    assert raised.value.subgroup(lambda e: e is boom) is not None
    assert [r.status for r in answered] == [PutMessageStatus.PUT_OK]
