"""Memory-mapped store files of a fixed size named by their 20-digit start offset.

A `MappedFile` is one preallocated (sparse) file mapped whole; writers copy bytes into the
map, readers get memoryview slices of it without a copy, and `flush` makes the written range
durable with fdatasync (which writes back the map's dirty pages; it releases the GIL so it can
run in a worker thread). A `MappedFileQueue` is the ordered list of such files that makes up
one log (the commit log, or one consume queue).

Files written a few bytes at a time (consume queues: one per topic queue, tens of thousands on
a broker with thousands of topics) are mapped with libc's mmap where libc is loaded, close their
descriptor at once and are flushed with msync on the map, so they hold no descriptor at all
(Python's mmap would keep a duplicate of it: one descriptor of the open-file limit per queue
file). Their map is unmapped when the last view of it is gone (`_map_without_fd`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import mmap
import os
import weakref
from pathlib import Path

log = logging.getLogger("boltmq.storage")

_fdatasync = getattr(os, "fdatasync", os.fsync)
#: ``_fd`` of a file whose map is open but whose own descriptor was closed after mapping.
_NO_FD = -2
_MS_SYNC = 4  # Linux's value
_PAGE = mmap.PAGESIZE
# Linux's MADV_POPULATE_READ / _WRITE (5.14+): fault pages in, readable or writable, without
# touching their data (WRITE also marks them dirty).
_MADV_POPULATE_READ = 22
_MADV_POPULATE_WRITE = 23
_fadvise = getattr(os, "posix_fadvise", None)
_FADV_WILLNEED: int = getattr(os, "POSIX_FADV_WILLNEED", 3)
# No readahead on faults (absent where the platform has no madvise).
_MADV_RANDOM: int | None = getattr(mmap, "MADV_RANDOM", None)
#: Disk space a commit-log file reserves ahead of its write position (`MappedFile.reserve`).
RESERVE_CHUNK = 1 << 20
#: Free space a reservation leaves for the consume queues, index and config files, which
#: are written through sparse maps without a reservation of their own.
DISK_FREE_FLOOR = 2 << 20


class DiskFullError(OSError):
    """No disk space for the next part of a commit-log file: the put is refused."""


def _load_libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        libc.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int64,
        ]
        libc.mmap.restype = ctypes.c_void_p
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    except (OSError, AttributeError):  # no libc symbols here: no prefaulting
        return None
    return libc


_libc = _load_libc()


#: Descriptors one consume-queue file holds while open: none where libc maps it, else the
#: duplicate Python's mmap keeps.
QUEUE_FILE_DESCRIPTORS = 0 if _libc is not None else 1
_MAP_FAILED = ctypes.c_void_p(-1).value


def _munmap(address: int, size: int) -> None:
    if _libc is not None:
        _libc.munmap(address, size)


def _map_without_fd(fd: int, size: int) -> memoryview:
    """A writable byte view of a shared map of ``fd`` made by libc's mmap.

    The view's exporter is a ctypes array over the mapped memory; the memory is unmapped
    when that array is collected, which happens only once every view of it (each keeps its
    exporter alive) is gone, so no view can ever point at unmapped memory. The descriptor
    may be closed as soon as this returns: the kernel's map keeps the file itself.
    """
    assert _libc is not None
    address = _libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
    if address is None or address == _MAP_FAILED:
        code = ctypes.get_errno()
        raise OSError(code, f"mmap: {os.strerror(code)}")
    try:
        array = (ctypes.c_ubyte * size).from_address(address)
        # Not at exit: a daemon thread may still read a view while the interpreter ends.
        weakref.finalize(array, _munmap, address, size).atexit = False
    except BaseException:
        _libc.munmap(address, size)
        raise
    return memoryview(array).cast("B")


def offset_to_file_name(offset: int) -> str:
    """The 20-digit zero-padded name of the file starting at ``offset``."""
    return f"{offset:020d}"


class MappedFile:
    """One fixed-size store file mapped into memory."""

    __slots__ = (
        "_address",
        "_cuts",
        "_fd",
        "_map",
        "file_from_offset",
        "file_size",
        "flushed_position",
        "path",
        "prefaulted_position",
        "reserved_position",
        "view",
        "wrote_position",
    )

    def __init__(
        self, path: Path, file_size: int, small_writes: bool = False, start_offset: int = -1
    ) -> None:
        self.path = path
        self.file_size = file_size
        # -1: the offset is the file's name (a spare's is given when it is taken into use).
        self.file_from_offset = int(path.name) if start_offset < 0 else start_offset
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._map: mmap.mmap | None = None
        try:
            size = os.fstat(fd).st_size
            if size < file_size:
                # ftruncate extends sparsely: no data blocks are written until used.
                os.ftruncate(fd, file_size)
            elif size > file_size:
                raise ValueError(f"{path} is {size} bytes, expected {file_size}")
            if small_writes and _libc is not None:
                # No descriptor held (see the module's docstring); `flush` uses msync.
                view = _map_without_fd(fd, file_size)
            else:
                self._map = mmap.mmap(
                    fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE
                )
                view = memoryview(self._map)
                if small_writes and _MADV_RANDOM is not None:
                    self._map.madvise(_MADV_RANDOM)  # see below
        except BaseException:
            os.close(fd)
            raise
        if self._map is None:
            os.close(fd)
            fd = _NO_FD
        self._fd = fd
        self.view = view
        self.wrote_position = 0
        self.flushed_position = 0
        # Truncations so far: a flush that ran across one must not claim what it covered.
        self._cuts = 0
        self.prefaulted_position = 0
        # Bytes below this have disk blocks (fallocate): a write through the map there can
        # never fault for want of space, which on a full disk kills the process (SIGBUS).
        self.reserved_position = 0
        anchor = ctypes.c_char.from_buffer(view)
        self._address = ctypes.addressof(anchor)
        del anchor  # releases the buffer export, so the map can still be closed
        if small_writes and _MADV_RANDOM is not None and self._map is None:
            # Without it the first write fault may fill the page cache with one large folio
            # for a whole new file, zeroing megabytes (measured 1-13 ms per 6 MB consume
            # queue file, 13 s for a 1024-queue topic's first messages); with it each page
            # is faulted alone (0.25 ms for a file's first 2048 entries). Python's map was
            # advised above, before its descriptor could leak.
            assert _libc is not None
            _libc.madvise(self._address, file_size, _MADV_RANDOM)

    # -- positions -------------------------------------------------------------------------

    @property
    def remaining(self) -> int:
        """Bytes left after the write position."""
        return self.file_size - self.wrote_position

    @property
    def is_full(self) -> bool:
        """Whether the write position reached the end of the file."""
        return self.wrote_position >= self.file_size

    @property
    def end_offset(self) -> int:
        """The log offset just past the written bytes."""
        return self.file_from_offset + self.wrote_position

    # -- writing ---------------------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Copy ``data`` at the write position; returns the position it was written at."""
        pos = self.wrote_position
        end = pos + len(data)
        if end > self.file_size:
            raise ValueError(f"{self.path}: append of {len(data)} bytes at {pos} overflows")
        if self._map is not None:
            self._map[pos:end] = data
        else:
            self.view[pos:end] = data
        self.wrote_position = end
        return pos

    def reserve(self, end: int) -> None:
        """Give the file disk blocks up to ``end`` (a chunk ahead), before a write through
        the map; raises `DiskFullError` when the disk cannot hold them and still keep
        ``DISK_FREE_FLOOR`` free. Files are sparse, so without this a full disk is met as a
        SIGBUS in the middle of a copy instead of an error before it."""
        if end <= self.reserved_position:
            return
        end = min(self.file_size, end)
        start = self.reserved_position
        chunk = min(self.file_size, max(end, start + RESERVE_CHUNK))
        try:
            stat = os.fstatvfs(self._fd)
            available = stat.f_bavail * stat.f_frsize
            if available < chunk - start + DISK_FREE_FLOOR:
                chunk = end  # no room for a whole chunk: just what this write needs
                if available < end - start + DISK_FREE_FLOOR:
                    raise DiskFullError(errno.ENOSPC, f"{available} bytes free")
            os.posix_fallocate(self._fd, start, chunk - start)
        except DiskFullError:
            raise
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            raise DiskFullError(errno.ENOSPC, str(exc)) from exc
        self.reserved_position = chunk

    def append_through_file(self, data: bytes | bytearray | memoryview) -> int:
        """`append` with a write to the file instead of a copy into the map.

        For large appends of bytes that are already whole (a slave's replicated data): the
        write fills the page cache directly, where a first write through the map first faults
        each page in (allocated and zeroed), several times the cost per page. Readers of the
        map see the bytes at once (one page cache).
        """
        pos = self.wrote_position
        end = pos + len(data)
        if end > self.file_size:
            raise ValueError(f"{self.path}: append of {len(data)} bytes at {pos} overflows")
        view = memoryview(data)
        done = 0
        while done < len(view):
            done += os.pwrite(self._fd, view[done:], pos + done)
        self.wrote_position = end
        self.prefaulted_position = max(self.prefaulted_position, end)
        self.reserved_position = max(self.reserved_position, end)  # written: blocks exist
        return pos

    def prefault(self, end: int) -> None:
        """Fault the pages up to ``end`` in ahead of the writer (blocking; a worker thread).

        The first write to each page of a new file otherwise costs the writer a page fault
        that allocates and zeroes a page-cache page on the trio thread. The call only
        populates the page cache and page tables; it never changes data, so it may race with
        the writer safely.

        Read-only on purpose: the writer's first write to each page then costs a write-protect
        fault (1-2.6 us a page here, see below), while pages faulted in writable would be
        dirty, so the next fdatasync would write their zeros to disk as well. Under
        SYNC_FLUSH at 100 MB/s that doubled what each flush wrote and cut batch sends by
        about 15%; and a flush cleans the pages anyway, so the writer took the
        write-protect fault regardless.
        """
        start = self.prefaulted_position - self.prefaulted_position % _PAGE
        end = min(end, self.file_size)
        if _libc is None or end <= start:
            self.prefaulted_position = max(self.prefaulted_position, end)
            return
        if self._fd >= 0 and _fadvise is not None:
            # The page cache filled by readahead first, then mapped: a new stretch of the
            # file faulted in at 2.3-3.3 GB/s where the fault path alone managed 0.45-0.6
            # (each call's stall under 1 ms against up to 24), though the writer's first
            # write to such a page costs about 2.6 us against 1 (docs/performance-journal.md).
            with contextlib.suppress(OSError):  # advice: a spare dropped meanwhile is closed
                _fadvise(self._fd, start, end - start, _FADV_WILLNEED)
        _libc.madvise(self._address + start, end - start, _MADV_POPULATE_READ)
        self.prefaulted_position = end

    @property
    def sync_fd(self) -> int | None:
        """The descriptor fdatasync needs: None for a file flushed with msync, -1 once closed."""
        return None if self._fd == _NO_FD else self._fd

    def flush(self) -> int:
        """Make everything written so far durable; returns the flushed position.

        Blocking (fdatasync, or msync for a file without a descriptor): the store calls it
        in a worker thread (SYNC_FLUSH: the group commit's flush thread).
        """
        target = self.wrote_position
        cuts = self._cuts
        if target > self.flushed_position and self._fd == _NO_FD:
            assert _libc is not None  # only where libc is loaded has a file no descriptor
            start = self.flushed_position - self.flushed_position % _PAGE
            if _libc.msync(self._address + start, target - start, _MS_SYNC) != 0:
                error = ctypes.get_errno()
                if not self.closed_meanwhile(error):
                    raise OSError(error, os.strerror(error), str(self.path))
                log.debug("flush of %s skipped: %s", self.path, os.strerror(error))
                return self.flushed_position
        elif target > self.flushed_position:
            try:
                _fdatasync(self._fd)
            except OSError as exc:
                if not self.closed_meanwhile(exc.errno or 0):
                    raise
                log.debug("flush of %s skipped: %s", self.path, exc)
                return self.flushed_position
        else:
            return self.flushed_position
        if cuts == self._cuts:  # else truncated meanwhile: what it covered is not the file's
            self.flushed_position = target
        return self.flushed_position

    def closed_meanwhile(self, error: int) -> bool:
        """Whether a failed sync (``error``: its errno) only met a file retention destroyed
        while it ran: nothing is lost then. Any other failure is the disk's, and must not be
        taken for a flush (after EIO a later fdatasync may succeed without the data)."""
        return self._fd == -1 or error == errno.EBADF

    def sync_all(self) -> None:
        """Make the whole file durable, written or zeroed (blocking: after a truncation, whose
        zeros `flush` would not cover: it syncs only past the flushed position)."""
        target = self.wrote_position
        if self._fd == _NO_FD:
            assert _libc is not None  # only where libc is loaded has a file no descriptor
            if _libc.msync(self._address, self.file_size, _MS_SYNC) != 0:
                error = ctypes.get_errno()
                if not self.closed_meanwhile(error):
                    raise OSError(error, os.strerror(error), str(self.path))
                log.debug("sync of %s skipped: %s", self.path, os.strerror(error))
                return
        elif self._fd >= 0:
            _fdatasync(self._fd)
        else:
            return  # closed: destroyed meanwhile
        self.flushed_position = max(self.flushed_position, target)

    def truncate_to(self, pos: int) -> None:
        """Drop everything from ``pos`` on: the bytes read as zeros afterwards."""
        # Zero 1 MiB at a time and stop at the first chunk that is already zero: logs are
        # written contiguously, so that is where the never-written (sparse) part begins.
        step = 1 << 20
        zeros = bytes(step)
        cursor = pos
        while cursor < self.file_size:
            end = min(cursor + step, self.file_size)
            if self.view[cursor:end] == zeros[: end - cursor]:
                break
            self.view[cursor:end] = zeros[: end - cursor]
            cursor = end
        self.wrote_position = pos
        self.flushed_position = min(self.flushed_position, pos)
        self._cuts += 1

    # -- reading ---------------------------------------------------------------------------

    def slice(self, pos: int, size: int) -> memoryview:
        """A zero-copy view of ``size`` bytes at ``pos`` inside this file."""
        return self.view[pos : pos + size]

    def find(self, sub: bytes, start: int) -> int:
        """Position of the first ``sub`` at or after ``start`` (-1 when absent)."""
        if self._map is not None:
            return self._map.find(sub, start)
        # Files without a descriptor (consume queues) are never searched on a hot path.
        hit = bytes(self.view[start:]).find(sub)
        return hit if hit < 0 else start + hit

    def rename(self, path: Path, start_offset: int) -> None:
        """Give the file a new name and start offset (a spare taken into use); the map stays."""
        os.rename(self.path, path)
        self.path = path
        self.file_from_offset = start_offset

    def last_modified(self) -> float:
        """The file's modification time (seconds since the epoch)."""
        return os.stat(self.path).st_mtime

    # -- lifetime --------------------------------------------------------------------------

    def close(self) -> bool:
        """Unmap and close; False when readers still hold views (retry later).

        A file without a descriptor always closes: it lets go of its view, and the memory is
        unmapped once the views readers still hold are gone too.
        """
        if self._fd == -1:
            return True
        self.view.release()
        if self._map is None:
            self._fd = -1
            return True
        try:
            self._map.close()
        except BufferError:
            self.view = memoryview(self._map)
            return False
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = -1
        return True

    def destroy(self) -> bool:
        """Delete the file; the map is closed now or by a later `close` once views are gone."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        return self.close()


#: The name of a log's spare file (`MappedFileQueue.make_spare`); never an offset name, so
#: loading and recovery never count it as part of the log.
SPARE_NAME = "next.alloc"


class MappedFileQueue:
    """The ordered files of one log in one directory, each ``file_size`` bytes."""

    def __init__(self, directory: Path, file_size: int, small_writes: bool = False) -> None:
        self.directory = directory
        self.file_size = file_size
        # Files written a few bytes at a time (consume queues): see `MappedFile`.
        self.small_writes = small_writes
        self.files: list[MappedFile] = []
        # Files deleted while readers still held views; closed when possible.
        self._closing: list[MappedFile] = []
        #: An empty file made ahead of need (`make_spare`); the next `create_file` takes it.
        self.spare: MappedFile | None = None

    def load(self) -> None:
        """Map the existing files in name order (all must have the configured size)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        # A spare left by a crash was never written (it is renamed before its first write).
        (self.directory / SPARE_NAME).unlink(missing_ok=True)
        names = sorted(p for p in self.directory.iterdir() if _is_offset_name(p.name))
        for path in names:
            size = path.stat().st_size
            if size != self.file_size:
                raise ValueError(
                    f"{path} is {size} bytes but the configured file size is {self.file_size}"
                )
            mapped = MappedFile(path, self.file_size, self.small_writes)
            # Until recovery says otherwise, a loaded file counts as written to its end.
            mapped.wrote_position = mapped.flushed_position = self.file_size
            self.files.append(mapped)

    @property
    def min_offset(self) -> int:
        """Start offset of the first file (0 when there is none)."""
        return self.files[0].file_from_offset if self.files else 0

    @property
    def max_offset(self) -> int:
        """Offset just past the last written byte."""
        return self.files[-1].end_offset if self.files else 0

    def last_file(self) -> MappedFile | None:
        """The file being written, if any."""
        return self.files[-1] if self.files else None

    def create_file(self, start_offset: int) -> MappedFile:
        """Create and append the file starting at ``start_offset`` (the spare, if made)."""
        if start_offset % self.file_size:
            raise ValueError(f"file start {start_offset} is not a multiple of {self.file_size}")
        path = self.directory / offset_to_file_name(start_offset)
        mapped, self.spare = self.spare, None
        if mapped is not None:
            try:
                mapped.rename(path, start_offset)
            except OSError as exc:
                log.warning("could not take the spare %s into use as %s (%s); creating the "
                            "file instead", mapped.path, path.name, exc)  # fmt: skip
                self._destroy(mapped)
                mapped = None
        if mapped is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            mapped = MappedFile(path, self.file_size, self.small_writes)
        self.files.append(mapped)
        return mapped

    def make_spare(self) -> MappedFile | None:
        """Create the next file ahead of need, as RocketMQ's allocation service does
        (blocking; a worker thread): creating and mapping a file, and faulting in its first
        pages (`MappedFile.prefault` on `spare`), then happens off the writer's path.

        It is made under `SPARE_NAME` and renamed to its offset by the `create_file` that
        takes it, before its first write, so it is never part of the log: a crash leaves at
        most an empty spare, which `load` deletes. Returns the spare; None when one exists.
        """
        if self.spare is not None:
            return None
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / SPARE_NAME
        path.unlink(missing_ok=True)  # zeros only: a stale spare's content is not trusted
        self.spare = MappedFile(path, self.file_size, self.small_writes, start_offset=0)
        return self.spare

    def writable_file(self, start_offset: int = 0) -> MappedFile:
        """The last file if it has room, else a new one after it (or at ``start_offset``)."""
        last = self.files[-1] if self.files else None
        if last is None:
            return self.create_file(start_offset - start_offset % self.file_size)
        if last.is_full:
            return self.create_file(last.file_from_offset + self.file_size)
        return last

    def find_file(self, offset: int) -> MappedFile | None:
        """The file holding log ``offset``, or None when it is outside the files."""
        files = self.files
        if not files:
            return None
        first = files[0].file_from_offset
        if offset < first:
            return None
        index = (offset - first) // self.file_size
        if index >= len(files):
            return None
        mapped = files[index]
        if mapped.file_from_offset <= offset < mapped.file_from_offset + self.file_size:
            return mapped
        for mapped in files:  # pragma: no cover - only after a gap in file names
            if mapped.file_from_offset <= offset < mapped.file_from_offset + self.file_size:
                return mapped
        return None

    def truncate_dirty(self, offset: int) -> None:
        """Drop everything at or after log ``offset`` (files after it are deleted)."""
        keep: list[MappedFile] = []
        for mapped in self.files:
            end = mapped.file_from_offset + self.file_size
            if end <= offset:
                keep.append(mapped)
            elif mapped.file_from_offset <= offset:
                mapped.truncate_to(offset - mapped.file_from_offset)
                keep.append(mapped)
            else:
                self._destroy(mapped)
        self.files = keep

    def delete_first(self, count: int) -> list[MappedFile]:
        """Delete the first ``count`` files (retention); returns them."""
        gone, self.files = self.files[:count], self.files[count:]
        for mapped in gone:
            self._destroy(mapped)
        return gone

    def destroy_all(self) -> None:
        """Delete every file of this log."""
        for mapped in self.files:
            self._destroy(mapped)
        self.files = []
        self._drop_spare()

    def close(self) -> None:
        """Unmap every file (views still held by readers keep their map alive); the spare
        is deleted. The files stay listed (their offsets readable), never to be mapped
        again: a reopened log is a new queue (see `adopt_closing`)."""
        for mapped in self.files:
            if not mapped.close():
                self._closing.append(mapped)  # readers hold views: `retry_close` ends it
        self._drop_spare()
        self.retry_close()

    def adopt_closing(self, other: MappedFileQueue) -> None:
        """Take over the files ``other`` still has to close (a queue built anew over the
        same directory, whose `retry_close` then closes them once readers let go)."""
        self._closing.extend(other._closing)
        other._closing = []

    def _drop_spare(self) -> None:
        if self.spare is not None:
            self._destroy(self.spare)
            self.spare = None

    def retry_close(self) -> None:
        """Close the maps of deleted files whose readers have let go."""
        self._closing = [m for m in self._closing if not m.close()]

    def _destroy(self, mapped: MappedFile) -> None:
        if not mapped.destroy():
            self._closing.append(mapped)


def _is_offset_name(name: str) -> bool:
    return len(name) == 20 and name.isdigit()
