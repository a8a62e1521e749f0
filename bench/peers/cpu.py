"""CPU use over a timed window from /proc: one process, a process group, and the machine, so a
run can say whether the client or the server was the busier and what other processes took."""

from __future__ import annotations

import os
import time
from pathlib import Path

import attrs

from bench.peers.procs import _stat_fields, group_pids

TICKS = os.sysconf("SC_CLK_TCK")


def process_ticks(pid: int) -> int:
    """utime + stime of ``pid`` in clock ticks (0 when it is gone)."""
    fields = _stat_fields(pid)
    return int(fields[11]) + int(fields[12]) if fields else 0


def group_ticks(pgid: int) -> int:
    """utime + stime of every live process of group ``pgid``."""
    return sum(process_ticks(pid) for pid in group_pids(pgid))


def machine_busy_ticks() -> int:
    """Ticks every cpu spent not idle (user, nice, system, irq, softirq, steal), from /proc/stat."""
    first = Path("/proc/stat").read_text().splitlines()[0].split()
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in first[1:9])
    return user + nice + system + irq + softirq + steal


@attrs.define
class Usage:
    """CPU over one window, in cores (1.0 = one core busy the whole window)."""

    seconds: float
    client: float
    server: float
    others: float


class Window:
    """Samples the client (this process), the server's group and the machine at start and end."""

    def __init__(self, server_pgid: int | None) -> None:
        self.server_pgid = server_pgid
        self._start = self._sample()

    def _sample(self) -> tuple[float, int, int, int]:
        server = group_ticks(self.server_pgid) if self.server_pgid else 0
        return time.monotonic(), process_ticks(os.getpid()), server, machine_busy_ticks()

    def end(self) -> Usage:
        """The usage since the window opened."""
        now, client, server, busy = self._sample()
        wall = max(now - self._start[0], 1e-6)
        d_client = (client - self._start[1]) / TICKS
        d_server = (server - self._start[2]) / TICKS
        d_busy = (busy - self._start[3]) / TICKS
        others = max(0.0, d_busy - d_client - d_server)
        return Usage(wall, d_client / wall, d_server / wall, others / wall)
