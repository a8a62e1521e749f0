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


#: RocketMQ's default messageDelayLevel: 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h.
_MINUTE = 60_000
DEFAULT_SCHEDULE_DELAYS_MS: tuple[int, ...] = (
    *(s * 1000 for s in (1, 5, 10, 30)),
    *(m * _MINUTE for m in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 30, 60, 120)),
)


def schedule_tags_code(delays_ms: tuple[int, ...], queue_id: int, store_timestamp: int) -> int:
    """The consume-queue tags code of a SCHEDULE_TOPIC_XXXX record: when it is due."""
    if not delays_ms:
        return store_timestamp
    return store_timestamp + delays_ms[min(max(queue_id, 0), len(delays_ms) - 1)]


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
    # Bytes past the write position the commit log is faulted in while no append comes
    # (0: only the usual 16 MiB); see the file store's prefault service.
    idle_prefault_bytes: int = 512 * 1024 * 1024
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
    # Milliseconds of each messageDelayLevel: a SCHEDULE_TOPIC_XXXX record's consume-queue tags
    # code is its store time + the delay of its queue's level (RocketMQ computes it the same
    # way when it dispatches, so a slave and a recovery derive the same entry from the record).
    schedule_delays_ms: tuple[int, ...] = DEFAULT_SCHEDULE_DELAYS_MS
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
        super().__init__(
            f"corrupt store file {path} at offset {offset}: {reason}; valid records follow it, "
            "so the store does not open rather than drop them (nothing was changed on disk): "
            "restore the file from the slave's store or a backup (see docs/reliability.md)"
        )
        self.path = path
        self.offset = offset
        self.reason = reason


class StoreLockedError(StoreError):
    """Another store already has this store directory open."""


class StoreUnsupportedError(StoreError):
    """The store cannot do what was asked (the memory store: HA replication, say)."""


class StoreTruncationError(StoreError):
    """A truncation was refused (the offset is not a record boundary, say); nothing changed."""
