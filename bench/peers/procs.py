"""Processes the comparison starts: free loopback ports, a process group per server, waits on
a condition with a deadline, and a stop that ends exactly the group it started."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast


class StartError(RuntimeError):
    """A server did not start: it exited, or did not answer before its deadline."""


def free_port(neighbours: Sequence[int] = ()) -> int:
    """An ephemeral loopback port that is free now, with ``port + n`` free for each neighbour n
    (RocketMQ's broker also takes listenPort - 2 and listenPort + 1)."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if all(_port_free(port + n) for n in neighbours):
            return port
    raise StartError("found no free loopback port with its neighbours free")


def _port_free(port: int) -> bool:
    if not 1024 < port < 65536:
        return False
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_open(port: int) -> bool:
    """True when something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class Group:
    """Processes of one server in a process group of their own, logging to one file."""

    def __init__(self, name: str, log: Path) -> None:
        self.name = name
        self.log = log
        self.pgid: int | None = None
        self.processes: list[subprocess.Popen[bytes]] = []

    def spawn(
        self, command: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``command``: the first one leads a new group, later ones join it."""
        with self.log.open("ab") as out:
            process = subprocess.Popen(
                list(command), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=env, cwd=cwd, process_group=0 if self.pgid is None else self.pgid,
            )  # fmt: skip
        if self.pgid is None:
            self.pgid = process.pid
        self.processes.append(process)
        return process

    def wait_until(self, ready: Callable[[], bool], what: str, deadline: float = 120.0) -> None:
        """Poll ``ready`` until true; StartError when a process exits or the deadline passes."""
        end = time.monotonic() + deadline
        while True:
            for process in self.processes:
                if process.poll() is not None:
                    program = Path(str(cast(list[str], process.args)[0])).name
                    raise StartError(
                        f"{self.name}: {program} exited with status "
                        f"{process.returncode} before {what}; see {self.log}:\n{self.tail()}"
                    )  # fmt: skip
            try:
                if ready():
                    return
            except Exception:  # not answering yet: the condition is polled again
                pass
            if time.monotonic() > end:
                raise StartError(f"{self.name}: no {what} within {deadline:.0f} s; see {self.log}")
            time.sleep(0.2)

    def tail(self, lines: int = 15) -> str:
        """The last lines of the group's log."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def pids(self) -> list[int]:
        """Every live process of the group (children the servers started included)."""
        return group_pids(self.pgid) if self.pgid is not None else []

    def stop(self, grace: float = 30.0) -> list[int]:
        """SIGTERM the group, SIGKILL what is left after ``grace`` s; the pids killed hard."""
        if self.pgid is None:
            return []
        _signal_group(self.pgid, signal.SIGTERM)
        end = time.monotonic() + grace
        while self.pids() and time.monotonic() < end:
            for process in self.processes:
                process.poll()  # reap our own children so they leave the table
            time.sleep(0.1)
        killed = self.pids()
        if killed:
            _signal_group(self.pgid, signal.SIGKILL)
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        return killed


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass


def group_pids(pgid: int) -> list[int]:
    """Live (not zombie) pids whose process group is ``pgid``, read from /proc."""
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields is not None and int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(entry))
    return found


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name: fields[0] is the state, [2] the pgrp."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2 :].decode().split()
