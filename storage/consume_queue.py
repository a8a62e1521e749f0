"""Consume queues: per topic and queue id, a log of 20-byte entries pointing into the commit log.

Entry n (the message with queue offset n) is ``(commit-log offset: long, size: int,
tagsCode: long)`` at byte n*20 of ``consumequeue/<topic>/<queueId>/``, whose files hold
``mapped_file_size_consume_queue_entries`` entries each and are named by their start byte
offset. The dispatcher appends entries as it follows the commit log.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from pathlib import Path

from storage.mapped_file import MappedFile, MappedFileQueue, offset_to_file_name

log = logging.getLogger("boltmq.storage")

CQ_STORE_UNIT_SIZE = 20
ENTRY = struct.Struct(">qiq")
_BLANK_ENTRY = ENTRY.pack(0, 0x7FFFFFFF, 0)


class ConsumeQueue:
    """One topic queue's consume queue."""

    def __init__(self, root: Path, topic: str, queue_id: int, entries_per_file: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.directory = root / topic / str(queue_id)
        self.file_size = entries_per_file * CQ_STORE_UNIT_SIZE
        self.files = MappedFileQueue(self.directory, self.file_size, small_writes=True)
        # Files opened by `open_files_for` before the entries that need them are written.
        self._opened_ahead: dict[int, MappedFile] = {}
        # Byte offset of the first entry still pointing at live commit-log data.
        self.min_logic_offset = 0
        # Commit-log offset just past the last entry's message.
        self.max_physic_offset = 0

    # -- loading and recovery --------------------------------------------------------------

    def load(self) -> None:
        """Map the files on disk (positions are set by `recover`)."""
        self.files.load()

    def recover(self) -> None:
        """Find the last valid entry, scanning from the third-last file."""
        files = self.files.files
        if not files:
            return
        start = max(0, len(files) - 3)
        end_offset = files[start].file_from_offset
        for mapped in files[start:]:
            view = mapped.view
            pos = 0
            complete = True
            while pos < self.file_size:
                offset, size, _ = ENTRY.unpack_from(view, pos)
                if offset >= 0 and size > 0:
                    pos += CQ_STORE_UNIT_SIZE
                    end_offset = mapped.file_from_offset + pos
                    if size != 0x7FFFFFFF:
                        self.max_physic_offset = offset + size
                else:
                    complete = False
                    break
            if not complete:
                break
        self.files.truncate_dirty(end_offset)
        for mapped in self.files.files:
            mapped.flushed_position = mapped.wrote_position

    def truncate_dirty(self, physic_max: int) -> bool:
        """Drop the entries whose messages reach past the commit log's end ``physic_max``;
        True when some went."""
        keep = self.max_offset_bytes
        while keep > self.min_offset_bytes:
            offset, size, _ = self._entry_at(keep - CQ_STORE_UNIT_SIZE)
            if size == 0x7FFFFFFF or offset + size <= physic_max:
                break
            keep -= CQ_STORE_UNIT_SIZE
        if keep != self.max_offset_bytes:
            log.info(
                "consume queue %s/%d truncated to %d entries (commit log ends at %d)",
                self.topic,
                self.queue_id,
                keep // CQ_STORE_UNIT_SIZE,
                physic_max,
            )
            self.files.truncate_dirty(keep)
            if self.files.files and self.files.files[-1].wrote_position == 0 and keep == 0:
                self.files.destroy_all()
            self.max_physic_offset = 0
            if keep > self.min_offset_bytes:
                offset, size, _ = self._entry_at(keep - CQ_STORE_UNIT_SIZE)
                self.max_physic_offset = offset + size
            return True
        return False

    # -- writing ---------------------------------------------------------------------------

    def put(self, queue_offset: int, physic_offset: int, size: int, tags_code: int) -> bool:
        """Write the entry for ``queue_offset``; False when it was already there (replay)."""
        expected = queue_offset * CQ_STORE_UNIT_SIZE
        files = self.files.files
        if files:
            # Fast path: the next entry of a file with room.
            last = files[-1]
            pos = last.wrote_position
            if expected == last.file_from_offset + pos and pos < last.file_size:
                ENTRY.pack_into(last.view, pos, physic_offset, size, tags_code)
                last.wrote_position = pos + CQ_STORE_UNIT_SIZE
                self.max_physic_offset = physic_offset + size
                return True
        current = self.max_offset_bytes
        if expected < current:
            return False
        if not self.files.files:
            # A queue whose first entry is not offset 0: blank-fill the front of its file.
            first = self._new_file(expected - expected % self.file_size)
            self.min_logic_offset = expected
            self._fill_blanks(first, expected - first.file_from_offset)
        elif expected > current:
            log.warning(
                "consume queue %s/%d: gap from entry %d to %d filled with blanks",
                self.topic,
                self.queue_id,
                current // CQ_STORE_UNIT_SIZE,
                queue_offset,
            )
            while self.max_offset_bytes < expected:
                mapped = self._writable_file()
                n = min(expected - self.max_offset_bytes, mapped.remaining)
                self._fill_blanks(mapped, mapped.wrote_position + n)
        mapped = self._writable_file()
        mapped.append(ENTRY.pack(physic_offset, size, tags_code))
        self.max_physic_offset = physic_offset + size
        return True

    def put_entries(self, queue_offset: int, entries: bytes | bytearray) -> None:
        """Write consecutive packed entries starting at ``queue_offset`` (a group commit's).

        One copy into the map when they continue the last file and fit in it; otherwise
        (new file, file end, replay, gap) entry by entry through `put`.
        """
        n = len(entries)
        files = self.files.files
        if files:
            last = files[-1]
            pos = last.wrote_position
            if (
                queue_offset * CQ_STORE_UNIT_SIZE == last.file_from_offset + pos
                and pos + n <= last.file_size
            ):
                last.view[pos : pos + n] = entries
                last.wrote_position = pos + n
                offset, size, _ = ENTRY.unpack_from(entries, n - CQ_STORE_UNIT_SIZE)
                self.max_physic_offset = offset + size
                return
        for i, (offset, size, tags) in enumerate(ENTRY.iter_unpack(entries)):
            self.put(queue_offset + i, offset, size, tags)

    def open_files_for(self, queue_offset: int, count: int) -> bool:
        """Open now every file the entries ``queue_offset`` .. ``+ count`` will be written to
        and that is not open yet, so that a file which cannot be opened (EMFILE: opening takes a
        descriptor) refuses the put before its record is appended; raises that OSError.
        True when it opened one."""
        start = queue_offset * CQ_STORE_UNIT_SIZE
        end = start + count * CQ_STORE_UNIT_SIZE
        files = self.files.files
        if files:
            if end <= files[-1].file_from_offset + self.file_size:
                return False
            # Files at or below the last one are open (or deleted: written below them).
            start = max(start, files[-1].file_from_offset + self.file_size)
        opened = False
        for file_start in range(start - start % self.file_size, end, self.file_size):
            if file_start not in self._opened_ahead:
                self.directory.mkdir(parents=True, exist_ok=True)
                path = self.directory / offset_to_file_name(file_start)
                self._opened_ahead[file_start] = MappedFile(path, self.file_size, True)
                opened = True
        return opened

    def _new_file(self, start_offset: int) -> MappedFile:
        """Append the file starting at ``start_offset``: the one opened ahead, else a new one."""
        mapped = self._opened_ahead.pop(start_offset, None)
        if mapped is None:
            return self.files.create_file(start_offset)
        self.files.files.append(mapped)
        return mapped

    def _writable_file(self) -> MappedFile:
        """The last file if it has room, else the next one (`_new_file`)."""
        last = self.files.last_file()
        if last is None:
            return self._new_file(0)
        if last.is_full:
            return self._new_file(last.file_from_offset + self.file_size)
        return last

    @staticmethod
    def _fill_blanks(mapped: MappedFile, until: int) -> None:
        count = (until - mapped.wrote_position) // CQ_STORE_UNIT_SIZE
        if count > 0:
            mapped.append(_BLANK_ENTRY * count)

    def flush(self) -> None:
        """Make the written entries durable (blocking; run in a worker thread)."""
        for mapped in self.files.files:
            if mapped.wrote_position > mapped.flushed_position:
                mapped.flush()

    # -- reading ---------------------------------------------------------------------------

    @property
    def min_offset_bytes(self) -> int:
        """Byte offset of the first live entry."""
        return max(self.min_logic_offset, self.files.min_offset)

    @property
    def max_offset_bytes(self) -> int:
        """Byte offset just past the last entry."""
        return self.files.max_offset

    @property
    def min_offset(self) -> int:
        """Queue offset of the first live entry."""
        return self.min_offset_bytes // CQ_STORE_UNIT_SIZE

    @property
    def max_offset(self) -> int:
        """Number of entries ever written (the next queue offset)."""
        return self.files.max_offset // CQ_STORE_UNIT_SIZE

    def get(self, queue_offset: int) -> tuple[int, int, int] | None:
        """The entry ``(physic offset, size, tags code)`` at ``queue_offset``, if present."""
        pos = queue_offset * CQ_STORE_UNIT_SIZE
        if not self.min_offset_bytes <= pos < self.max_offset_bytes:
            return None
        return self._entry_at(pos)

    def _entry_at(self, pos: int) -> tuple[int, int, int]:
        mapped = self.files.find_file(pos)
        assert mapped is not None
        offset, size, tags = ENTRY.unpack_from(mapped.view, pos - mapped.file_from_offset)
        return offset, size, tags

    def entries_from(self, queue_offset: int, max_bytes: int) -> memoryview | None:
        """Up to ``max_bytes`` of entries from ``queue_offset`` within one file (zero-copy)."""
        pos = queue_offset * CQ_STORE_UNIT_SIZE
        mapped = self.files.find_file(pos)
        if mapped is None:
            return None
        start = pos - mapped.file_from_offset
        end = min(mapped.wrote_position, start + max_bytes - max_bytes % CQ_STORE_UNIT_SIZE)
        if end <= start:
            return None
        return mapped.slice(start, end - start)

    def offset_by_time(
        self, timestamp: int, store_time_of: Callable[[int, int], int | None]
    ) -> int:
        """Queue offset whose store time equals ``timestamp``, else the nearer neighbour.

        Binary search over the live entries; ``store_time_of(physic offset, size)`` reads a
        message's store time from the commit log (None when it is gone).
        """
        return search_offset_by_time(
            self.min_offset,
            self.max_offset - 1,
            timestamp,
            lambda queue_offset: store_time_of(*self._phys(queue_offset)),
        )

    def _phys(self, queue_offset: int) -> tuple[int, int]:
        offset, size, _ = self._entry_at(queue_offset * CQ_STORE_UNIT_SIZE)
        return offset, size

    # -- retention -------------------------------------------------------------------------

    def delete_expired(self, commit_log_min_offset: int) -> int:
        """Delete files whose entries all point below the commit log's min offset."""
        count = 0
        files = self.files.files
        for mapped in files[:-1]:
            offset, _, _ = ENTRY.unpack_from(mapped.view, self.file_size - CQ_STORE_UNIT_SIZE)
            if offset >= commit_log_min_offset:
                break
            count += 1
        if count:
            self.files.delete_first(count)
        self.correct_min_offset(commit_log_min_offset)
        return count

    def correct_min_offset(self, commit_log_min_offset: int) -> None:
        """Move the min offset to the first entry pointing at live commit-log data."""
        # Entries point at increasing commit-log offsets (front blanks count as below), so
        # the first live entry is found by binary search.
        low = self.min_offset_bytes // CQ_STORE_UNIT_SIZE
        high = self.max_offset_bytes // CQ_STORE_UNIT_SIZE
        while low < high:
            mid = (low + high) // 2
            offset, size, _ = self._entry_at(mid * CQ_STORE_UNIT_SIZE)
            if size != 0x7FFFFFFF and offset >= commit_log_min_offset:
                high = mid
            else:
                low = mid + 1
        self.min_logic_offset = low * CQ_STORE_UNIT_SIZE

    def close(self) -> None:
        """Unmap the files."""
        self.files.close()
        for mapped in self._opened_ahead.values():
            mapped.close()
        self._opened_ahead.clear()


class ConsumeQueueStore:
    """Every consume queue of a store, by (topic, queue id)."""

    def __init__(self, root: Path, entries_per_file: int) -> None:
        self.root = root
        self.entries_per_file = entries_per_file
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}

    def load(self) -> None:
        """Map every ``consumequeue/<topic>/<queueId>/`` found on disk."""
        self.root.mkdir(parents=True, exist_ok=True)
        for topic_dir in sorted(self.root.iterdir()):
            if not topic_dir.is_dir():
                continue
            for queue_dir in sorted(topic_dir.iterdir()):
                if queue_dir.is_dir() and queue_dir.name.isdigit():
                    queue = ConsumeQueue(
                        self.root, topic_dir.name, int(queue_dir.name), self.entries_per_file
                    )
                    queue.load()
                    self.queues[(topic_dir.name, int(queue_dir.name))] = queue

    def recover(self) -> None:
        """Find each queue's last valid entry."""
        for queue in self.queues.values():
            queue.recover()

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue, if it exists."""
        return self.queues.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue, created (empty, no file yet) when missing."""
        queue = self.queues.get((topic, queue_id))
        if queue is None:
            queue = ConsumeQueue(self.root, topic, queue_id, self.entries_per_file)
            self.queues[(topic, queue_id)] = queue
        return queue

    def open_files_for(self, topic: str, queue_id: int, queue_offset: int, count: int) -> bool:
        """`ConsumeQueue.open_files_for` of the queue (created when missing)."""
        return self.find_or_create(topic, queue_id).open_files_for(queue_offset, count)

    def max_physic_offset(self) -> int:
        """The commit-log offset just past the newest message any queue points at."""
        return max((q.max_physic_offset for q in self.queues.values()), default=0)

    def truncate_dirty(self, physic_max: int) -> list[ConsumeQueue]:
        """Drop entries pointing past the commit log's end (after its recovery, or a
        truncation); returns the queues that lost some."""
        return [queue for queue in self.queues.values() if queue.truncate_dirty(physic_max)]

    def queue_offset_table(self) -> dict[tuple[str, int], int]:
        """topic-queue -> next queue offset, as the writer's table starts after recovery."""
        return {key: q.max_offset for key, q in self.queues.items() if q.max_offset > 0}

    def flush(self) -> None:
        """Make every queue's entries durable (blocking; run in a worker thread)."""
        for queue in list(self.queues.values()):
            queue.flush()

    def delete_expired(self, commit_log_min_offset: int) -> int:
        """Retention: drop files pointing wholly below the commit log; returns files deleted."""
        return sum(q.delete_expired(commit_log_min_offset) for q in list(self.queues.values()))

    def correct_min_offsets(self, commit_log_min_offset: int) -> None:
        """Move every queue's min offset to its first live entry."""
        for queue in self.queues.values():
            queue.correct_min_offset(commit_log_min_offset)

    def close(self) -> None:
        """Unmap every queue."""
        for queue in self.queues.values():
            queue.close()


