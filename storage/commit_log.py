"""The commit log: every message of every topic, appended in RocketMQ's V1 record layout.

One writer (the store writer actor) appends; it assigns each record's physical offset, queue
offset and store timestamp, writes an end-of-file blank record when a record does not fit,
and then publishes `committed_offset`. Readers slice the mapped files up to that offset
without a copy and without asking the writer.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import attrs

from protocol.message import BLANK_MAGIC_CODE, MAGIC_CODE
from storage._record import (
    BAD,
    BLANK,
    BLANK_RECORD,
    END,
    RECORD,
    TRANSACTION_PREPARED,
    TRANSACTION_ROLLBACK,
    check_record,
    patch_append_fields,
    read_store_timestamp,
    transaction_type,
)
from storage.dispatch import (
    DISPATCH_CHUNK,
    STOP_BAD,
    STOP_FILE_END,
    CommitLogDispatcher,
    DispatchBatch,
    read_dispatch_batch,
)
from storage.mapped_file import DiskFullError, MappedFile, MappedFileQueue
from storage.store_config import MessageStoreConfig, StoreCorruptionError

log = logging.getLogger("boltmq.storage")

_MAGIC_BYTES = struct.pack(">i", MAGIC_CODE)
_INT = struct.Struct(">i")


@attrs.define(slots=True)
class EncodedPut:
    """One put, encoded by the caller: one record, or a batch's records back to back.

    ``record_starts`` are the records' positions in ``data``; ``dispatch`` holds per record
    ``(tags code, KEYS value, UNIQ_KEY value)``. The writer patches the append-time fields.
    """

    topic: str
    queue_id: int
    sys_flag: int
    data: bytearray
    record_starts: list[int]
    dispatch: list[tuple[int, str, str]]


@attrs.define(slots=True)
class AppendResult:
    """Where a put landed in the commit log (first record's offsets for a batch)."""

    wrote_offset: int
    wrote_bytes: int
    queue_offset: int
    msg_num: int
    store_timestamp: int
    physical_offsets: list[int]


@attrs.define(slots=True)
class FlushPlan:
    """A flush taken apart: the offset it makes durable and each file's descriptor and target."""

    target: int
    timestamp: int
    files: list[tuple[MappedFile, int, int]]
    #: `CommitLog.truncations` when planned: a flush across a truncation claims nothing.
    truncations: int = 0


class MessageTooLargeForFile(ValueError):
    """The encoded put is larger than a whole commit-log file."""


def check_fits_file(size: int, file_size: int) -> None:
    """Raise `MessageTooLargeForFile` when ``size`` bytes of records (and the 8 bytes kept
    for an end-of-file blank record) do not fit a commit-log file of ``file_size`` bytes."""
    if size + 8 > file_size:
        raise MessageTooLargeForFile(f"{size} bytes do not fit a {file_size}-byte commit-log file")


def assign_append_fields(
    put: EncodedPut,
    phys: int,
    store_timestamp: int,
    topic_queue_table: dict[tuple[str, int], int],
) -> int:
    """Patch the append-time fields of ``put``'s records, stored from commit-log offset
    ``phys`` on, taking queue offsets from ``topic_queue_table`` (a prepared or rolled-back
    transaction takes none); returns the first record's queue offset (0 for those)."""
    data = put.data
    starts = put.record_starts
    if transaction_type(put.sys_flag) in (TRANSACTION_PREPARED, TRANSACTION_ROLLBACK):
        for start in starts:
            patch_append_fields(data, start, 0, phys + start, store_timestamp)
        return 0
    key = (put.topic, put.queue_id)
    queue_offset = topic_queue_table.get(key, 0)
    topic_queue_table[key] = queue_offset + len(starts)
    for i, start in enumerate(starts):
        patch_append_fields(data, start, queue_offset + i, phys + start, store_timestamp)
    return queue_offset


class CommitLog:
    """The commit-log files plus the write state the store writer owns."""

    def __init__(self, config: MessageStoreConfig) -> None:
        self.config = config
        self.file_size = config.mapped_file_size_commit_log
        self.files = MappedFileQueue(config.commit_log_dir, self.file_size)
        # Readers see bytes below this offset only (whole records; published by the writer).
        self.committed_offset = 0
        self.flushed_offset = 0
        # topic-queue -> next queue offset; owned by the writer, rebuilt at recovery.
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.last_store_timestamp = 0
        self.flushed_store_timestamp = 0
        #: The last put found no disk space (cleared by the next that finds some).
        self.disk_full = False
        #: Run-time truncations so far (a flush running across one claims nothing).
        self.truncations = 0

    # -- loading and recovery --------------------------------------------------------------

    def load(self) -> None:
        """Map the files on disk (recovery sets the write position)."""
        self.files.load()

    def recover_normally(self) -> None:
        """After a clean shutdown: validate the last three files, truncate after the end."""
        files = self.files.files
        self._recover_from(max(0, len(files) - 3))

    def recover_abnormally(self, checkpoint_min_timestamp: int) -> int:
        """After a crash: scan from the newest file whose first record is older than the
        checkpoint; returns the offset the consume queues and index are replayed from."""
        files = self.files.files
        start = 0
        for index in range(len(files) - 1, -1, -1):
            mapped = files[index]
            check = check_record(mapped.view, 0, mapped.file_from_offset, self.file_size, False)
            if check.kind != RECORD:
                continue
            stored = read_store_timestamp(mapped.view, 0)
            if stored and stored <= checkpoint_min_timestamp:
                start = index
                break
        self._recover_from(start)
        return files[start].file_from_offset if files else 0

    def _recover_from(self, start: int) -> None:
        files = self.files.files
        if not files:
            return
        check_crc = self.config.check_crc_on_recover
        end = files[start].file_from_offset
        last: tuple[memoryview, int] | None = None
        for index in range(start, len(files)):
            mapped = files[index]
            view = mapped.view
            pos = 0
            while True:
                check = check_record(view, pos, mapped.file_from_offset, self.file_size, check_crc)
                if check.kind == RECORD:
                    last = (view, pos)
                    pos += check.size
                    end = mapped.file_from_offset + pos
                    continue
                if check.kind == BLANK or (check.kind == END and check.reason == "end of file"):
                    end = mapped.file_from_offset + self.file_size
                    break
                if check.kind == BAD:
                    if self._valid_record_after(index, pos):
                        raise StoreCorruptionError(
                            mapped.path, mapped.file_from_offset + pos, check.reason
                        )
                    log.warning(
                        "commit log %s: torn tail at offset %d (%s); truncated there",
                        mapped.path.name,
                        mapped.file_from_offset + pos,
                        check.reason,
                    )
                elif self._valid_file_after(index):
                    raise StoreCorruptionError(
                        mapped.path,
                        mapped.file_from_offset + pos,
                        "no record here but later files hold records",
                    )
                self._set_end(end, last)
                return
        self._set_end(end, last)

    def _valid_record_after(self, index: int, pos: int) -> bool:
        """Whether a valid record exists past ``pos`` of file ``index`` (not a torn tail)."""
        mapped = self.files.files[index]
        hit = mapped.find(_MAGIC_BYTES, pos + 5)
        while hit != -1:
            candidate = hit - 4
            check = check_record(
                mapped.view, candidate, mapped.file_from_offset, self.file_size, True
            )
            if check.kind == RECORD:
                return True
            hit = mapped.find(_MAGIC_BYTES, hit + 1)
        return self._valid_file_after(index)

    def _valid_file_after(self, index: int) -> bool:
        for later in self.files.files[index + 1 :]:
            check = check_record(later.view, 0, later.file_from_offset, self.file_size, True)
            if check.kind in (RECORD, BLANK):
                return True
        return False

    def _set_end(self, end: int, last: tuple[memoryview, int] | None) -> None:
        if end < self.files.max_offset:
            self.files.truncate_dirty(end)
        for mapped in self.files.files:
            mapped.flushed_position = mapped.wrote_position
            # What recovery found written has its disk blocks; only the rest needs reserving.
            mapped.reserved_position = mapped.wrote_position
        self.committed_offset = self.flushed_offset = end
        if last is None:
            last = self.last_record_offset()
        if last is not None:
            self.last_store_timestamp = read_store_timestamp(*last)
            self.flushed_store_timestamp = self.last_store_timestamp

    def last_record_offset(self) -> tuple[memoryview, int] | None:
        """(view, position) of the newest record, found by walking the last file."""
        for mapped in reversed(self.files.files):
            pos, found = 0, -1
            while pos + 8 <= mapped.wrote_position:
                total, magic = BLANK_RECORD.unpack_from(mapped.view, pos)
                if magic != MAGIC_CODE or total <= 0:
                    break
                found, pos = pos, pos + total
            if found >= 0:
                return mapped.view, found
        return None

    # -- writing (store writer only) -------------------------------------------------------

    def append(self, put: EncodedPut, store_timestamp: int) -> AppendResult:
        """Append one encoded put (never split across files); patch its append-time fields."""
        data = put.data
        size = len(data)
        check_fits_file(size, self.file_size)
        mapped = self.files.writable_file()
        if mapped.remaining < size + 8:
            self._write_blank(mapped)
            mapped = self.files.writable_file()
        # Before any state changes: a full disk refuses the put and leaves no gap.
        self._reserve(mapped, mapped.wrote_position + size + 8)
        phys = mapped.file_from_offset + mapped.wrote_position
        starts = put.record_starts
        count = len(starts)
        queue_offset = assign_append_fields(put, phys, store_timestamp, self.topic_queue_table)
        mapped.append(data)
        self.last_store_timestamp = store_timestamp
        return AppendResult(
            phys, size, queue_offset, count, store_timestamp, [phys + s for s in starts]
        )

    def _reserve(self, mapped: MappedFile, end: int) -> None:
        """`MappedFile.reserve`, with one log line when the disk fills and one when a put
        finds room again (not one per refused put)."""
        try:
            mapped.reserve(end)
        except DiskFullError as exc:
            if not self.disk_full:
                self.disk_full = True
                log.error("commit log %s: the disk is full (%s); sends are refused with "
                          "SERVICE_NOT_AVAILABLE until space is freed", self.files.directory,
                          exc.strerror)  # fmt: skip
            raise
        if self.disk_full:
            self.disk_full = False
            log.warning("commit log %s: disk space is back; sends are stored again",
                        self.files.directory)  # fmt: skip

    def _write_blank(self, mapped: MappedFile) -> None:
        self._reserve(mapped, mapped.wrote_position + 8)
        remaining = mapped.remaining
        mapped.append(BLANK_RECORD.pack(remaining, BLANK_MAGIC_CODE))
        mapped.wrote_position = mapped.file_size

    def append_data(self, start_offset: int, data: bytes | memoryview) -> bool:
        """Append replicated raw commit-log bytes at exactly the current max offset (HA)."""
        if start_offset != self.max_offset and self.files.files:
            return False
        view = memoryview(data)
        if not self.files.files:
            mapped = self.files.create_file(start_offset - start_offset % self.file_size)
            mapped.wrote_position = mapped.flushed_position = start_offset % self.file_size
        while view:
            mapped = self.files.writable_file()
            n = min(len(view), mapped.remaining)
            mapped.append_through_file(view[:n])
            view = view[n:]
        return True

    def boundary_error(self, offset: int) -> str | None:
        """Why ``offset`` is not a record boundary a truncation may cut at (None when it is):
        the log's end, or the start of a whole record or of a file's end-of-file blank."""
        if offset == self.max_offset:
            return None
        if not self.min_offset <= offset < self.max_offset:
            return (
                f"offset {offset} is outside the commit log [{self.min_offset}, {self.max_offset})"
            )
        mapped = self.files.find_file(offset)
        if mapped is None:
            return f"no commit-log file holds offset {offset}"
        pos = offset - mapped.file_from_offset
        check = check_record(mapped.view, pos, mapped.file_from_offset, self.file_size, True)
        if check.kind == BLANK or (
            check.kind == RECORD and pos + check.size <= mapped.wrote_position
        ):
            return None
        return f"no record starts at offset {offset} ({check.reason or 'a partial record'})"

    def truncate_to(self, offset: int) -> list[MappedFile]:
        """Drop every byte at or past ``offset`` (a record boundary: `boundary_error`) in
        memory, files after it deleted; returns the file cut (for the caller to sync)."""
        mapped = self.files.find_file(offset)
        self.truncations += 1
        self.files.truncate_dirty(offset)
        self.committed_offset = min(self.committed_offset, offset)
        self.flushed_offset = min(self.flushed_offset, offset)
        last = self.last_record_offset()
        self.last_store_timestamp = read_store_timestamp(*last) if last is not None else 0
        self.flushed_store_timestamp = min(self.flushed_store_timestamp, self.last_store_timestamp)
        return [mapped] if mapped is not None and mapped in self.files.files else []

    def flush(self) -> int:
        """Make every appended byte durable (blocking: fdatasync; run in a worker thread).

        Only what was appended before it is called is covered: the target is read first."""
        target = self.files.max_offset
        timestamp = self.last_store_timestamp
        cuts = self.truncations
        for mapped in list(self.files.files):
            if mapped.file_from_offset + self.file_size <= self.flushed_offset:
                continue
            mapped.flush()
        if cuts == self.truncations:  # else truncated meanwhile: the target is gone
            self.flushed_offset = max(self.flushed_offset, target)
            self.flushed_store_timestamp = timestamp
        return self.flushed_offset

    def flush_plan(self) -> FlushPlan | None:
        """What a flush starting now must sync (first half of `flush`, in the caller's thread).

        None when a file to sync has no descriptor (msync): `flush` serves that one."""
        files: list[tuple[MappedFile, int, int]] = []
        for mapped in self.files.files:
            if mapped.file_from_offset + self.file_size <= self.flushed_offset:
                continue
            fd = mapped.sync_fd
            if fd is None:
                return None
            target = mapped.wrote_position
            if target > mapped.flushed_position and fd >= 0:  # closed: destroyed meanwhile
                files.append((mapped, fd, target))
        return FlushPlan(self.files.max_offset, self.last_store_timestamp, files, self.truncations)

    def flush_done(self, plan: FlushPlan, errors: list[int]) -> int:
        """Note what ``plan``'s fdatasyncs made durable (``errors``: one errno or 0 per file)."""
        if plan.truncations != self.truncations:
            return self.flushed_offset  # truncated meanwhile: its targets are not the log's
        for (mapped, _fd, target), error in zip(plan.files, errors, strict=True):
            if error:
                if not mapped.closed_meanwhile(error):
                    raise OSError(error, os.strerror(error), str(mapped.path))
                log.debug("flush of %s skipped: %s", mapped.path, os.strerror(error))
            elif target > mapped.flushed_position:
                mapped.flushed_position = target
        self.flushed_offset = max(self.flushed_offset, plan.target)
        self.flushed_store_timestamp = plan.timestamp
        return self.flushed_offset

    # -- reading ---------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        """Offset of the first byte still on disk."""
        return self.files.min_offset

    @property
    def max_offset(self) -> int:
        """Offset just past the last appended byte."""
        return self.files.max_offset

    def get_data(self, offset: int, size: int) -> memoryview | None:
        """``size`` committed bytes at ``offset`` inside one file, zero-copy; None if gone."""
        if offset + size > self.committed_offset or size <= 0:
            return None
        mapped = self.files.find_file(offset)
        if mapped is None:
            return None
        pos = offset - mapped.file_from_offset
        if pos + size > self.file_size:
            return None
        return mapped.slice(pos, size)

    def get_record(self, offset: int) -> memoryview | None:
        """The whole record starting at ``offset`` (None if absent or not a record)."""
        head = self.get_data(offset, 8)
        if head is None:
            return None
        total, magic = BLANK_RECORD.unpack_from(head, 0)
        if magic != MAGIC_CODE or total <= 0:
            return None
        return self.get_data(offset, total)

    def get_data_from(self, offset: int) -> memoryview | None:
        """Committed bytes from ``offset`` to the end of its file's data (HA transfer)."""
        mapped = self.files.find_file(offset)
        if mapped is None or offset >= self.committed_offset:
            return None
        pos = offset - mapped.file_from_offset
        end = min(mapped.wrote_position, self.committed_offset - mapped.file_from_offset)
        return mapped.slice(pos, end - pos) if end > pos else None

    def store_time_of(self, offset: int, size: int) -> int | None:
        """STORETIMESTAMP of the record at ``offset`` (None if its file is gone)."""
        data = self.get_data(offset, size)
        if data is None or size < 80:
            return None
        return read_store_timestamp(data, 0)

    def roll_next_file(self, offset: int) -> int:
        """Start offset of the file after the one holding ``offset``."""
        return offset + self.file_size - offset % self.file_size

    def dispatch_range(
        self, from_offset: int, to_offset: int, dispatcher: CommitLogDispatcher
    ) -> tuple[int, dict[tuple[str, int], int]]:
        """Dispatch every whole record in ``[from_offset, to_offset)``; returns where it stopped
        (before a partial record, which replicated data may end with) and the queue offset
        after the last entry of each queue that grew.

        The records are read in chunks of up to `DISPATCH_CHUNK` bytes, each dispatched as one
        batch the way a group commit dispatches its own records.
        """
        offset = max(from_offset, self.min_offset)
        grown: dict[tuple[str, int], int] = {}
        index_enabled = dispatcher.index is not None
        want = DISPATCH_CHUNK
        while offset + 8 <= to_offset:
            mapped = self.files.find_file(offset)
            if mapped is None:
                break
            pos = offset - mapped.file_from_offset
            if pos + 8 > self.file_size:
                offset = mapped.file_from_offset + self.file_size
                continue
            end = min(to_offset - mapped.file_from_offset, self.file_size)
            chunk_end = min(end, pos + want)
            batch = DispatchBatch(index_enabled, self.config.schedule_delays_ms)
            # One copy of the chunk: slicing and searching bytes per record is cheaper than
            # turning memoryview slices of the topic and properties into bytes (measured).
            used, stop = read_dispatch_batch(bytes(mapped.view[pos:chunk_end]), offset, batch)
            dispatcher.dispatch_batch(batch)
            grown.update(batch.grown)
            offset += used
            want = DISPATCH_CHUNK
            if stop == STOP_FILE_END:
                offset = mapped.file_from_offset + self.file_size
            elif stop == STOP_BAD:
                (magic,) = _INT.unpack_from(mapped.view, pos + used + 4)
                raise StoreCorruptionError(
                    mapped.path, offset, f"no record starts here (magic code {magic:#x})"
                )
            elif chunk_end >= end:
                break  # the rest of the last record is not there yet
            elif not used:  # one record longer than a chunk
                want = _INT.unpack_from(mapped.view, pos)[0]
        return offset, grown

    def first_store_timestamp(self) -> int:
        """Store time of the oldest record on disk (0 when empty)."""
        for mapped in self.files.files:
            check = check_record(mapped.view, 0, mapped.file_from_offset, self.file_size, False)
            if check.kind == RECORD:
                return read_store_timestamp(mapped.view, 0)
        return 0

    def close(self) -> None:
        """Unmap every file."""
        self.files.close()

    @property
    def directory(self) -> Path:
        """``<root>/commitlog``."""
        return self.files.directory
