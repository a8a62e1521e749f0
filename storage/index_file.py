"""Index files: RocketMQ's on-disk hash index from ``<topic>#<key>`` to commit-log offsets.

Layout of one file (sheet 6.2): a 40-byte header (begin/end store timestamp, begin/end
commit-log offset, used slot count, next entry number starting at 1), ``max_hash_slot_num``
4-byte slots each holding the number of the newest entry of its bucket, then
``max_index_num`` 20-byte entries ``(key hash, commit-log offset, seconds since the file's
begin timestamp, previous entry number in the bucket)``. The file is created sparse, so an
index that is mostly empty costs little disk.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import struct
import time
from collections.abc import Callable
from itertools import repeat
from operator import itemgetter
from pathlib import Path

from storage._hash import java_hash
from storage.mapped_file import _MADV_POPULATE_WRITE, _PAGE, _libc

log = logging.getLogger("boltmq.storage")

INDEX_HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20
_HEADER = struct.Struct(">qqqqii")
_SLOT = struct.Struct(">i")
_ENTRY = struct.Struct(">iqii")
_INT_MAX = 0x7FFFFFFF
_fdatasync = getattr(os, "fdatasync", os.fsync)


def index_file_size(max_hash_slot_num: int, max_index_num: int) -> int:
    """Bytes of an index file with these dimensions (420,000,040 by default)."""
    return INDEX_HEADER_SIZE + max_hash_slot_num * HASH_SLOT_SIZE + max_index_num * INDEX_ENTRY_SIZE


def key_hash(key: str) -> int:
    """The index's key hash: abs(String.hashCode), 0 for the one value with no abs."""
    h = java_hash(key)
    return 0 if h == -0x80000000 else abs(h)


