"""A table the broker keeps in a JSON config file: changed inline, written in the background.

Handlers change the tables directly (the broker runs on one trio thread, so a change that
does not await is atomic) and mark them dirty; the table's `run` task writes the file from a
worker thread (tmp + fsync + rename, `.bak` kept) at most once per interval, and once more when
it stops. A restart loses nothing that was written; changes in the last interval before a crash
are lost, as with RocketMQ's own periodic persistence.
"""

from __future__ import annotations

import logging
from pathlib import Path

import trio

from supervisors.config_file import load_json_config, save_json_config

log = logging.getLogger("boltmq.broker")


class PersistedTable:
    """Base of the broker's config tables: `load`, `mark_dirty`, `persist`, `run`."""

    #: Seconds between writes of a dirty table.
    interval: float = 0.2

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.version = 0  # bumped on every change
        self._persisted_version = 0
        self._dirty = trio.Event()

    def to_json(self) -> bytes:
        """The file's content."""
        raise NotImplementedError

    def from_json(self, data: bytes) -> None:
        """Replace the table with the file's content; raises on bad content."""
        raise NotImplementedError

    def load(self) -> bool:
        """Read the file (or its .bak); False when there is none. Raises ConfigFileError."""
        if self.path is None:
            return False
        return load_json_config(self.path, self._parse) is not None

    def _parse(self, data: bytes) -> bool:
        self.from_json(data)
        return True

    def mark_dirty(self) -> None:
        """Record a change; the run task writes it soon."""
        self.version += 1
        self._dirty.set()

    def persist(self) -> None:
        """Write the file now (blocking)."""
        if self.path is None:
            return
        version = self.version
        save_json_config(self.path, self.to_json())
        self._persisted_version = version

    async def persist_async(self) -> None:
        """Write the file from a worker thread when there are unwritten changes."""
        if self.path is None or self._persisted_version == self.version:
            return
        version = self.version
        data = self.to_json()
        await trio.to_thread.run_sync(save_json_config, self.path, data)
        self._persisted_version = max(self._persisted_version, version)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write the table whenever it changed, at most once per `interval`; and at the end."""
        task_status.started()
        try:
            while True:
                await self._dirty.wait()
                self._dirty = trio.Event()
                await trio.sleep(self.interval)
                await self.persist_async()
        finally:
            if self.path is not None and self._persisted_version != self.version:
                try:
                    self.persist()
                except OSError as exc:
                    log.error("could not write %s at shutdown: %s", self.path, exc)
