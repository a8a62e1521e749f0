"""Unit tests of the store files: mapped files, consume queue, index file, checkpoint, lock."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import (
    ConsumeQueue,
    IndexFile,
    IndexService,
    MappedFileQueue,
    StoreCheckpoint,
    StoreLock,
    StoreLockedError,
    index_file_size,
)
from storage._hash import java_hash, java_hash_uncached
from storage.index_file import key_hash
from storage.mapped_file import SPARE_NAME, MappedFile


def java_hash_reference(text: str) -> int:
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def test_java_hash_known_values() -> None:
    assert java_hash("*") == 42
    assert java_hash("TagA") == 2598919
    assert java_hash("") == 0


@given(st.text(max_size=60))
@settings(max_examples=200, deadline=None)
def test_java_hash_matches_the_reference(text: str) -> None:
    assert java_hash(text) == java_hash_reference(text)


@given(
    st.text(max_size=40),
    st.lists(st.text(max_size=12), min_size=1, max_size=8),
)
@settings(max_examples=200, deadline=None)
def test_java_hash_of_keys_sharing_a_head_matches_the_reference(
    head: str, tails: list[str]
) -> None:
    # Index keys share long heads ("<topic>#" plus a producer's UNIQ_KEY prefix): the cached
    # head hash must give the same value as hashing the whole key, every time.
    for tail in tails + tails:
        key = f"Topic#{head}{tail}"
        assert java_hash(key) == java_hash_reference(key) == java_hash_uncached(key)


def test_java_hash_of_unique_keys_matches_the_uncached_hash() -> None:
    # UNIQ_KEY shapes: host+pid+loader hex, then time and counter; the head cache is bounded.
    for producer in range(6):  # more heads than the cache holds: it is cleared on the way
        for n in range(0, 6000, 7):
            key = f"BenchTopic#7F000001{producer:04X}18B4AAC2{n * 977:08X}{n % 65536:04X}"
            assert java_hash(key) == java_hash_uncached(key)
    assert java_hash("TopicTest#polygenelubricants") == java_hash_reference(
        "TopicTest#polygenelubricants"
    )


def test_key_hash_is_never_negative() -> None:
    assert key_hash("polygenelubricants") == 0  # hashCode is Integer.MIN_VALUE
    assert java_hash("polygenelubricants") == -(2**31)
    assert key_hash("TagA") == 2598919


def test_mapped_file_queue_names_rolls_and_reloads(tmp_path: Path) -> None:
    queue = MappedFileQueue(tmp_path / "log", 4096)
    first = queue.writable_file()
    assert first.path.name == "00000000000000000000"
    first.append(b"a" * 4096)
    second = queue.writable_file()
    assert second.path.name == "00000000000000004096"
    second.append(b"b" * 100)
    assert queue.max_offset == 4196
    view = queue.find_file(4100)
    assert view is second
    assert bytes(second.slice(0, 3)) == b"bbb"
    queue.close()
    again = MappedFileQueue(tmp_path / "log", 4096)
    again.load()
    assert [m.file_from_offset for m in again.files] == [0, 4096]
    again.truncate_dirty(4100)
    assert again.max_offset == 4100
    assert bytes(again.files[1].slice(0, 8)) == b"bbbb\x00\x00\x00\x00"
    again.close()


def test_the_spare_file_becomes_the_next_file_and_is_never_part_of_the_log(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "log"
    queue = MappedFileQueue(directory, 4096)
    queue.writable_file().append(b"a" * 4096)
    spare = queue.make_spare()
    assert spare is not None and queue.spare is spare
    assert queue.make_spare() is None  # one at a time
    assert spare.path.name == SPARE_NAME
    spare.prefault(4096)  # faulted in ahead; taking it into use keeps the map
    second = queue.writable_file()
    assert second is spare and queue.spare is None
    assert second.path.name == "00000000000000004096" and second.file_from_offset == 4096
    assert sorted(p.name for p in directory.iterdir()) == [
        "00000000000000000000",
        "00000000000000004096",
    ]
    second.append(b"b" * 100)
    assert queue.max_offset == 4196
    assert queue.find_file(4100) is second
    assert (directory / "00000000000000004096").read_bytes()[:101] == b"b" * 100 + b"\0"

    assert queue.make_spare() is not None
    queue.close()  # a clean close deletes its spare
    assert not (directory / SPARE_NAME).exists()

    # A crash leaves the spare behind: loading deletes it and the log is what was written.
    (directory / SPARE_NAME).write_bytes(b"whatever it holds")
    again = MappedFileQueue(directory, 4096)
    again.load()
    assert [m.file_from_offset for m in again.files] == [0, 4096]
    assert again.max_offset == 8192  # until recovery finds the end
    assert not (directory / SPARE_NAME).exists()
    again.close()


def test_a_spare_that_cannot_be_renamed_is_replaced_by_a_new_file(tmp_path: Path) -> None:
    queue = MappedFileQueue(tmp_path / "log", 4096)
    queue.writable_file().append(b"a" * 4096)
    spare = queue.make_spare()
    assert spare is not None
    spare.path.unlink()  # the rename then fails (ENOENT)
    second = queue.writable_file()
    assert second is not spare and second.path.name == "00000000000000004096"
    second.append(b"b")
    assert queue.max_offset == 4097
    queue.close()


def test_mapped_file_is_sparse(tmp_path: Path) -> None:
    queue = MappedFileQueue(tmp_path / "log", 64 * 1024 * 1024)
    mapped = queue.writable_file()
    mapped.append(b"x" * 10)
    mapped.flush()
    assert os.stat(mapped.path).st_blocks * 512 < 1024 * 1024
    queue.close()


def test_appends_through_the_file_are_seen_in_the_map_and_on_disk(tmp_path: Path) -> None:
    mapped = MappedFile(tmp_path / "00000000000000000000", 64 * 1024)
    try:
        first = b"a" * 5000
        assert mapped.append(first) == 0
        assert mapped.append_through_file(memoryview(b"b" * 70000)[:9000]) == 5000
        assert mapped.append(b"c") == 14000
        assert bytes(mapped.view[:14001]) == first + b"b" * 9000 + b"c"
        with pytest.raises(ValueError, match="overflows"):
            mapped.append_through_file(b"x" * (64 * 1024))
        assert mapped.wrote_position == 14001
        mapped.flush()
        assert (tmp_path / "00000000000000000000").read_bytes()[:14001] == bytes(
            mapped.view[:14001]
        )
    finally:
        mapped.close()


def _mapping_pages_kib(address: int) -> dict[str, int]:
    """/proc/self/smaps's sizes (KiB) for the mapping holding ``address``."""
    sizes: dict[str, int] = {}
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if "-" in head[0] and not head[0].endswith(":"):
            low, high = (int(x, 16) for x in head[0].split("-"))
            inside = low <= address < high
        elif inside and len(head) >= 2 and head[1].isdigit():
            sizes[head[0].rstrip(":")] = int(head[1])
    return sizes


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_POPULATE_* are Linux's")
def test_prefault_reads_pages_in_without_dirtying_them(tmp_path: Path) -> None:
    # Dirty pages would be written by the next flush (their zeros, ahead of the writer).
    mapped = MappedFile(tmp_path / "00000000000000000000", 8 * 1024 * 1024)
    try:
        mapped.append(b"a" * 100)
        mapped.prefault(4 * 1024 * 1024)
        assert mapped.prefaulted_position == 4 * 1024 * 1024
        pages = _mapping_pages_kib(mapped._address)
        assert pages["Rss"] >= 4 * 1024 - 4  # faulted in: the writer's touch is cheap
        assert pages["Private_Dirty"] + pages["Shared_Dirty"] <= 4  # the page written only
        assert bytes(mapped.view[:101]) == b"a" * 100 + b"\0"
    finally:
        mapped.close()


