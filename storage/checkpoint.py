"""The checkpoint file (store times of the last flushed data), the abort marker and the lock."""

from __future__ import annotations

import fcntl
import os
import struct
from pathlib import Path

from storage.store_config import StoreLockedError

CHECKPOINT_FILE_SIZE = 4096
_CHECKPOINT = struct.Struct(">qqq")


class StoreCheckpoint:
    """``checkpoint``: physicMsgTimestamp, logicsMsgTimestamp, indexMsgTimestamp (ms)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return
        if len(data) >= _CHECKPOINT.size:
            (
                self.physic_msg_timestamp,
                self.logics_msg_timestamp,
                self.index_msg_timestamp,
            ) = _CHECKPOINT.unpack_from(data, 0)

    def min_timestamp(self, message_index_safe: bool = False) -> int:
        """Store time up to which everything is known flushed, less RocketMQ's 3 s margin."""
        low = min(self.physic_msg_timestamp, self.logics_msg_timestamp)
        if message_index_safe and self.index_msg_timestamp:
            low = min(low, self.index_msg_timestamp)
        return max(0, low - 3000)

    def flush(self) -> None:
        """Write the three times in place and fsync (blocking; run in a worker thread)."""
        data = _CHECKPOINT.pack(
            self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp
        )
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < CHECKPOINT_FILE_SIZE:
                os.ftruncate(fd, CHECKPOINT_FILE_SIZE)
            os.pwrite(fd, data, 0)
            os.fsync(fd)
        finally:
            os.close(fd)


class StoreLock:
    """An exclusive ``flock`` on ``<root>/lock``, held while a store is open."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1

    def acquire(self) -> None:
        """Take the lock or raise `StoreLockedError` at once."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StoreLockedError(
                f"store directory {self.path.parent} is in use by another store "
                f"(lock file {self.path})"
            ) from None
        self._fd = fd

    def release(self) -> None:
        """Let go of the lock."""
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


def create_abort_file(path: Path) -> bool:
    """Create the abort marker; returns whether it already existed (abnormal shutdown)."""
    existed = path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return existed


def delete_abort_file(path: Path) -> None:
    """Remove the abort marker at clean shutdown."""
    path.unlink(missing_ok=True)
