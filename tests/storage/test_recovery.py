"""Recovery: torn tails are truncated, corruption in the middle is reported with its offset,
consume queues and the index are rebuilt, and a SIGKILLed SYNC_FLUSH writer loses nothing
it acknowledged. Files are edited directly to build each case."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

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
    StoreCorruptionError,
    open_message_store,
)

MakeConfig = Callable[..., MessageStoreConfig]
REPO = Path(__file__).resolve().parents[2]


async def fill(config: MessageStoreConfig, count: int, size: int = 1000) -> list[PutMessageResult]:
    results = []
    async with open_message_store(config) as store:
        for i in range(count):
            results.append(
                await store.put_message(
                    MessageExtBrokerInner(
                        topic="TopicTest",
                        body=bytes([i % 251]) * size,
                        queue_id=i % 2,
                        properties={"KEYS": f"key-{i}"},
                    )
                )
            )
    return results


def commit_log_file(config: MessageStoreConfig, offset: int) -> tuple[Path, int]:
    size = config.mapped_file_size_commit_log
    return config.commit_log_dir / f"{offset - offset % size:020d}", offset % size


def patch_file(path: Path, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def flip_byte(path: Path, pos: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([byte ^ 0xFF]))


def all_bodies(store: FileMessageStore, queue_id: int) -> list[bytes]:
    bodies, offset = [], 0
    while True:
        got = store.get_message("g", "TopicTest", queue_id, offset, 32)
        if got.status is not GetMessageStatus.FOUND:
            return bodies
        bodies += [decode_record(b).body for b in got.buffers]
        offset = got.next_begin_offset


@pytest.mark.parametrize("abnormal", [False, True])
async def test_torn_tail_is_truncated_and_writing_resumes(
    make_config: MakeConfig, abnormal: bool, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config()
    results = await fill(config, 100)
    last = results[-1]
    path, pos = commit_log_file(config, last.wrote_offset)
    # Only the first half of the last record reached the disk.
    patch_file(path, pos + last.wrote_bytes // 2, bytes(last.wrote_bytes - last.wrote_bytes // 2))
    if abnormal:
        config.abort_path.touch()
    async with open_message_store(config) as store:
        assert store.recovered_abnormally is abnormal
        assert store.get_max_phy_offset() == last.wrote_offset
        assert store.get_max_offset_in_queue("TopicTest", 1) == 49  # the torn one was queue 1
        assert len(all_bodies(store, 1)) == 49
        again = await store.put_message(
            MessageExtBrokerInner(topic="TopicTest", body=b"new", queue_id=1)
        )
        assert (again.wrote_offset, again.queue_offset) == (last.wrote_offset, 49)
        assert all_bodies(store, 1)[-1] == b"new"
    assert any("torn tail" in r.getMessage() for r in caplog.records)


async def test_garbage_after_the_last_record_is_truncated(make_config: MakeConfig) -> None:
    config = make_config()
    results = await fill(config, 10)
    end = results[-1].wrote_offset + results[-1].wrote_bytes
    path, pos = commit_log_file(config, end)
    patch_file(path, pos, os.urandom(300))
    config.abort_path.touch()
    async with open_message_store(config) as store:
        assert store.get_max_phy_offset() == end
        assert store.get_max_offset_in_queue("TopicTest", 0) == 5


async def test_flipped_byte_in_the_tail_record_truncates_it(make_config: MakeConfig) -> None:
    config = make_config()
    results = await fill(config, 20)
    last = results[-1]
    path, pos = commit_log_file(config, last.wrote_offset)
    flip_byte(path, pos + last.wrote_bytes - 200)  # inside the body: CRC mismatch
    async with open_message_store(config) as store:
        assert store.get_max_phy_offset() == last.wrote_offset
        assert store.get_max_offset_in_queue("TopicTest", 1) == 9


@pytest.mark.parametrize("where", ["body", "magic", "size"])
async def test_flipped_byte_in_the_middle_is_reported_with_its_offset(
    make_config: MakeConfig, where: str
) -> None:
    config = make_config()
    results = await fill(config, 100)
    victim = results[30]
    path, pos = commit_log_file(config, victim.wrote_offset)
    flip_byte(path, pos + {"body": 300, "magic": 5, "size": 1}[where])
    config.abort_path.touch()  # abnormal: scans from the checkpoint, which predates it
    store = FileMessageStore(config)
    # Recovery scans the last three files; put the victim there by making it abnormal.
    with pytest.raises(StoreCorruptionError) as raised:
        store.open()
    assert raised.value.offset == victim.wrote_offset
    assert raised.value.path == path
    assert str(victim.wrote_offset) in str(raised.value)
    assert path.name in str(raised.value)
    # Nothing was truncated by the failed recovery; the lock was released.
    assert path.stat().st_size == config.mapped_file_size_commit_log
    with pytest.raises(StoreCorruptionError):
        FileMessageStore(config).open()


async def test_consume_queue_and_index_are_rebuilt_from_the_commit_log(
    make_config: MakeConfig,
) -> None:
    config = make_config()
    await fill(config, 60)
    # Lose the consume queues of queue 1 and all index files, then crash-restart.
    for path in (config.consume_queue_dir / "TopicTest" / "1").iterdir():
        path.unlink()
    for path in config.index_dir.iterdir():
        path.unlink()
    (config.checkpoint_path).unlink()
    config.abort_path.touch()
    async with open_message_store(config) as store:
        assert store.get_max_offset_in_queue("TopicTest", 1) == 30
        assert len(all_bodies(store, 1)) == 30
        found = store.query_message("TopicTest", "key-41", 4, 0, 2**62)
        assert [decode_record(b).body for b in found.buffers] == [bytes([41]) * 1000]
        result = await store.put_message(
            MessageExtBrokerInner(topic="TopicTest", body=b"x", queue_id=1)
        )
        assert result.queue_offset == 30


async def test_consume_queue_entries_past_the_commit_log_are_dropped(
    make_config: MakeConfig,
) -> None:
    config = make_config()
    results = await fill(config, 40)
    cut = results[30]
    path, pos = commit_log_file(config, cut.wrote_offset)
    # The commit log lost its last 10 records (never reached disk), the queues did not.
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(bytes(config.mapped_file_size_commit_log - pos))
    for later in config.commit_log_dir.iterdir():
        if later.name > path.name:
            later.unlink()
    config.abort_path.touch()
    async with open_message_store(config) as store:
        assert store.get_max_phy_offset() == cut.wrote_offset
        assert store.get_max_offset_in_queue("TopicTest", 0) == 15
        assert store.get_max_offset_in_queue("TopicTest", 1) == 15
        result = await store.put_message(
            MessageExtBrokerInner(topic="TopicTest", body=b"x", queue_id=0)
        )
        assert (result.queue_offset, result.wrote_offset) == (15, cut.wrote_offset)


CHILD = r"""
import sys
sys.path.insert(0, {repo!r})
import trio
from storage import FlushDiskType, MessageExtBrokerInner, MessageStoreConfig, open_message_store

