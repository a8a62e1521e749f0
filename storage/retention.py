"""Retention: delete old commit-log files, then the consume-queue and index files they orphan.

Commit-log files (never the one being written) whose last modification is older than
``file_reserved_time_hours`` are deleted, oldest first and at most ``delete_files_batch_max``
per round, when the local hour is one of ``delete_when`` ("04", or "04;16") or at once when
the disk holding the commit log is fuller than ``disk_max_used_space_ratio`` percent. Past
``disk_space_clean_forcibly_ratio`` percent, files are deleted even if not yet expired.
Consume-queue and index files whose entries all point below the new commit-log min offset
go too, and each queue's min offset moves to its first live entry.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import attrs
import trio

from storage.commit_log import CommitLog
from storage.consume_queue import ConsumeQueueStore
from storage.index_file import IndexService
from storage.store_config import MessageStoreConfig

log = logging.getLogger("boltmq.storage")


@attrs.frozen
class RetentionResult:
    """Files deleted by one retention round."""

    commit_log_files: int
    consume_queue_files: int
    index_files: int


def disk_usage_ratio(path: Path) -> float:
    """Fraction of the disk holding ``path`` that is in use."""
    usage = shutil.disk_usage(path)
    return usage.used / usage.total if usage.total else 0.0


class RetentionService:
    """Runs a retention round every ``clean_resource_interval_ms``."""

    def __init__(
        self,
        config: MessageStoreConfig,
        commit_log: CommitLog,
        consume_queues: ConsumeQueueStore,
        index: IndexService | None,
    ) -> None:
        self.config = config
        self.commit_log = commit_log
        self.consume_queues = consume_queues
        self.index = index

    async def run(self) -> None:
        """Clean periodically until cancelled."""
        interval = self.config.clean_resource_interval_ms / 1000
        while True:
            await trio.sleep(interval)
            self.clean_once()

    def clean_once(self) -> RetentionResult:
        """One retention round (also callable directly, e.g. by an admin command)."""
        config = self.config
        commit_log = self.commit_log
        now_ms = config.clock()
        measure = config.disk_usage_ratio or disk_usage_ratio
        ratio = measure(config.commit_log_dir)
        space_full = ratio * 100 > config.disk_max_used_space_ratio
        forced = ratio * 100 > config.disk_space_clean_forcibly_ratio
        deleted = 0
        if self._is_delete_hour(now_ms) or space_full:
            reserved_ms = int(config.file_reserved_time_hours * 3600 * 1000)
            for mapped in commit_log.files.files[:-1]:
                expired = mapped.last_modified() * 1000 + reserved_ms <= now_ms
                if not (expired or forced) or deleted >= config.delete_files_batch_max:
                    break
                deleted += 1
            if deleted:
                gone = commit_log.files.delete_first(deleted)
                log.info(
                    "retention: deleted %d commit-log files (%s..%s)%s; min offset now %d",
                    deleted,
                    gone[0].path.name,
                    gone[-1].path.name,
                    f", disk {ratio:.0%} used" if space_full else "",
                    commit_log.min_offset,
                )
        commit_log.files.retry_close()
        min_offset = commit_log.min_offset
        queue_files = self.consume_queues.delete_expired(min_offset)
        index_files = self.index.delete_expired(min_offset) if self.index is not None else 0
        return RetentionResult(deleted, queue_files, index_files)

    def _is_delete_hour(self, now_ms: int) -> bool:
        hour = time.localtime(now_ms / 1000).tm_hour
        for part in self.config.delete_when.split(";"):
            part = part.strip()
            if part.isdigit() and int(part) == hour:
                return True
        return False
