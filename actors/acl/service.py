"""`AccessValidator`: the accounts of one plain_acl.yml, its reload, and the dispatcher guard.

A broker or registry with ``aclEnable=true`` builds one, calls `load` before it listens (a
missing or bad file stops the start with one line saying why), installs `guard` on its
dispatcher and runs `watch`, which polls the file's modification stamp (RocketMQ's watcher
does it every 500 ms) and reloads it on change. A bad file on reload keeps the accounts in
force and logs what is wrong: a typo never turns the ACL off.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import attrs
import trio

from actors.acl.accounts import AclTable, load_plain_acl
from actors.acl.addresses import AclConfigError, peer_host
from actors.acl.validator import AclDeniedError, check_request
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.connection import Connection, code_name

__all__ = ["AccessValidator", "AccessValidatorStatistics"]

log = logging.getLogger("boltmq.acl")


@attrs.frozen
class AccessValidatorStatistics:
    """Counters of one validator at one moment."""

    path: str
    accounts: int
    loads: int
    failed_reloads: int
    refused: int


class AccessValidator:
    """Checks every request of a server against plain_acl.yml; see the module docstring."""

    def __init__(self, path: str | Path, *, poll_interval: float = 0.5) -> None:
        self.path = Path(path).expanduser()
        self.poll_interval = poll_interval
        self.table = AclTable({})
        self._stamp: tuple[int, int, int] | None = None
        self._loads = 0
        self._failed_reloads = 0
        self._refused = 0

    def load(self) -> None:
        """Read the file now; raises `AclConfigError` (the accounts in force stay)."""
        stamp = self._file_stamp()
        self.table = load_plain_acl(self.path)
        self._stamp = stamp
        self._loads += 1
        log.info("acl: %d account(s) loaded from %s", len(self.table.accounts), self.path)

    def reload_if_changed(self) -> bool:
        """Reload when the file changed since the last read; True when new accounts are in force."""
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return False
        self._stamp = stamp  # a bad version is reported once, not on every poll
        try:
            table = load_plain_acl(self.path)
        except AclConfigError as exc:
            self._failed_reloads += 1
            log.error("acl: %s; keeping the %d account(s) loaded before", exc,
                      len(self.table.accounts))  # fmt: skip
            return False
        self.table = table
        self._loads += 1
        log.info("acl: %s changed; %d account(s) in force", self.path, len(table.accounts))
        return True

    async def watch(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Poll the file and reload it on change, until cancelled."""
        task_status.started()
        while True:
            await trio.sleep(self.poll_interval)
            self.reload_if_changed()

    def guard(self, connection: Connection, request: RemotingCommand) -> RemotingCommand | None:
        """The dispatcher guard: None when allowed, else a NO_PERMISSION answer (logged)."""
        try:
            check_request(self.table, request, peer_host(connection.peer))
        except AclDeniedError as exc:
            self._refused += 1
            remark = str(exc)
            log.warning("acl: refused %s from %s: %s", code_name(request.code), connection.peer,
                        remark)  # fmt: skip
            return request.response(ResponseCode.NO_PERMISSION, remark)
        return None

    def statistics(self) -> AccessValidatorStatistics:
        """Accounts in force, loads and refusals."""
        return AccessValidatorStatistics(
            path=str(self.path),
            accounts=len(self.table.accounts),
            loads=self._loads,
            failed_reloads=self._failed_reloads,
            refused=self._refused,
        )

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        # Size and inode too: an editor's quick rewrite can keep a coarse mtime.
        return (stat.st_mtime_ns, stat.st_size, stat.st_ino)
