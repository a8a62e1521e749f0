"""Consume-queue files (small writes) are mapped with libc's mmap and hold no descriptor: the
bytes written through the map reach the file (msync, and a new map of it), opening many of
them does not use up descriptors, and a view taken before `close` stays readable until it is
dropped, after which the memory is unmapped."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from storage.mapped_file import MappedFile, MappedFileQueue, _libc

pytestmark = pytest.mark.skipif(_libc is None, reason="libc is not loadable here")

SIZE = 64 * 20


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def _mapped(path: Path) -> bool:
    """Whether this process maps ``path`` (from /proc/self/maps)."""
    return any(line.endswith(str(path)) for line in _maps())


def test_bytes_written_through_the_map_are_on_disk_after_flush_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000"
    mapped = MappedFile(path, SIZE, small_writes=True)
    assert mapped.append(b"A" * 20) == 0
    assert mapped.append(bytearray(b"B" * 20)) == 20
    mapped.view[40:60] = b"C" * 20
    mapped.wrote_position = 60
    assert mapped.flush() == 60
    # Read through the file, not the map.
    with open(path, "rb") as file:
        assert file.read(60) == b"A" * 20 + b"B" * 20 + b"C" * 20
    assert mapped.find(b"BC", 0) == 39
    assert mapped.find(b"CA", 0) == -1
    assert mapped.close()
    assert mapped.close()  # closing twice is harmless
    again = MappedFile(path, SIZE, small_writes=True)
    assert bytes(again.slice(0, 60)) == b"A" * 20 + b"B" * 20 + b"C" * 20
    assert bytes(again.slice(60, 20)) == bytes(20)
    again.truncate_to(20)
    assert bytes(again.slice(0, 60)) == b"A" * 20 + bytes(40)
    assert again.close()
    assert path.read_bytes()[:60] == b"A" * 20 + bytes(40)


def test_queue_files_hold_no_descriptor(tmp_path: Path) -> None:
    before = _open_descriptors()
    queues = []
    for n in range(300):
        queue = MappedFileQueue(tmp_path / str(n), SIZE, small_writes=True)
        queue.create_file(0).append(b"x" * 20)
        queues.append(queue)
    assert _open_descriptors() - before <= 5
    for queue in queues:
        assert queue.files[0].flush() == 20
        queue.close()
    gc.collect()
    assert not _mapped(tmp_path / "0" / "00000000000000000000")


def test_a_view_outlives_close_and_the_map_goes_with_the_last_view(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000"
    mapped = MappedFile(path, SIZE, small_writes=True)
    mapped.append(b"entry-%014d" % 7)
    held = mapped.slice(0, 20)
    part = held[6:]
    assert mapped.close()  # never refused: the readers' views keep the memory mapped
    with pytest.raises(ValueError):
        mapped.slice(0, 20)  # the closed file itself is no longer readable
    gc.collect()
    assert _mapped(path)
    assert bytes(held) == b"entry-%014d" % 7
    del held
    gc.collect()
    assert _mapped(path)
    assert bytes(part) == b"%014d" % 7
    del part
    gc.collect()
    assert not _mapped(path)


def test_a_deleted_file_read_by_a_reader_is_unmapped_once_it_lets_go(tmp_path: Path) -> None:
    queue = MappedFileQueue(tmp_path, SIZE, small_writes=True)
    first = queue.create_file(0)
    first.append(b"y" * SIZE)
    queue.create_file(SIZE).append(b"z" * 20)
    held = first.slice(SIZE - 20, 20)
    gone = queue.delete_first(1)
    assert [m.file_from_offset for m in gone] == [0]
    assert not (tmp_path / "00000000000000000000").exists()
    assert bytes(held) == b"y" * 20  # still mapped though deleted
    del held
    gc.collect()
    assert not any(str(tmp_path / "00000000000000000000") in line for line in _maps())
    queue.close()


def _maps() -> list[str]:
    return Path("/proc/self/maps").read_text().splitlines()


def test_without_libc_python_mmap_is_the_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where libc cannot be loaded the module has no `_libc`: the file keeps Python's map and
    # its descriptor, and writes, flushes (fdatasync) and reloads the same way.
    import storage.mapped_file as mapped_file

    monkeypatch.setattr(mapped_file, "_libc", None)
    path = tmp_path / "00000000000000000000"
    before = _open_descriptors()
    mapped = MappedFile(path, SIZE, small_writes=True)
    assert _open_descriptors() - before >= 1
    mapped.append(b"F" * 20)
    assert mapped.flush() == 20
    assert mapped.find(b"F", 5) == 5
    held = mapped.slice(0, 20)
    assert not mapped.close()  # Python's map refuses while a view is held
    del held
    assert mapped.close()
    assert path.read_bytes()[:20] == b"F" * 20
