"""The stores end to end: puts, gets, statuses, filters, limits, lookups, restart.

The tests of the `MessageStore` protocol run on both stores (the `open_store` fixture: the
file store and the memory store); those about files run on the file store only. Real files
in tmp_path with 64 KiB commit-log files so that records cross file ends.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from protocol.message import MessageSysFlag, decode_record
from protocol.names import SCHEDULE_TOPIC
from storage import (
    BrokerRole,
    FileMessageStore,
    FlushDiskType,
    GetMessageStatus,
    MessageBatch,
    MessageExtBrokerInner,
    MessageStore,
    MessageStoreConfig,
    PutMessageResult,
    PutMessageStatus,
    StoreLockedError,
    open_message_store,
)
from storage._hash import java_hash
from storage.mapped_file import SPARE_NAME
from storage.message_store import PREFAULT_AHEAD
from storage.store_config import DEFAULT_SCHEDULE_DELAYS_MS
from tests.storage.helpers import StoreOpener

MakeConfig = Callable[..., MessageStoreConfig]


def message(
    topic: str = "TopicTest", body: bytes = b"hello", queue_id: int = 0, **props: str
) -> Any:
    return MessageExtBrokerInner(
        topic=topic, body=body, queue_id=queue_id, properties=props, born_timestamp=1
    )


async def test_each_store_satisfies_the_protocol(
    make_config: MakeConfig, open_store: StoreOpener
) -> None:
    async with open_store(make_config()) as store:
        typed: MessageStore = store
        assert typed.get_max_phy_offset() == 0


async def test_put_assigns_offsets_and_get_returns_the_records(
    make_config: MakeConfig, open_store: StoreOpener
) -> None:
    clock = iter(range(1_700_000_000_000, 1_800_000_000_000, 1000))
    config = make_config(clock=lambda: next(clock))
    async with open_store(config) as store:
        first = await store.put_message(message(body=b"a", TAGS="TagA", KEYS="k1 k2"))
        second = await store.put_message(message(body=b"bb", TAGS="TagB"))
        other_queue = await store.put_message(message(body=b"c", queue_id=1))
        assert first.status is PutMessageStatus.PUT_OK
        assert (first.queue_offset, second.queue_offset, other_queue.queue_offset) == (0, 1, 0)
        assert first.wrote_offset == 0
        assert second.wrote_offset == first.wrote_bytes
        assert len(first.msg_id) == 32
        assert first.msg_id.endswith(f"{0:016X}")
        result = store.get_message("g", "TopicTest", 0, 0, 32)
        assert result.status is GetMessageStatus.FOUND
        assert result.message_count == 2
        assert result.next_begin_offset == 2
        assert (result.min_offset, result.max_offset) == (0, 2)
        assert all(isinstance(b, memoryview) for b in result.buffers)
        decoded = [decode_record(b) for b in result.buffers]
        assert [m.body for m in decoded] == [b"a", b"bb"]
        assert [m.queue_offset for m in decoded] == [0, 1]
        assert [m.commit_log_offset for m in decoded] == [first.wrote_offset, second.wrote_offset]
        assert decoded[0].store_timestamp == first.store_timestamp
        assert decoded[0].store_host == config.store_host
        assert result.buffer_total_size == first.wrote_bytes + second.wrote_bytes
        # The slice is the commit log's own bytes, not a copy.
        assert result.buffers[0].obj is store.look_message_by_offset(first.wrote_offset).obj
        if isinstance(store, FileMessageStore):
            assert result.buffers[0].obj is store.commit_log.files.files[0].view.obj


async def test_get_statuses(make_config: MakeConfig, open_store: StoreOpener) -> None:
    async with open_store(make_config()) as store:
        assert (
            store.get_message("g", "Nope", 0, 0, 32).status
            is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        )
        for _ in range(3):
            await store.put_message(message())
        one = store.get_message("g", "TopicTest", 0, 3, 32)
        assert (one.status, one.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_ONE, 3)
        bad = store.get_message("g", "TopicTest", 0, 9, 32)
        assert (bad.status, bad.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 3)
        tail = store.get_message("g", "TopicTest", 0, 2, 32)
        assert (tail.status, tail.message_count, tail.next_begin_offset) == (
            GetMessageStatus.FOUND,
            1,
            3,
        )


async def test_tag_filter_and_no_matched_message(
    make_config: MakeConfig, open_store: StoreOpener
) -> None:
    async with open_store(make_config()) as store:
        for i in range(6):
            await store.put_message(message(body=bytes([i]), TAGS="TagA" if i % 2 else "TagB"))
        result = store.get_message("g", "TopicTest", 0, 0, 32, tag_codes={java_hash("TagA")})
        assert [decode_record(b).body for b in result.buffers] == [b"\x01", b"\x03", b"\x05"]
        assert result.queue_offsets == [1, 3, 5]
        assert result.next_begin_offset == 6
        none = store.get_message("g", "TopicTest", 0, 0, 32, tag_codes={java_hash("TagC")})
        assert none.status is GetMessageStatus.NO_MATCHED_MESSAGE
        assert none.next_begin_offset == 6


async def test_pull_limits_count_bytes_and_32_messages(
    make_config: MakeConfig, open_store: StoreOpener
) -> None:
    async with open_store(make_config(mapped_file_size_commit_log=1 << 20)) as store:
        for _ in range(40):
            await store.put_message(message(body=b"x" * 1000))
        assert store.get_message("g", "TopicTest", 0, 0, 5).message_count == 5
        assert store.get_message("g", "TopicTest", 0, 0, 100).message_count == 32
        by_bytes = store.get_message("g", "TopicTest", 0, 0, 100, max_total_bytes=3500)
        assert by_bytes.message_count == 3
        assert by_bytes.next_begin_offset == 3
        # At least one message even if it alone is over the byte budget.
        assert store.get_message("g", "TopicTest", 0, 0, 100, max_total_bytes=10).message_count == 1


async def test_records_roll_over_file_ends_with_blank_records(make_config: MakeConfig) -> None:
    async with open_message_store(make_config()) as store:
        results = [await store.put_message(message(body=b"z" * 10_000)) for _ in range(20)]
        files = store.commit_log.files.files
        assert len(files) >= 4
        for result in results:  # no record crosses a file end
            assert (
                result.wrote_offset // 65536
                == (result.wrote_offset + result.wrote_bytes - 1) // 65536
            )
        assert files[1].file_from_offset == 65536
        bodies = []
        offset = 0
        while True:
            got = store.get_message("g", "TopicTest", 0, offset, 32)
            if got.status is not GetMessageStatus.FOUND:
                break
            bodies += [decode_record(b).body for b in got.buffers]
            offset = got.next_begin_offset
        assert len(bodies) == 20


async def test_oversize_message_is_illegal_and_loses_nothing(
    make_config: MakeConfig, open_store: StoreOpener
) -> None:
    config = make_config(max_message_size=8 * 1024)
    async with open_store(config) as store:
        ok1 = await store.put_message(message(body=b"1"))
        big = await store.put_message(message(body=b"x" * 9000))
        ok2 = await store.put_message(message(body=b"2"))
        assert big.status is PutMessageStatus.MESSAGE_ILLEGAL
        assert (ok1.queue_offset, ok2.queue_offset) == (0, 1)
        too_many_props = await store.put_message(message(P="v" * 40_000))
        assert too_many_props.status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
        got = store.get_message("g", "TopicTest", 0, 0, 32)
        assert [decode_record(b).body for b in got.buffers] == [b"1", b"2"]
    # Larger than a whole commit-log file.
    async with open_store(attrs.evolve(config, max_message_size=1 << 20)) as store:
        huge = await store.put_message(message(body=b"h" * 70_000))
        assert huge.status is PutMessageStatus.MESSAGE_ILLEGAL
        # The file store kept the first two (the memory store starts empty).
        kept = 2 if isinstance(store, FileMessageStore) else 0
        assert store.get_max_offset_in_queue("TopicTest", 0) == kept


async def test_batch_gets_consecutive_offsets_and_stays_in_one_file(
    make_config: MakeConfig, open_store: StoreOpener
) -> None:
    async with open_store(make_config()) as store:
        await store.put_message(message(body=b"x" * 60_000))  # leaves < one batch of room
        batch = MessageBatch(
            topic="TopicTest",
            queue_id=0,
            elements=[
                (0, f"b{i}".encode() * 500, f"KEYS\x01bk{i}\x02TAGS\x01T{i}") for i in range(5)
            ],
            properties="WAIT\x01true",
        )
        result = await store.put_messages(batch)
        assert result.status is PutMessageStatus.PUT_OK
        assert (result.queue_offset, result.msg_num) == (1, 5)
        if isinstance(store, FileMessageStore):
            assert result.wrote_offset == 65536  # moved whole to the next file
        else:
            assert result.wrote_offset == store.get_max_phy_offset() - result.wrote_bytes
        assert len(result.msg_id.split(",")) == 5
        got = store.get_message("g", "TopicTest", 0, 1, 32)
        decoded = [decode_record(b) for b in got.buffers]
        assert [m.queue_offset for m in decoded] == [1, 2, 3, 4, 5]
        assert decoded[2].properties["KEYS"] == "bk2"
        assert decoded[2].properties["WAIT"] == "true"
        tagged = store.get_message("g", "TopicTest", 0, 1, 32, tag_codes={java_hash("T3")})
        assert tagged.queue_offsets == [4]
        found = store.query_message("TopicTest", "bk4", 10, 0, 2**62)
        assert [decode_record(b).queue_offset for b in found.buffers] == [5]


async def test_transaction_prepared_and_rollback_are_not_dispatched(
    make_config: MakeConfig, open_store: StoreOpener
) -> None:
    async with open_store(make_config()) as store:
        prepared = message(body=b"half", KEYS="tx")
        prepared.sys_flag = MessageSysFlag.TRANSACTION_PREPARED
        p = await store.put_message(prepared)
        rollback = message(body=b"rb", KEYS="rb")
        rollback.sys_flag = MessageSysFlag.TRANSACTION_ROLLBACK
        r = await store.put_message(rollback)
        n = await store.put_message(message(body=b"normal"))
        assert (p.queue_offset, r.queue_offset, n.queue_offset) == (0, 0, 0)
        assert store.get_max_offset_in_queue("TopicTest", 0) == 1
        record = store.look_message_by_offset(p.wrote_offset)
        assert record is not None and decode_record(record).body == b"half"
        assert len(store.query_message("TopicTest", "tx", 10, 0, 2**62).buffers) == 1
        assert store.query_message("TopicTest", "rb", 10, 0, 2**62).buffers == []


async def test_query_by_key_and_unique_key_within_a_time_range(
    make_config: MakeConfig, open_store: StoreOpener
) -> None:
    now = [1_700_000_000_000]
    async with open_store(make_config(clock=lambda: now[0])) as store:
        for i in range(30):
            now[0] += 60_000
            await store.put_message(
                message(body=str(i).encode(), KEYS=f"order-{i % 3} extra", UNIQ_KEY=f"U{i:04d}")
            )
        start = 1_700_000_000_000
        hits = store.query_message("TopicTest", "order-1", 100, 0, 2**62)
        assert sorted(int(decode_record(b).body) for b in hits.buffers) == list(range(1, 30, 3))
        window = store.query_message(
            "TopicTest", "order-1", 100, start + 60_000 * 4, start + 60_000 * 11
        )
        assert sorted(int(decode_record(b).body) for b in window.buffers) == [4, 7, 10]
        assert len(store.query_message("TopicTest", "order-1", 2, 0, 2**62).buffers) == 2
        by_uniq = store.query_message("TopicTest", "U0017", 32, 0, 2**62)
        assert [decode_record(b).body for b in by_uniq.buffers] == [b"17"]
        assert store.query_message("Other", "order-1", 10, 0, 2**62).buffers == []
        assert hits.index_last_update_timestamp == now[0]


async def test_offset_by_timestamp_and_earliest_time(
    make_config: MakeConfig, open_store: StoreOpener
) -> None:
    now = [1_000_000]
    async with open_store(make_config(clock=lambda: now[0])) as store:
        for _ in range(10):
            now[0] += 1000
            await store.put_message(message())
        assert store.get_offset_in_queue_by_time("TopicTest", 0, 1_004_000) == 3
        assert store.get_offset_in_queue_by_time("TopicTest", 0, 1_004_400) == 3
        assert store.get_offset_in_queue_by_time("TopicTest", 0, 1_004_600) == 4
        assert store.get_offset_in_queue_by_time("TopicTest", 0, 0) == 0
        assert store.get_offset_in_queue_by_time("TopicTest", 0, 9_999_999) == 9
        assert store.get_earliest_message_time("TopicTest", 0) == 1_001_000
        assert store.get_message_store_timestamp("TopicTest", 0, 5) == 1_006_000
        assert store.get_offset_in_queue_by_time("Nope", 0, 1) == 0


async def test_listener_hears_each_queue_that_grew(
    make_config: MakeConfig, open_store: StoreOpener
) -> None:
    heard: list[tuple[str, int, int]] = []
    config = make_config()
    async with open_store(config, message_arriving_listener=lambda *a: heard.append(a)) as store:
        await store.put_message(message(queue_id=2))
        await store.put_message(message(queue_id=2))
        await store.put_message(message(queue_id=3))
        # An awaited put is answered once appended; its group commit (dispatch, listener)
        # follows as soon as the writer runs, with no read needed to trigger it. Puts of one
        # group commit are heard once per queue, with the queue's new max offset.
        await trio.testing.wait_all_tasks_blocked()
        latest: dict[tuple[str, int], int] = {}
        for topic, queue_id, max_offset in heard:
            assert max_offset > latest.get((topic, queue_id), 0)
            latest[(topic, queue_id)] = max_offset
        assert latest == {("TopicTest", 2): 2, ("TopicTest", 3): 1}


async def test_callback_puts_are_answered_before_the_call_returns(
    make_config: MakeConfig, open_store: StoreOpener
) -> None:
    # ASYNC_FLUSH with nothing queued: the send handler's callback runs inside the put call.
    async with open_store(make_config()) as store:
        answers: list[PutMessageResult] = []
        store.put_message_nowait(message(body=b"one", KEYS="cb"), answers.append)
        assert [a.queue_offset for a in answers] == [0]
        batch = MessageBatch(
            topic="TopicTest", queue_id=0, elements=[(0, b"b1", ""), (0, b"b2", "KEYS\x01bk")]
        )
        store.put_messages_nowait(batch, answers.append)
        assert [(a.status, a.queue_offset, a.msg_num) for a in answers[1:]] == [
            (PutMessageStatus.PUT_OK, 1, 2)
        ]
        got = store.get_message("g", "TopicTest", 0, 0, 32)
        assert [decode_record(b).body for b in got.buffers] == [b"one", b"b1", b"b2"]
        assert len(store.query_message("TopicTest", "bk", 4, 0, 2**62).buffers) == 1


async def test_statistics_count_puts_gets_and_failures(
    make_config: MakeConfig, open_store: StoreOpener
) -> None:
    async with open_store(make_config(max_message_size=4096)) as store:
        ok = [await store.put_message(message(queue_id=q)) for q in (0, 0, 1)]
        refused = await store.put_message(message(body=b"x" * 5000))
        assert refused.status is PutMessageStatus.MESSAGE_ILLEGAL
        store.get_message("g", "TopicTest", 0, 0, 32)
        stats = store.statistics()
        assert (stats.put_messages, stats.put_failures) == (3, 1)
        assert stats.put_bytes == sum(r.wrote_bytes for r in ok)
        assert (stats.gets, stats.get_messages) == (1, 2)
        assert stats.consume_queues == 2
        assert stats.commit_log_max_offset == store.get_max_phy_offset()
        assert stats.commit_log_min_offset == store.get_min_phy_offset() == 0
        assert stats.dispatch_behind_bytes == 0
        assert stats.running
        assert sum(stats.put_latency) == stats.puts == 3
    assert not store.statistics().running


async def test_a_closed_store_refuses_puts(
    make_config: MakeConfig, open_store: StoreOpener
) -> None:
    async with open_store(make_config()) as store:
        await store.put_message(message())
    refused = await store.put_message(message())
    assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    answers: list[PutMessageResult] = []
    store.put_message_nowait(message(), answers.append)
    assert [a.status for a in answers] == [PutMessageStatus.SERVICE_NOT_AVAILABLE]


async def test_a_slave_store_refuses_puts(make_config: MakeConfig, open_store: StoreOpener) -> None:
    async with open_store(make_config(broker_role=BrokerRole.SLAVE)) as store:
        refused = await store.put_message(message())
        assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert "slave" in refused.remark


async def test_a_delayed_message_is_queued_under_its_due_time(
    make_config: MakeConfig, open_store: StoreOpener
) -> None:
    async with open_store(make_config()) as store:
        delayed = MessageExtBrokerInner(
            topic=SCHEDULE_TOPIC, body=b"later", queue_id=2, properties={"DELAY": "3"}
        )
        result = await store.put_message(delayed)
        due = result.store_timestamp + DEFAULT_SCHEDULE_DELAYS_MS[2]
        got = store.get_message("g", SCHEDULE_TOPIC, 2, 0, 32, tag_codes={due})
        assert got.queue_offsets == [0]
        assert store.get_message("g", SCHEDULE_TOPIC, 2, 0, 32, tag_codes={0}).buffers == []


async def test_concurrent_puts_are_group_committed(make_config: MakeConfig) -> None:
    config = make_config(
        flush_disk_type=FlushDiskType.SYNC_FLUSH, mapped_file_size_commit_log=1 << 20
    )
    async with open_message_store(config) as store:
        results: list[Any] = []

        async def put(i: int) -> None:
            results.append(await store.put_message(message(body=str(i).encode(), queue_id=i % 4)))

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                for i in range(200):
                    nursery.start_soon(put, i)
        assert all(r.status is PutMessageStatus.PUT_OK for r in results)
        stats = store.statistics()
        assert stats.put_messages == 200
        assert stats.write_batches < 200  # drained together
        assert stats.flushed_offset == stats.commit_log_max_offset
        writer = store._writer
        assert writer is not None
        assert writer.statistics().largest_batch > 1
        assert writer.statistics().sync_flushes == stats.write_batches
        for q in range(4):
            assert store.get_max_offset_in_queue("TopicTest", q) == 50
            offsets = sorted(
                r.queue_offset
                for r in results
                if r.wrote_offset
                in {
                    decode_record(b).commit_log_offset
                    for b in store.get_message("g", "TopicTest", q, 0, 64).buffers
                }
            )
            assert offsets == list(range(32))


async def test_restart_recovers_and_continues_offsets(make_config: MakeConfig) -> None:
    config = make_config()
    async with open_message_store(config) as store:
        for i in range(50):
            await store.put_message(message(body=b"r" * 3000, queue_id=i % 2, KEYS=f"key{i}"))
        max_phy = store.get_max_phy_offset()
    assert not config.abort_path.exists()
    async with open_message_store(config) as store:
        assert not store.recovered_abnormally
        assert store.get_max_phy_offset() == max_phy
        assert store.get_max_offset_in_queue("TopicTest", 1) == 25
        result = await store.put_message(message(queue_id=1))
        assert (result.queue_offset, result.wrote_offset) == (25, max_phy)
        assert len(store.query_message("TopicTest", "key49", 4, 0, 2**62).buffers) == 1


async def test_a_second_store_on_the_same_directory_is_refused(make_config: MakeConfig) -> None:
    config = make_config()
    async with open_message_store(config):
        with pytest.raises(StoreLockedError):
            FileMessageStore(config).open()
    FileMessageStore(config).open()  # released after close


async def test_layout_matches_rocketmq(make_config: MakeConfig, store_root: Path) -> None:
    async with open_message_store(make_config()) as store:
        await store.put_message(message(topic="T1", queue_id=3, KEYS="k"))
        assert (store_root / "abort").exists()
        assert (store_root / "lock").exists()
    assert (store_root / "commitlog" / "00000000000000000000").stat().st_size == 65536
    assert (store_root / "consumequeue" / "T1" / "3" / "00000000000000000000").exists()
    assert len(list((store_root / "index").iterdir())) == 1
    assert (store_root / "checkpoint").stat().st_size == 4096
    assert not (store_root / "abort").exists()


async def test_the_next_commit_log_file_is_made_and_faulted_in_before_the_writer_needs_it(
    make_config: MakeConfig,
) -> None:
    size = 32 << 20
    config = make_config(mapped_file_size_commit_log=size, idle_prefault_bytes=0)
    body = b"s" * (512 << 10)
    async with open_message_store(config) as store:
        files = store.commit_log.files
        # Up to within a quarter of the prefault distance of the file's end: the distance the
        # service keeps (half the usual one, at least) now reaches a quarter into the spare.
        while files.max_offset < size - PREFAULT_AHEAD // 4:
            await store.put_message(message(body=body))
        last = files.files[-1]

        def ahead() -> int:
            spare = files.spare
            if spare is None or last.prefaulted_position < size:
                return 0
            return size - last.wrote_position + spare.prefaulted_position

        with trio.fail_after(20):
            while ahead() < PREFAULT_AHEAD // 2:
                await trio.sleep(0.01)
        spare = files.spare
        assert spare is not None and spare.prefaulted_position >= PREFAULT_AHEAD // 4
        assert spare.path.name == SPARE_NAME
        for _ in range(8):  # into the next file
            await store.put_message(message(body=body))
        assert len(files.files) == 2 and files.files[1] is spare
        assert spare.path.name == f"{size:020d}" and spare.wrote_position > 0
        count = store.get_max_offset_in_queue("TopicTest", 0)
    async with open_message_store(config) as store:
        assert [m.file_from_offset for m in store.commit_log.files.files] == [0, size]
        got = store.get_message("g", "TopicTest", 0, count - 8, 32, max_total_bytes=16 << 20)
        assert [decode_record(b).body for b in got.buffers] == [body] * 8


async def test_a_next_file_that_cannot_be_made_ahead_is_created_by_the_writer(
    make_config: MakeConfig, caplog: pytest.LogCaptureFixture
) -> None:
    size = 4 << 20
    body = b"f" * (256 << 10)
    async with open_message_store(make_config(mapped_file_size_commit_log=size)) as store:
        files = store.commit_log.files
        tries = 0

        def out_of_descriptors() -> None:
            nonlocal tries
            tries += 1
            raise OSError(errno.EMFILE, "Too many open files")

        files.make_spare = out_of_descriptors  # type: ignore[method-assign]
        await store.put_message(message(body=body))
        with trio.fail_after(20):
            while not tries:
                await trio.sleep(0.01)
        for _ in range(40):  # 10 MiB: two file ends crossed with no spare
            put = await store.put_message(message(body=body))
            assert put.status is PutMessageStatus.PUT_OK
        assert store.running and len(files.files) == 3 and files.spare is None
        got = store.get_message("g", "TopicTest", 0, 40, 1, max_total_bytes=1 << 20)
        assert [decode_record(b).body for b in got.buffers] == [body]
    assert tries == 1  # and again only after SPARE_RETRY_AFTER
    [line] = [r.getMessage() for r in caplog.records if "ahead" in r.getMessage()]
    assert "could not make the next file ahead" in line and "Too many open files" in line


@pytest.mark.parametrize("idle_ahead", [40 << 20, 0], ids=["idle-prefault", "off"])
async def test_an_idle_store_faults_the_log_in_ahead_up_to_idle_prefault_bytes(
    make_config: MakeConfig, idle_ahead: int
) -> None:
    config = make_config(mapped_file_size_commit_log=64 << 20, idle_prefault_bytes=idle_ahead)
    async with open_message_store(config) as store:
        put = await store.put_message(MessageExtBrokerInner(topic="T", body=b"x" * 100))
        assert put.status is PutMessageStatus.PUT_OK
        last = store.commit_log.files.last_file()
        assert last is not None

        async def prefaulted(at_least: int) -> None:
            with trio.fail_after(20):
                while last.prefaulted_position < last.wrote_position + at_least:
                    await trio.sleep(0.01)

        await prefaulted(PREFAULT_AHEAD)  # the usual distance, idle or not
        if idle_ahead:
            await prefaulted(idle_ahead)  # then further, while nothing is appended
        else:
            await trio.sleep(0.5)  # five times the idle threshold: it stays where it was
            assert last.prefaulted_position <= last.wrote_position + PREFAULT_AHEAD + (1 << 20)