def test_consume_queue_put_get_reload_and_truncate(tmp_path: Path) -> None:
    queue = ConsumeQueue(tmp_path, "TopicTest", 3, entries_per_file=4)
    for i in range(10):
        assert queue.put(i, 1000 + i * 100, 100, i)
    assert not queue.put(5, 1500, 100, 5)  # replay of an existing entry is skipped
    assert queue.max_offset == 10
    assert queue.get(7) == (1700, 100, 7)
    assert sorted(p.name for p in (tmp_path / "TopicTest" / "3").iterdir()) == [
        "00000000000000000000",
        "00000000000000000080",
        "00000000000000000160",
    ]
    queue.close()
    reloaded = ConsumeQueue(tmp_path, "TopicTest", 3, entries_per_file=4)
    reloaded.load()
    reloaded.recover()
    assert reloaded.max_offset == 10
    assert reloaded.max_physic_offset == 1000 + 9 * 100 + 100
    reloaded.truncate_dirty(1650)  # entries for messages past 1650 go
    assert reloaded.max_offset == 6
    assert reloaded.get(6) is None
    reloaded.correct_min_offset(1250)
    assert reloaded.min_offset == 3
    reloaded.close()


def test_consume_queue_starting_past_zero_blank_fills_the_front(tmp_path: Path) -> None:
    queue = ConsumeQueue(tmp_path, "T", 0, entries_per_file=4)
    queue.put(6, 500, 50, 0)
    assert queue.min_offset == 6
    assert queue.max_offset == 7
    assert queue.get(5) is None
    assert queue.get(6) == (500, 50, 0)
    queue.close()


def test_consume_queue_offset_by_time_nearest_neighbour(tmp_path: Path) -> None:
    queue = ConsumeQueue(tmp_path, "T", 0, entries_per_file=8)
    times = {100 * i: 1000 + 10 * i for i in range(20)}  # phys -> store time
    for i in range(20):
        queue.put(i, 100 * i, 100, 0)

    def store_time_of(phys: int, size: int) -> int | None:
        return times[phys]

    assert queue.offset_by_time(1050, store_time_of) == 5  # exact
    assert queue.offset_by_time(1052, store_time_of) == 5  # nearer to 1050
    assert queue.offset_by_time(1058, store_time_of) == 6  # nearer to 1060
    assert queue.offset_by_time(0, store_time_of) == 0
    assert queue.offset_by_time(99999, store_time_of) == 19
    queue.close()