def search_offset_by_time(
    low: int, high: int, timestamp: int, store_time_at: Callable[[int], int | None]
) -> int:
    """Queue offset in ``[low, high]`` whose store time equals ``timestamp``, else the nearer
    neighbour; 0 when there is none. ``store_time_at(queue offset)`` reads a message's store
    time (None when its commit-log data is gone). Shared by the file and memory stores."""
    if high < low:
        return 0
    # Skip entries whose commit-log data is already deleted.
    first_time = store_time_at(low)
    while first_time is None and low < high:
        low += 1
        first_time = store_time_at(low)
    if first_time is None:
        return 0
    if timestamp <= first_time:
        return low
    last_time = store_time_at(high)
    if last_time is None or timestamp >= last_time:
        return high
    # Invariant: time(low) < timestamp < time(high).
    while high - low > 1:
        mid = (low + high) // 2
        mid_time = store_time_at(mid)
        if mid_time is None:
            return mid
        if mid_time == timestamp:
            # The first of equal store times, as a consumer seeking to it expects.
            while mid > low + 1 and store_time_at(mid - 1) == timestamp:
                mid -= 1
            return mid
        if mid_time < timestamp:
            low, first_time = mid, mid_time
        else:
            high, last_time = mid, mid_time
    return low if timestamp - first_time <= last_time - timestamp else high
