"""The message store's settings (RocketMQ's MessageStoreConfig names) and its errors."""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from pathlib import Path

import attrs

COMMIT_LOG_FILE_SIZE = 1024 * 1024 * 1024
CONSUME_QUEUE_FILE_ENTRIES = 300_000
MAX_HASH_SLOT_NUM = 5_000_000
MAX_INDEX_NUM = 20_000_000
MAX_MESSAGE_SIZE = 4 * 1024 * 1024


def system_clock_ms() -> int:
    """Wall-clock time in epoch milliseconds (the store's default clock)."""
    return time.time_ns() // 1_000_000


class FlushDiskType(enum.StrEnum):
    """When a put is answered: after the write (ASYNC_FLUSH) or after the fsync (SYNC_FLUSH)."""

    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class BrokerRole(enum.StrEnum):
    """A slave's store refuses puts; it only takes replicated commit-log data."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


@attrs.define(kw_only=True)
class MessageStoreConfig:
    """Store settings; names follow RocketMQ's MessageStoreConfig in snake case."""

    store_path_root_dir: Path = attrs.field(converter=Path)
    mapped_file_size_commit_log: int = COMMIT_LOG_FILE_SIZE
    mapped_file_size_consume_queue_entries: int = CONSUME_QUEUE_FILE_ENTRIES
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    flush_interval_commit_log_ms: int = 500
    flush_interval_consume_queue_ms: int = 1000
    sync_flush_timeout_ms: int = 5000
    max_message_size: int = MAX_MESSAGE_SIZE
    # Retention.
    file_reserved_time_hours: float = 72
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: int = 85
    clean_resource_interval_ms: int = 10_000
    delete_files_batch_max: int = 10
    # Index.
    message_index_enable: bool = True
    max_hash_slot_num: int = MAX_HASH_SLOT_NUM
    max_index_num: int = MAX_INDEX_NUM
    # Recovery.
    check_crc_on_recover: bool = True
    # The address written as STOREHOST into every record (brokerIP1:listenPort).
    store_host: tuple[str, int] = ("127.0.0.1", 10911)
    # Epoch milliseconds; tests inject a fake clock to age files without waiting.
    clock: Callable[[], int] = system_clock_ms
    # Fraction (0..1) of the commit-log disk in use; injectable for retention tests.
    disk_usage_ratio: Callable[[Path], float] | None = None

    @property
    def commit_log_dir(self) -> Path:
        """``<root>/commitlog``."""
        return self.store_path_root_dir / "commitlog"

    @property
    def consume_queue_dir(self) -> Path:
        """``<root>/consumequeue``."""
        return self.store_path_root_dir / "consumequeue"

    @property
    def index_dir(self) -> Path:
        """``<root>/index``."""
        return self.store_path_root_dir / "index"

    @property
    def config_dir(self) -> Path:
        """``<root>/config`` (topics.json, consumerOffset.json, ...)."""
        return self.store_path_root_dir / "config"

    @property
    def checkpoint_path(self) -> Path:
        """``<root>/checkpoint``."""
        return self.store_path_root_dir / "checkpoint"

    @property
    def abort_path(self) -> Path:
        """``<root>/abort``."""
        return self.store_path_root_dir / "abort"

    @property
    def lock_path(self) -> Path:
        """``<root>/lock``."""
        return self.store_path_root_dir / "lock"


class StoreError(Exception):
    """Base of the message store's errors."""


class StoreCorruptionError(StoreError):
    """A record in the middle of a store file is damaged (valid records follow it)."""

    def __init__(self, path: Path, offset: int, reason: str) -> None:
        super().__init__(f"corrupt store file {path} at offset {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


class StoreLockedError(StoreError):
    """Another store already has this store directory open."""