async def main():
    config = MessageStoreConfig(
        store_path_root_dir={root!r}, mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue_entries=64, max_hash_slot_num=64, max_index_num=256,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
    )
    async with open_message_store(config) as store:
        async def writer(w):
            i = 0
            while True:
                key = f"w{{w}}-{{i}}"
                r = await store.put_message(MessageExtBrokerInner(
                    topic="Crash", body=key.encode() * 50, queue_id=w % 2,
                    properties={{"KEYS": key}}))
                assert r.status.value == "PUT_OK", r
                print(key, r.queue_offset, r.wrote_offset, flush=True)
                i += 1
        async with trio.open_nursery() as nursery:
            for w in range(4):
                nursery.start_soon(writer, w)

trio.run(main)
"""


async def test_sigkill_mid_stream_loses_no_acknowledged_message(make_config: MakeConfig) -> None:
    config = make_config(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    code = CHILD.format(repo=str(REPO), root=str(config.store_path_root_dir))
    process = await trio.lowlevel.open_process(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    acked: list[tuple[str, int, int]] = []
    buffer = b""
    assert process.stdout is not None
    try:
        with trio.fail_after(30):
            while len(acked) < 400:
                chunk = await process.stdout.receive_some(65536)
                if not chunk:
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    key, queue_offset, phys = line.decode().split()
                    acked.append((key, int(queue_offset), int(phys)))
    finally:
        process.send_signal(signal.SIGKILL)
        with trio.fail_after(10):
            await process.wait()
    assert process.returncode == -signal.SIGKILL
    assert len(acked) >= 400, process.stderr and await process.stderr.receive_some(65536)
    assert config.abort_path.exists()
    async with open_message_store(config) as store:
        assert store.recovered_abnormally
        for key, queue_offset, phys in acked:
            got = store.get_message("g", "Crash", int(key[1]) % 2, queue_offset, 1)
            assert got.status is GetMessageStatus.FOUND, key
            record = decode_record(got.buffers[0])
            assert record.properties["KEYS"] == key
            assert record.commit_log_offset == phys
            found = store.query_message("Crash", key, 4, 0, 2**62)
            assert [decode_record(b).body for b in found.buffers] == [key.encode() * 50]
        more = await store.put_message(
            MessageExtBrokerInner(topic="Crash", body=b"after", queue_id=0)
        )
        assert more.status is PutMessageStatus.PUT_OK
        assert more.queue_offset == store.get_max_offset_in_queue("Crash", 0) - 1
        got = store.get_message("g", "Crash", 0, more.queue_offset, 1)
        assert decode_record(got.buffers[0]).body == b"after"
