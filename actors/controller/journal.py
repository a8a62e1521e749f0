"""Where the controller's state changes are committed: the `Journal` seam.

A single controller applies events to its `ReplicaTable` at once (`LocalJournal`); several
controllers commit them through Raft first (`actors.controller.raft.RaftJournal`), and every
controller applies them as they commit. The service reads the table under ``lock`` because a
Raft journal applies events from its own thread.
"""

from __future__ import annotations

import threading
from typing import Protocol

import trio

from actors.controller.replicas import Event, ReplicaTable
from supervisors.config_file import load_json_config, save_json_config

__all__ = ["Journal", "LocalJournal"]


class Journal(Protocol):
    """The committed state, its leader, and the way to change it."""

    #: Held while reading ``table`` or applying to it.
    lock: threading.Lock

    @property
    def table(self) -> ReplicaTable:
        """The state every committed event has been applied to."""
        ...

    def is_leader(self) -> bool:
        """True when this controller may write (and scan and elect)."""
        ...

    def leader_id(self) -> str | None:
        """The leader's peer id, when known."""
        ...

    def leader_address(self) -> str | None:
        """The leader's remoting ``host:port``, when known."""
        ...

    def peers_text(self) -> str:
        """The peers as ``id-host:port`` joined by ``;`` (empty for one controller)."""
        ...

    async def load(self) -> None:
        """Read what is kept on disk, once (`run` does it when not done yet)."""
        ...

    async def commit(self, events: tuple[Event, ...]) -> None:
        """Commit and apply ``events``; raises `protocol.command.RemotingError` with
        CONTROLLER_NOT_LEADER or CONTROLLER_JRAFT_INTERNAL_ERROR when it cannot."""
        ...

    async def run(
        self, address: str, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run until cancelled; ``address`` is this controller's remoting ``host:port``."""
        ...


class LocalJournal:
    """One controller, no Raft: always the leader; events apply as they are committed.

    With a ``path`` the state is kept in that JSON file (written atomically, ``.bak`` kept,
    before a change is applied), so a restarted controller keeps the ids and epochs it
    handed out; without one it lives in memory.
    """

    def __init__(self, path: str | None = None) -> None:
        self._table = ReplicaTable()
        self.lock = threading.Lock()
        self.path = path
        self._address: str | None = None
        self._loaded = False

    @property
    def table(self) -> ReplicaTable:
        """The state."""
        return self._table

    def is_leader(self) -> bool:
        """Always True."""
        return True

    def leader_id(self) -> str | None:
        """``n0``: RocketMQ's name for a lone controller."""
        return "n0"

    def leader_address(self) -> str | None:
        """This controller's own address once it serves."""
        return self._address

    def peers_text(self) -> str:
        """No peers."""
        return ""

    async def load(self) -> None:
        """Read the state file, once. Raises `ConfigFileError` when the file and its
        ``.bak`` exist and neither parses (nothing is overwritten)."""
        if self.path is None or self._loaded:
            return
        loaded = await trio.to_thread.run_sync(load_json_config, self.path, ReplicaTable.from_json)
        if loaded is not None:
            with self.lock:
                self._table = loaded
        self._loaded = True

    async def commit(self, events: tuple[Event, ...]) -> None:
        """Save the state with ``events`` applied, then make it the state."""
        with self.lock:
            table = self._table.copy()
        table.apply_all(events)
        if self.path is not None:
            data = table.to_json()
            await trio.to_thread.run_sync(save_json_config, self.path, data)
        with self.lock:
            self._table = table

    async def run(
        self, address: str, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Load the state file (once), remember the address, run until cancelled."""
        await self.load()
        self._address = address
        task_status.started()
        await trio.sleep_forever()
