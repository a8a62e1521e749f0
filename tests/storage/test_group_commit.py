"""Group commit: many concurrent puts appended, flushed, dispatched and answered together.

Real stores in tmp_path with small files (64 KiB commit log, 64-entry consume-queue files,
256-entry index files) so that one group crosses file ends of every kind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from protocol.message import decode_record
from storage import (
    FlushDiskType,
    GetMessageStatus,
    MessageExtBrokerInner,
    MessageStoreConfig,
    PutMessageResult,
    PutMessageStatus,
    open_message_store,
)
from storage.store_writer import GROUP_LIMIT
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


async def test_sync_flush_answers_only_after_the_bytes_are_flushed(
    make_config: MakeConfig,
) -> None:
    config = make_config(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    async with open_message_store(config) as store:
        durable_at_answer: list[bool] = []
        results: list[PutMessageResult] = []

        async def put(i: int) -> None:
            result = await store.put_message(message(i, queue_id=i % 3))
            # Read the flushed offset right as the answer arrives, before anything else runs.
            end = result.wrote_offset + result.wrote_bytes
            durable_at_answer.append(store.commit_log.flushed_offset >= end)
            results.append(result)

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                for i in range(3 * GROUP_LIMIT + 17):
                    nursery.start_soon(put, i)
        assert all(r.status is PutMessageStatus.PUT_OK for r in results)
        assert all(durable_at_answer)
        stats = store.statistics()
        assert stats.put_messages == len(results)
        assert stats.write_batches < len(results)


async def test_callback_puts_in_sync_flush_are_answered_once_after_the_flush(
    make_config: MakeConfig,
) -> None:
    config = make_config(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    async with open_message_store(config) as store:
        answers: dict[int, list[tuple[PutMessageResult, bool]]] = {}
        done = trio.Event()
        total = 2 * GROUP_LIMIT + 5

        def callback_for(i: int) -> Callable[[PutMessageResult], None]:
            def callback(result: PutMessageResult) -> None:
                end = result.wrote_offset + result.wrote_bytes
                answers.setdefault(i, []).append((result, store.commit_log.flushed_offset >= end))
                if len(answers) == total:
                    done.set()

            return callback

        for i in range(total):
            store.put_message_nowait(message(i), callback_for(i))
        with trio.fail_after(10):
            await done.wait()
        assert all(len(got) == 1 for got in answers.values())
        assert all(
            r.status is PutMessageStatus.PUT_OK and durable for ((r, durable),) in answers.values()
        )
        offsets = sorted(got[0][0].queue_offset for got in answers.values())
        assert offsets == list(range(total))


async def test_a_large_group_crosses_queue_index_and_commit_log_file_ends(
    make_config: MakeConfig,
) -> None:
    heard: list[tuple[str, int, int]] = []
    config = make_config()
    async with open_message_store(
        config, message_arriving_listener=lambda *a: heard.append(a)
    ) as store:
        results: dict[int, PutMessageResult] = {}
        total = 300  # > 64 entries per consume-queue file, > 256 keys per index file

        async def put(i: int) -> None:
            results[i] = await store.put_message(message(i, KEYS=f"k{i} shared"))

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                for i in range(total):
                    nursery.start_soon(put, i)
        assert all(r.status is PutMessageStatus.PUT_OK for r in results.values())
        assert store.statistics().commit_log_files > 1
        assert store.get_max_offset_in_queue("TopicTest", 0) == total
        # Every queue offset leads to the record that was answered with it.
        by_queue_offset = {r.queue_offset: i for i, r in results.items()}
        offset = 0
        while offset < total:
            got = store.get_message("g", "TopicTest", 0, offset, 32)
            assert got.status is GetMessageStatus.FOUND
            for qo, buffer in zip(got.queue_offsets, got.buffers, strict=True):
                record = decode_record(buffer)
                assert record.queue_offset == qo
                assert record.body == f"body-{by_queue_offset[qo]}".encode() * 20
            offset = got.next_begin_offset
            got.release()
        for i in (0, 150, 299):
            hits = store.query_message("TopicTest", f"U{i:06d}", 4, 0, 2**62).buffers
            assert [decode_record(b).body for b in hits] == [f"body-{i}".encode() * 20]
            assert len(store.query_message("TopicTest", f"k{i}", 4, 0, 2**62).buffers) == 1
        assert store.index is not None and len(store.index.files) > 1
        assert heard[-1] == ("TopicTest", 0, total)
        assert [h[2] for h in heard] == sorted(h[2] for h in heard)


async def test_puts_of_several_queues_in_one_group_get_consecutive_offsets(
    make_config: MakeConfig, open_store: StoreOpener
) -> None:
    # The protocol's promise (on both stores): concurrent puts take consecutive offsets.
    async with open_store(make_config()) as store:
        results: list[tuple[int, PutMessageResult]] = []

        async def put(i: int) -> None:
            results.append((i % 5, await store.put_message(message(i, queue_id=i % 5))))

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                for i in range(200):
                    nursery.start_soon(put, i)
        for queue_id in range(5):
            offsets = sorted(r.queue_offset for q, r in results if q == queue_id)
            assert offsets == list(range(40))
            assert store.get_max_offset_in_queue("TopicTest", queue_id) == 40


async def test_restart_after_group_commits_recovers_every_entry(make_config: MakeConfig) -> None:
    config = make_config(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    answered: list[Any] = []
    async with open_message_store(config) as store:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                for i in range(150):
                    nursery.start_soon(_put_into, store, i, answered)
    async with open_message_store(config) as store:
        assert store.get_max_offset_in_queue("TopicTest", 0) == 150
        result = await store.put_message(message(150))
        assert result.queue_offset == 150
        assert len(store.query_message("TopicTest", "U000042", 4, 0, 2**62).buffers) == 1


async def _put_into(store: Any, i: int, answered: list[Any]) -> None:
    answered.append(await store.put_message(message(i)))


async def test_a_full_mailbox_blocks_callers_and_every_put_is_answered(
    make_config: MakeConfig,
) -> None:
    from storage._encode import encode_message
    from storage.store_writer import StoreCounters, StoreWriter

    config = make_config(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    async with open_message_store(config) as store:
        # A second writer with a tiny mailbox: callers past it wait for room (PutRecords),
        # which cuts the shared-event runs apart.
        writer = StoreWriter(
            config,
            store.commit_log,
            store.consume_queues,
            store.dispatcher,
            StoreCounters(),
            mailbox_size=4,
        )
        results: list[PutMessageResult] = []

        async def put(i: int) -> None:
            encoded = encode_message(message(i), config.store_host, config.max_message_size)
            assert not isinstance(encoded, PutMessageResult)
            result = await writer.put(encoded, 5)
            assert store.commit_log.flushed_offset >= result.wrote_offset + result.wrote_bytes
            results.append(result)

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                await nursery.start(writer.run)
                async with trio.open_nursery() as puts:
                    for i in range(50):
                        puts.start_soon(put, i)
                await writer.aclose()
        assert sorted(r.queue_offset for r in results) == list(range(50))
        assert all(r.status is PutMessageStatus.PUT_OK for r in results)
        stopped = await writer.put(_encoded(config, 99), 1)
        assert stopped.status is PutMessageStatus.SERVICE_NOT_AVAILABLE


def _encoded(config: MessageStoreConfig, i: int) -> Any:
    from storage._encode import encode_message

    return encode_message(message(i), config.store_host, config.max_message_size)


async def test_closing_a_sync_store_under_load_answers_every_put(make_config: MakeConfig) -> None:
    config = make_config(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    results: list[PutMessageResult] = []
    with trio.fail_after(15):
        async with open_message_store(config) as store:

            async def putter(queue_id: int) -> None:
                while True:
                    result = await store.put_message(message(len(results), queue_id=queue_id))
                    results.append(result)
                    if not result.ok:
                        return

            async with trio.open_nursery() as nursery:
                for q in range(32):
                    nursery.start_soon(putter, q % 4)
                while len(results) < 300:
                    await trio.sleep(0.001)
                await store.aclose()
        stored = [r for r in results if r.ok]
        assert len(stored) >= 300
        assert all(r.status is PutMessageStatus.PUT_OK for r in stored)
        assert {r.status for r in results if not r.ok} == {PutMessageStatus.SERVICE_NOT_AVAILABLE}
        # Every answered put is there after a restart, at the offsets it was answered with.
        async with open_message_store(config) as store:
            for r in stored:
                record = store.look_message_by_offset(r.wrote_offset)
                assert record is not None
                assert decode_record(record).queue_offset == r.queue_offset


async def test_messages_encoded_straight_into_the_file_match_the_general_path(
    make_config: MakeConfig, tmp_path: Any
) -> None:
    # An awaited put_message of a known topic with IPv4 hosts is encoded straight into the
    # mapped file (append_message); everything else is encoded first (encode_message) and
    # copied (append_put). Both stores must hold the same bytes, record for record.
    from storage._encode import encode_message

    def messages() -> list[MessageExtBrokerInner]:
        out = []
        for i in range(60):
            props: dict[str, str] = {"UNIQ_KEY": f"7F00000100002A9F0000{i:012X}"}
            if i % 2:
                props["TAGS"] = f"Tag{i % 3}"
            if i % 5 == 0:
                props["KEYS"] = f"order-{i} shared"
            if i % 7 == 0:
                props = {}
            out.append(
                MessageExtBrokerInner(
                    topic="TopicTest" if i % 4 else "Other",
                    body=bytes([i]) * (i * 37 % 3000),
                    queue_id=i % 3,
                    flag=i - 30,
                    properties=props,
                    sys_flag=(0x1, 0x2, 0x8, 0x301)[i % 4],
                    born_timestamp=1_700_000_000_000 + i,
                    born_host=("::1", 5000) if i % 11 == 0 else ("10.0.0.7", 40000 + i),
                    reconsume_times=i % 4,
                    tags_code=12345 if i % 13 == 0 else None,
                )
            )
        return out

    stores: list[bytes] = []
    for name, direct in (("direct", True), ("general", False)):
        config = make_config(store_path_root_dir=tmp_path / name, clock=lambda: 1_700_000_100_000)
        async with open_message_store(config) as store:
            for msg in messages():
                if direct:
                    result = await store.put_message(msg)
                else:
                    encoded = encode_message(msg, config.store_host, config.max_message_size)
                    assert not isinstance(encoded, PutMessageResult)
                    result = await store.put_encoded(encoded)
                assert result.status is PutMessageStatus.PUT_OK
            assert store.statistics().put_messages == 60  # a read: completes the open group
            assert writer_of(store).statistics().inline_puts == 60
            stores.append(
                b"".join(bytes(f.view[: f.wrote_position]) for f in store.commit_log.files.files)
            )
    assert stores[0] == stores[1]
    assert len(stores[0]) > config.mapped_file_size_commit_log  # crossed a file end on the way