def test_index_file_is_sparse_and_has_the_rocketmq_size(tmp_path: Path) -> None:
    assert index_file_size(5_000_000, 20_000_000) == 420_000_040
    index = IndexFile(tmp_path / "20240101000000000", 5_000_000, 20_000_000)
    assert os.stat(index.path).st_size == 420_000_040
    assert index.put_key("T#k", 123, 1_000_000)
    index.flush()
    assert os.stat(index.path).st_blocks * 512 < 1024 * 1024
    assert index.select_phy_offsets("T#k", 10, 0, 2_000_000) == [123]
    index.close()


def test_index_file_prefault_covers_the_slots_and_keeps_the_data(tmp_path: Path) -> None:
    index = IndexFile(tmp_path / "20240101000000000", 50_000, 200_000)
    keys = [(f"T#{i:032X}", 1000 * i) for i in range(500)]
    assert index.put_keys(keys, 0, 1_000_000) == 500
    assert index.wants_prefault(4096)
    index.prefault(4096)
    slots_end = 40 + 50_000 * 4
    assert index.prefaulted_position >= slots_end + 501 * 20 + 4096
    assert not index.wants_prefault(4096)
    # Populating pages changed nothing: every key is found and more keys go on as before.
    assert index.put_keys([(f"T#{i:032X}", 1000 * i) for i in range(500, 600)], 0, 1_000_000)
    for i in (0, 250, 599):
        assert index.select_phy_offsets(f"T#{i:032X}", 4, 0, 2_000_000) == [1000 * i]
    assert index.index_count == 601
    index.close()


def test_index_file_chains_time_range_and_full(tmp_path: Path) -> None:
    index = IndexFile(tmp_path / "20240101000000000", 4, 6)
    base = 1_700_000_000_000
    for i in range(5):  # 5 entries fit: entry 0 is unused
        assert index.put_key("T#same", 100 * i, base + i * 10_000)
    assert index.is_full
    assert not index.put_key("T#other", 999, base)
    assert index.select_phy_offsets("T#same", 10, base, base + 50_000) == [400, 300, 200, 100, 0]
    assert index.select_phy_offsets("T#same", 2, base, base + 50_000) == [400, 300]
    assert index.select_phy_offsets("T#same", 10, base + 15_000, base + 35_000) == [300, 200]
    assert index.select_phy_offsets("T#none", 10, base, base + 50_000) == []
    index.close()
    # The header survives a reload.
    reloaded = IndexFile(tmp_path / "20240101000000000", 4, 6)
    assert (reloaded.index_count, reloaded.end_phy_offset) == (6, 400)
    assert reloaded.begin_timestamp == base
    reloaded.close()


def test_index_service_rolls_to_new_files_and_queries_across(tmp_path: Path) -> None:
    now = [1_700_000_000_000]
    service = IndexService(tmp_path / "index", 8, 4, lambda: now[0])
    for i in range(10):
        now[0] += 1
        service.build("T", [f"k{i % 2}"], 1000 + i, now[0])
    assert len(service.files) == 4  # 3 keys per file
    assert service.query("T", "k1", 100, 0, 2**62) == [1009, 1007, 1005, 1003, 1001]
    assert service.query("T", "k1", 2, 0, 2**62) == [1009, 1007]
    assert service.delete_expired(1004) == 1
    assert service.query("T", "k1", 100, 0, 2**62) == [1009, 1007, 1005, 1003]
    service.close()


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    checkpoint = StoreCheckpoint(path)
    assert checkpoint.physic_msg_timestamp == 0
    checkpoint.physic_msg_timestamp = 10_000
    checkpoint.logics_msg_timestamp = 9_000
    checkpoint.index_msg_timestamp = 8_000
    checkpoint.flush()
    assert path.stat().st_size == 4096
    again = StoreCheckpoint(path)
    assert (again.physic_msg_timestamp, again.logics_msg_timestamp) == (10_000, 9_000)
    assert again.min_timestamp() == 6_000
    assert again.min_timestamp(message_index_safe=True) == 5_000


def test_lock_refuses_a_second_holder(tmp_path: Path) -> None:
    first = StoreLock(tmp_path / "lock")
    first.acquire()
    second = StoreLock(tmp_path / "lock")
    with pytest.raises(StoreLockedError, match="in use"):
        second.acquire()
    first.release()
    second.acquire()
    second.release()


def test_deleting_a_file_a_reader_still_holds_defers_the_unmap(tmp_path: Path) -> None:
    queue = MappedFileQueue(tmp_path / "log", 4096)
    first = queue.writable_file()
    first.append(b"a" * 4096)
    queue.writable_file().append(b"b")
    held = first.slice(0, 10)
    queue.delete_first(1)
    assert not first.path.exists()
    assert bytes(held) == b"a" * 10  # the reader's slice stays valid
    assert len(queue._closing) == 1
    held.release()
    queue.retry_close()
    assert queue._closing == []
    queue.close()