def put_index_entries_py(
    buf: mmap.mmap | bytearray,
    keys: list[tuple[str, int]],
    start: int,
    slots: int,
    entries_start: int,
    number: int,
    limit: int,
    time_diff: int,
    slot_count: int,
    phy_offset: int,
) -> tuple[int, int, int, int]:
    """Write index entries for ``keys[start:]`` (full key, commit-log offset) into an index
    file's bytes until entry ``number`` reaches ``limit``: each entry chained to its slot's
    previous one, the slot pointed at it. Returns (position in ``keys`` after the last one
    added, next entry number, used slot count, last commit-log offset)."""
    unpack_slot = _SLOT.unpack_from
    pack_slot = _SLOT.pack_into
    heads = _SHIFTED_HEADS
    highs = _TAIL_HIGHS
    lows = _TAIL_LOWS
    stop = min(len(keys), start + max(limit - number, 0))
    # The entries that fit the buffer (an index file always has room for ``limit``).
    fit = min(stop, start + max((len(buf) - entries_start) // INDEX_ENTRY_SIZE - number, 0))
    if slots <= 0:
        raise ZeroDivisionError("an index file needs at least one hash slot")
    if fit <= start:
        if stop > start:
            raise ValueError(f"index entry {number} lies past the end of the file")
        return max(stop, start), number, slot_count, phy_offset
    first = number
    added = keys[start:fit]
    hashes: list[int] = []
    previouses: list[int] = []
    add_hash = hashes.append
    add_previous = previouses.append
    for key, _ in added:
        # The hash as sums of cached parts: the key's head (all but its last six characters)
        # already times 31**6, and the two halves of its tail (a producer's keys share all but
        # their last characters, and a half takes few values). Any part not cached: hashed
        # whole, and the parts cached when they can be.
        split = len(key) - 6
        try:
            khash = (
                heads[key[:split]] + highs[key[split : split + 3]] + lows[key[split + 3 :]]
            ) & 0xFFFFFFFF
        except KeyError:
            khash = _key_hash_caching_parts(key, split)
        else:
            if khash & 0x80000000:
                khash = 0 if khash == 0x80000000 else 0x100000000 - khash
        slot_pos = INDEX_HEADER_SIZE + (khash % slots) * HASH_SLOT_SIZE
        (previous,) = unpack_slot(buf, slot_pos)
        if previous <= 0 or previous > number:
            previous = 0
            slot_count += 1
        pack_slot(buf, slot_pos, number)
        add_hash(khash)
        add_previous(previous)
        number += 1
    # The entries are consecutive: packed and copied in at once.
    at = entries_start + first * INDEX_ENTRY_SIZE
    buf[at : at + len(added) * INDEX_ENTRY_SIZE] = b"".join(
        map(_ENTRY.pack, hashes, map(_SECOND, added), repeat(time_diff), previouses)
    )
    if fit < stop:
        raise ValueError(f"index entry {number} lies past the end of the file")
    return fit, number, slot_count, added[-1][1]


# Parts of an index key's hash (`put_index_entries_py`), mod 2**32: the head of a key (all
# but its last six characters) -> its hash times 31**6; the first and last three characters
# of its tail, when ASCII (three UTF-16 units) -> their hash times 31**3, and their hash.
_SHIFTED_HEADS: dict[str, int] = {}
_TAIL_HIGHS: dict[str, int] = {}
_TAIL_LOWS: dict[str, int] = {}
_PARTS_LIMIT = 4096
_SECOND = itemgetter(1)


def _key_hash_caching_parts(key: str, split: int) -> int:
    """`key_hash` of ``key``; the parts of its hash cached when it has a head of ten
    characters or more and an ASCII tail (then ``hash(key) = hash(head) * 31**6 +
    hash(tail)``, mod 2**32, and so on for the tail's halves)."""
    if split >= 10 and key[split:].isascii():
        for part, cache, weight in (
            (key[:split], _SHIFTED_HEADS, 887503681),
            (key[split : split + 3], _TAIL_HIGHS, 29791),
            (key[split + 3 :], _TAIL_LOWS, 1),
        ):
            if part not in cache:
                if len(cache) >= _PARTS_LIMIT:
                    cache.clear()
                cache[part] = (java_hash(part) * weight) & 0xFFFFFFFF
    return key_hash(key)


#: What `IndexFile.put_keys` runs: the compiled twin when ``./dev build-ext`` built it, else
#: `put_index_entries_py` (the same bytes; tests compare them).
put_index_entries = put_index_entries_py
try:  # an extension built before these functions lacks them: ImportError too
    from protocol._speedups import put_index_entries
except ImportError:
    pass


class IndexFile:
    """One index file, mapped whole."""

    def __init__(self, path: Path, max_hash_slot_num: int, max_index_num: int) -> None:
        self.path = path
        self.max_hash_slot_num = max_hash_slot_num
        self.max_index_num = max_index_num
        size = index_file_size(max_hash_slot_num, max_index_num)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            current = os.fstat(fd).st_size
            if current == 0:
                os.ftruncate(fd, size)  # sparse
            elif current != size:
                raise ValueError(f"index file {path} is {current} bytes, expected {size}")
            self._map = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._size = size
        anchor = ctypes.c_char.from_buffer(self._map)
        self._address = ctypes.addressof(anchor)
        del anchor  # releases the buffer export, so the map can still be closed
        # Bytes from the start of the file whose pages are faulted in (see `prefault`).
        self.prefaulted_position = 0
        header: tuple[int, int, int, int, int, int] = _HEADER.unpack_from(self._map, 0)
        self.begin_timestamp: int = header[0]
        self.end_timestamp: int = header[1]
        self.begin_phy_offset: int = header[2]
        self.end_phy_offset: int = header[3]
        self.hash_slot_count: int = header[4]
        self.index_count: int = header[5]
        if self.index_count <= 0:
            self.index_count = 1
        self._entries_start = INDEX_HEADER_SIZE + max_hash_slot_num * HASH_SLOT_SIZE

    @property
    def is_full(self) -> bool:
        """Whether every entry is used (a new file takes the next keys)."""
        return self.index_count >= self.max_index_num

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Add one key; False when the file is full."""
        return self.put_keys([(key, phy_offset)], 0, store_timestamp) == 1

    def put_keys(self, keys: list[tuple[str, int]], start: int, store_timestamp: int) -> int:
        """Add ``keys[start:]`` (key, commit-log offset) until the file is full; returns the
        position in ``keys`` after the last one added. The header is written once, at the end."""
        buf = self._map
        number = self.index_count
        i = start
        if number <= 1 and i < len(keys) and number < self.max_index_num:
            # The file's first entry sets its begin timestamp and offset.
            self.begin_timestamp = store_timestamp
            self.begin_phy_offset = keys[i][1]
        # Every key of the call has the same store time.
        time_diff = min(max((store_timestamp - self.begin_timestamp) // 1000, 0), _INT_MAX)
        i, number, slot_count, phy_offset = put_index_entries(
            buf, keys, start, self.max_hash_slot_num, self._entries_start, number,
            self.max_index_num, time_diff, self.hash_slot_count, self.end_phy_offset,
        )  # fmt: skip
        if i == start:
            return start
        self.hash_slot_count = slot_count
        self.index_count = number
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        _HEADER.pack_into(
            buf,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            slot_count,
            number,
        )
        return i

    def wants_prefault(self, ahead: int) -> bool:
        """Whether fewer than ``ahead // 2`` bytes past the next entry are faulted in."""
        next_entry = self._entries_start + self.index_count * INDEX_ENTRY_SIZE
        return self.prefaulted_position < min(next_entry + ahead // 2, self._size)

    def prefault(self, ahead: int) -> None:
        """Fault in the header, every hash slot and the entries up to ``ahead`` bytes past the
        next one (blocking; a worker thread).

        Keys land in random slots, so the first keys of a new file would each cost the writer
        a page fault on the trio thread (about 4,900 of them for the default 20 MB of slots).
        The call only populates page tables; it never changes data, so it may race with the
        writer safely.
        """
        next_entry = self._entries_start + self.index_count * INDEX_ENTRY_SIZE
        end = min(next_entry + ahead, self._size)
        start = self.prefaulted_position - self.prefaulted_position % _PAGE
        if _libc is not None and end > start and self._fd >= 0:
            _libc.madvise(self._address + start, end - start, _MADV_POPULATE_WRITE)
        self.prefaulted_position = max(self.prefaulted_position, end)

    def overlaps(self, begin: int, end: int) -> bool:
        """Whether the file's store-time range meets ``[begin, end]``."""
        return self.index_count > 1 and self.begin_timestamp <= end and self.end_timestamp >= begin

    def select_phy_offsets(self, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Commit-log offsets of entries for ``key`` stored within ``[begin, end]``, newest first.

        Hash collisions are possible: the caller checks the messages' keys.
        """
        found: list[int] = []
        khash = key_hash(key)
        (number,) = _SLOT.unpack_from(
            self._map, INDEX_HEADER_SIZE + (khash % self.max_hash_slot_num) * HASH_SLOT_SIZE
        )
        count = self.index_count
        if number <= 0 or number >= count:
            return found
        seen = 0
        while len(found) < max_num and seen < count:
            seen += 1
            entry_hash, phy, time_diff, previous = _ENTRY.unpack_from(
                self._map, self._entries_start + number * INDEX_ENTRY_SIZE
            )
            stored = self.begin_timestamp + time_diff * 1000
            if entry_hash == khash and begin <= stored <= end:
                found.append(phy)
            if previous <= 0 or previous >= count or previous == number or stored < begin:
                break
            number = previous
        return found

    def truncate_from(self, phy_offset: int) -> int:
        """Drop the entries pointing at or past commit-log ``phy_offset`` (the commit log was
        truncated there); returns how many went.

        Entries are numbered in commit-log order (keys are added as records are dispatched),
        so the dropped ones are the newest: each bucket whose head is one of them is pointed
        back along its chain to its newest entry that stays, and the header is rewritten, so
        the file is as if those keys had never been added (and stays so after a restart).
        """
        buf = self._map
        start = self._entries_start
        count = self.index_count
        keep = count
        while keep > 1:
            _, phy, _, _ = _ENTRY.unpack_from(buf, start + (keep - 1) * INDEX_ENTRY_SIZE)
            if phy < phy_offset:
                break
            keep -= 1
        if keep == count:
            return 0
        slots = self.max_hash_slot_num
        slot_count = self.hash_slot_count
        for number in range(count - 1, keep - 1, -1):
            pos = start + number * INDEX_ENTRY_SIZE
            khash = _ENTRY.unpack_from(buf, pos)[0]
            slot_pos = INDEX_HEADER_SIZE + (khash % slots) * HASH_SLOT_SIZE
            (head,) = _SLOT.unpack_from(buf, slot_pos)
            if head >= keep:
                while head >= keep:
                    previous = _ENTRY.unpack_from(buf, start + head * INDEX_ENTRY_SIZE)[3]
                    head = previous if 0 < previous < head else 0
                _SLOT.pack_into(buf, slot_pos, head)
                if head == 0:
                    slot_count -= 1
        buf[start + keep * INDEX_ENTRY_SIZE : start + count * INDEX_ENTRY_SIZE] = bytes(
            (count - keep) * INDEX_ENTRY_SIZE
        )
        if keep > 1:
            _, phy, time_diff, _ = _ENTRY.unpack_from(buf, start + (keep - 1) * INDEX_ENTRY_SIZE)
            self.end_phy_offset = phy
            self.end_timestamp = self.begin_timestamp + time_diff * 1000
        else:
            self.begin_timestamp = self.end_timestamp = 0
            self.begin_phy_offset = self.end_phy_offset = 0
        self.hash_slot_count = max(slot_count, 0)
        self.index_count = keep
        _HEADER.pack_into(
            buf, 0, self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
            self.end_phy_offset, self.hash_slot_count, keep,
        )  # fmt: skip
        return count - keep

    def flush(self) -> None:
        """Make the file durable (blocking; run in a worker thread)."""
        try:
            _fdatasync(self._fd)
        except OSError as exc:
            log.debug("flush of %s skipped: %s", self.path, exc)

    def close(self) -> None:
        """Unmap and close."""
        if self._fd >= 0:
            self._map.close()
            os.close(self._fd)
            self._fd = -1

    def destroy(self) -> None:
        """Close and delete the file."""
        self.close()
        self.path.unlink(missing_ok=True)


class IndexService:
    """The index files of a store: add keys of dispatched messages, query by key and time."""

    def __init__(
        self, directory: Path, max_hash_slot_num: int, max_index_num: int, clock: Callable[[], int]
    ) -> None:
        self.directory = directory
        self.max_hash_slot_num = max_hash_slot_num
        self.max_index_num = max_index_num
        self.clock = clock
        self.files: list[IndexFile] = []

    def load(self) -> None:
        """Map the existing index files, oldest first."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for path in sorted(self.directory.iterdir()):
            if path.name.isdigit():
                self.files.append(IndexFile(path, self.max_hash_slot_num, self.max_index_num))

    @property
    def end_phy_offset(self) -> int:
        """Commit-log offset of the last indexed message (-1 when nothing is indexed)."""
        for index in reversed(self.files):
            if index.index_count > 1:
                return index.end_phy_offset
        return -1

    @property
    def last_update_timestamp(self) -> int:
        """Store time of the newest indexed message (0 when none)."""
        return self.files[-1].end_timestamp if self.files else 0

    def build(self, topic: str, keys: list[str], phy_offset: int, store_timestamp: int) -> None:
        """Index ``<topic>#<key>`` for each key of one message."""
        self.build_many([(f"{topic}#{key}", phy_offset) for key in keys if key], store_timestamp)

    def build_many(self, keys: list[tuple[str, int]], store_timestamp: int) -> None:
        """Index full keys (``<topic>#<key>``, commit-log offset) of a group of messages."""
        done = 0
        index = self._writable()
        while True:
            added = index.put_keys(keys, done, store_timestamp)
            if added >= len(keys) or (added == done and index.index_count <= 1):
                return  # all added, or a file too small to take any
            done = added
            index = self._new_file()

    def query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Commit-log offsets of messages of ``topic`` with ``key`` stored in ``[begin, end]``."""
        found: list[int] = []
        full = f"{topic}#{key}"
        for index in reversed(self.files):
            if len(found) >= max_num:
                break
            if index.overlaps(begin, end):
                found.extend(index.select_phy_offsets(full, max_num - len(found), begin, end))
        return found

    def delete_expired(self, commit_log_min_offset: int) -> int:
        """Delete index files (never the last) whose entries all point below the min offset."""
        count = 0
        for index in self.files[:-1]:
            if index.end_phy_offset >= commit_log_min_offset:
                break
            index.destroy()
            count += 1
        self.files = self.files[count:]
        return count

    def truncate_from(self, phy_offset: int) -> list[IndexFile]:
        """Drop every index entry pointing at or past commit-log ``phy_offset`` (a
        truncation): newer files wholly past it are deleted, the one across it is cut
        (`IndexFile.truncate_from`). Returns the files changed, for the caller to flush."""
        changed: list[IndexFile] = []
        for index in reversed(list(self.files)):
            if index.index_count <= 1:
                continue  # empty: points nowhere
            if index.begin_phy_offset >= phy_offset:
                index.destroy()
                self.files.remove(index)
                continue
            if index.truncate_from(phy_offset):
                changed.append(index)
            break  # older files point below this one's first entry
        return changed

    def flush(self) -> None:
        """Make the newest file durable (blocking; run in a worker thread)."""
        if self.files:
            self.files[-1].flush()

    def close(self) -> None:
        """Unmap every file."""
        for index in self.files:
            index.close()

    def _writable(self) -> IndexFile:
        if self.files and not self.files[-1].is_full:
            return self.files[-1]
        return self._new_file()

    def _new_file(self) -> IndexFile:
        self.directory.mkdir(parents=True, exist_ok=True)
        now = self.clock()
        name = _time_name(now)
        while (self.directory / name).exists() or (self.files and name <= self.files[-1].path.name):
            now += 1
            name = _time_name(now)
        index = IndexFile(self.directory / name, self.max_hash_slot_num, self.max_index_num)
        self.files.append(index)
        return index


def _time_name(ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` in local time, as RocketMQ names index files."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms // 1000)) + f"{ms % 1000:03d}"
