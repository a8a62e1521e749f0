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
from array import array
from collections.abc import Callable
from itertools import chain, repeat
from operator import itemgetter, mod
from pathlib import Path
from typing import Any

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
    stop = min(len(keys), start + max(limit - number, 0))
    # The entries that fit the buffer (an index file always has room for ``limit``).
    fit = min(stop, start + max((len(buf) - entries_start) // INDEX_ENTRY_SIZE - number, 0))
    if slots <= 0:
        raise ZeroDivisionError("an index file needs at least one hash slot")
    if fit <= start:
        if stop > start:
            raise ValueError(f"index entry {number} lies past the end of the file")
        return max(stop, start), number, slot_count, phy_offset
    added = keys[start:fit]
    # A producer's keys, a column at a time where they allow it (`_put_columns`), in chunks
    # small enough that two keys seldom share a slot; what is left, key by key.
    for at in range(0, len(added), _CHUNK):
        chunk = added[at : at + _CHUNK]
        done = None
        if len(chunk) >= _MIN_RUN:
            done = _put_columns(buf, chunk, slots, entries_start, number, time_diff, slot_count)
        if done is not None:
            number, slot_count = done
            continue
        # Not one producer's run (or two keys in one slot): its runs, short ones key by key.
        runs = _runs(chunk)
        for run in runs:
            done = None
            if len(runs) > 1 and len(run) >= _MIN_RUN:
                done = _put_columns(buf, run, slots, entries_start, number, time_diff, slot_count)
            if done is None:
                done = _put_loop(buf, run, slots, entries_start, number, time_diff, slot_count)
            number, slot_count = done
    if fit < stop:
        raise ValueError(f"index entry {number} lies past the end of the file")
    return fit, number, slot_count, added[-1][1]


def _put_loop(
    buf: mmap.mmap | bytearray,
    added: list[tuple[str, int]],
    slots: int,
    entries_start: int,
    number: int,
    time_diff: int,
    slot_count: int,
) -> tuple[int, int]:
    """Entries ``number`` on for ``added``, a key at a time; (next number, used slots)."""
    unpack_slot = _SLOT.unpack_from
    pack_slot = _SLOT.pack_into
    heads = _SHIFTED_HEADS
    highs = _TAIL_HIGHS
    lows = _TAIL_LOWS
    first = number
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
    return number, slot_count


# The column writer's limits: it costs about 5 us a call more than the loop, which a run of
# fewer than _MIN_RUN keys does not win back (measured: 16 keys 1.17 against 1.01 us a key, 24
# even, 32 0.87 against 0.95, 128 0.60 against 0.89); in chunks of _CHUNK keys, two keys land
# in one slot seldom (the chunk then goes key by key).
_MIN_RUN = 24
_CHUNK = 256
# The column writer moves the index's big-endian ints as 4-byte words, whatever they read
# as natively (the bytes are what it copies; a struct reads the numbers it needs).
_COLUMNS_OK = array("I").itemsize == 4
# Per run length k: k 64-bit lanes each holding 1, each holding 0xFFFFFFFF, the struct that
# reads k lanes back; k 32-bit lanes holding 1, holding 0 .. k-1; the structs that pack k
# offsets and read k big-endian words.
_LANES: dict[int, tuple[Any, ...]] = {}
_TIME_WORD = struct.Struct(">I")
_HEADER_WORDS = INDEX_HEADER_SIZE // 4
# Per (run length, head length): the struct that reads each key's last six characters.
_TAILS: dict[tuple[int, int], Callable[[bytes], tuple[bytes, ...]]] = {}
# A tail character's weight in the hash, the first of the six first: 31**5 .. 31**0.
_TAIL_WEIGHTS = (28629151, 923521, 29791, 961, 31, 1)


def _runs(chunk: list[tuple[str, int]]) -> list[list[tuple[str, int]]]:
    """``chunk`` cut where a key's length or head (all but its last six characters) changes."""
    runs: list[list[tuple[str, int]]] = []
    begin, size, head = 0, -1, ""
    for at, (key, _) in enumerate(chunk):
        if len(key) != size or not key.startswith(head):
            if at:
                runs.append(chunk[begin:at])
            begin, size = at, len(key)
            head = key[: max(size - 6, 0)]
    runs.append(chunk[begin:])
    return runs


def _put_columns(
    buf: mmap.mmap | bytearray,
    run: list[tuple[str, int]],
    slots: int,
    entries_start: int,
    first: int,
    time_diff: int,
    slot_count: int,
) -> tuple[int, int] | None:
    """`_put_loop` of a run of ASCII keys of one length and one head, a column at a time,
    when no two of them share a slot; else None, having written nothing.

    Each key's hash is its head's (cached) plus its six tail characters times their weights,
    all keys at once as 64-bit lanes of one int (no carry crosses a lane: a lane's sum stays
    below 2**35); the slots are read and written as words of the buffer, and each column of
    the entries (hashes, offsets, the time, previous entries) is one strided copy."""
    count = len(run)
    key = run[0][0]
    size = len(key)
    split = size - 6
    keys = list(map(_FIRST, run))
    if count < 2 or split < 10 or not _COLUMNS_OK or len(set(map(len, keys))) != 1:
        return None
    joined = "".join(keys)
    if not joined.isascii():
        return None
    data = joined.encode("ascii")
    # One head: the keys are the first's head, each followed by its own six characters.
    tails = _TAILS.get((count, split))
    if tails is None:
        if len(_TAILS) >= 256:
            _TAILS.clear()
        tails = _TAILS[count, split] = struct.Struct(f"{split}x6s" * count).unpack
    first_head = data[:split]
    if first_head + first_head.join(tails(data)) != data:
        return None
    lanes = _LANES.get(count)
    if lanes is None:
        ones = int.from_bytes(b"\x01\x00\x00\x00\x00\x00\x00\x00" * count, "little")
        lanes = _LANES[count] = (
            ones,
            ones * 0xFFFFFFFF,
            struct.Struct(f"<{count}Q").unpack,
            int.from_bytes(b"\x01\x00\x00\x00" * count, "little"),
            sum(i << (32 * i) for i in range(count)),
            struct.Struct(f">{count}q").pack,
            struct.Struct(f">{count}I").unpack,
        )
    ones, low_words, read_lanes, ones32, counting, pack_offsets, read_words = lanes
    head = key[:split]
    shifted = _SHIFTED_HEADS.get(head)
    if shifted is None:
        if len(_SHIFTED_HEADS) >= _PARTS_LIMIT:
            _SHIFTED_HEADS.clear()
        shifted = _SHIFTED_HEADS[head] = (java_hash(head) * 887503681) & 0xFFFFFFFF
    total = shifted * ones
    lane = bytearray(8 * count)
    for place, weight in enumerate(_TAIL_WEIGHTS):
        lane[0::8] = data[split + place :: size]
        total += weight * int.from_bytes(lane, "little")
    total &= low_words
    # abs() of the hash as Java's int: a lane with bit 31 set becomes 2**32 minus itself.
    negative = (total >> 31) & ones
    total = (total ^ (negative * 0xFFFFFFFF)) + negative
    hashes = read_lanes(total.to_bytes(8 * count, "little"))
    if 0x80000000 in hashes:  # Java's abs(Integer.MIN_VALUE) stays negative: the index uses 0
        hashes = tuple(0 if h == 0x80000000 else h for h in hashes)
        total = int.from_bytes(struct.pack(f"<{count}Q", *hashes), "little")
    places = list(map(mod, hashes, repeat(slots)))
    if len(set(places)) != count:
        return None  # two keys chain in one bucket: key by key
    # Big-endian words, the last lane first: read backwards, every other one (a lane's low
    # half), they are the hashes in order; so the entry numbers, in 32-bit lanes.
    hash_words = array("I", total.to_bytes(8 * count, "big"))[::-2]
    number_words = array("I", (first * ones32 + counting).to_bytes(4 * count, "big"))[::-1]
    offset_words = array("I", pack_offsets(*map(_SECOND, run)))
    at = (entries_start + first * INDEX_ENTRY_SIZE) // 4
    end = at + count * (INDEX_ENTRY_SIZE // 4)
    with (
        memoryview(buf) as whole,
        whole[: len(whole) & ~3].cast("I") as words,
        words[_HEADER_WORDS : _HEADER_WORDS + slots] as slot_words,
    ):
        # One itemgetter reads every slot in C (half the time of a map of __getitem__).
        stored = array("I", itemgetter(*places)(slot_words))
        for place, word in zip(places, number_words, strict=True):
            slot_words[place] = word
        # A slot holds an earlier entry's number, or 0; anything else (left by a truncation,
        # or above 2**31: negative as Java reads it) starts the bucket again.
        previous = read_words(stored)
        if max(previous) >= first:
            for index, value in enumerate(previous):
                if value > first + index:
                    stored[index] = 0
        slot_count += stored.count(0)
        words[at:end:5] = hash_words
        words[at + 1 : end : 5] = offset_words[0::2]
        words[at + 2 : end : 5] = offset_words[1::2]
        words[at + 3 : end : 5] = array("I", _TIME_WORD.pack(time_diff) * count)
        words[at + 4 : end : 5] = stored
    return first + count, slot_count


# Parts of an index key's hash (`put_index_entries_py`), mod 2**32: the head of a key (all
# but its last six characters) -> its hash times 31**6; the first and last three characters
# of its tail, when ASCII (three UTF-16 units) -> their hash times 31**3, and their hash.
_SHIFTED_HEADS: dict[str, int] = {}
_TAIL_HIGHS: dict[str, int] = {}
_TAIL_LOWS: dict[str, int] = {}
_PARTS_LIMIT = 4096
_FIRST = itemgetter(0)
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

    def put_keys(
        self,
        keys: list[tuple[str, int]],
        start: int,
        store_timestamp: int,
        end_timestamp: int | None = None,
    ) -> int:
        """Add ``keys[start:]`` (key, commit-log offset) until the file is full; returns the
        position in ``keys`` after the last one added. The header is written once, at the end.

        Every key gets the entry time of ``store_timestamp``; ``end_timestamp`` (default: the
        same) is the header's last update, for keys of several store times in one second
        (`IndexService.build_segments`)."""
        buf = self._map
        number = self.index_count
        i = start
        if number <= 1 and i < len(keys) and number < self.max_index_num:
            # The file's first entry sets its begin timestamp and offset.
            self.begin_timestamp = store_timestamp
            self.begin_phy_offset = keys[i][1]
        time_diff = _seconds_between(store_timestamp, self.begin_timestamp)
        i, number, slot_count, phy_offset = put_index_entries(
            buf, keys, start, self.max_hash_slot_num, self._entries_start, number,
            self.max_index_num, time_diff, self.hash_slot_count, self.end_phy_offset,
        )  # fmt: skip
        if i == start:
            return start
        self.hash_slot_count = slot_count
        self.index_count = number
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp if end_timestamp is None else end_timestamp
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

    def build_segments(self, segments: list[tuple[list[tuple[str, int]], int]]) -> None:
        """`build_many` of each ``(keys, store timestamp)`` in order, leaving the same bytes,
        in fewer calls: consecutive segments whose entries get the same time (a second) and
        that fit the file go in as one call. A call costs the writer about as much as a few
        keys, and a group commit holds the keys of one millisecond."""
        segments = [segment for segment in segments if segment[0]]
        count = len(segments)
        at = 0
        while at < count:
            keys, first_ts = segments[at]
            index = self._writable()
            # The time the file's entries count from: set by this call's first key when the
            # file has none yet (`IndexFile.put_keys`).
            begin = index.begin_timestamp if index.index_count > 1 else first_ts
            room = index.max_index_num - index.index_count
            second = _seconds_between(first_ts, begin)
            end, total, last_ts = at + 1, len(keys), first_ts
            while end < count:
                more, timestamp = segments[end]
                if _seconds_between(timestamp, begin) != second or total + len(more) > room:
                    break
                total += len(more)
                last_ts = timestamp
                end += 1
            if end == at + 1:
                self.build_many(keys, first_ts)  # alone, or across into a new file
            else:
                run = list(chain.from_iterable(map(_FIRST, segments[at:end])))
                index.put_keys(run, 0, first_ts, last_ts)
            at = end

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


def _seconds_between(timestamp: int, begin: int) -> int:
    # An entry's time: whole seconds from its file's begin timestamp, as Java's int.
    return min(max((timestamp - begin) // 1000, 0), _INT_MAX)


def _time_name(ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` in local time, as RocketMQ names index files."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms // 1000)) + f"{ms % 1000:03d}"
