"""Before a launch: one launcher per data directory (`lock_data_dir`), every port free
(`check_ports`); and what a running launcher left in its data directory (`read_state`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from boltmq.launcher.state import STATE_FILE
from boltmq.spec import ClusterSpec, load_spec

#: Where `boltmq cluster` keeps its data unless told otherwise.
DEFAULT_HOME = Path("~/boltmq")


#: Held (flock) by the launcher of a data directory for its whole life; holds its pid.
LOCK_FILE = "launcher.lock"


class LaunchRefused(Exception):
    """A cluster that must not start: its data directory is another launcher's, or a port a
    node binds is taken. Raised before any node starts; the message is one line."""


@attrs.frozen
class ClusterClaim:
    """A spec whose data directory this process holds and whose ports were free (`claim`)."""

    spec: ClusterSpec


@contextlib.contextmanager
def claim(spec: ClusterSpec | str | Path) -> Iterator[ClusterClaim]:
    """Hold ``spec``'s data directory (`lock_data_dir`) and check its ports (`check_ports`)
    for the block; raises `LaunchRefused`. Outside trio, so that a refusal is one line."""
    if not isinstance(spec, ClusterSpec):
        spec = load_spec(spec)
    with lock_data_dir(spec):
        check_ports(spec)
        yield ClusterClaim(spec)


@contextlib.contextmanager
def lock_data_dir(spec: ClusterSpec) -> Iterator[None]:
    """Hold ``spec``'s data directory for one launcher (a lock file with its pid); raises
    `LaunchRefused` naming the other launcher's pid when it holds the directory already."""
    spec.data_dir.mkdir(parents=True, exist_ok=True)
    path = spec.data_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise LaunchRefused(
                f"{spec.data_dir} is in use by the launcher with pid {holder}, whose cluster "
                f"runs: `boltmq cluster -f {spec.path or 'SPEC'} --status` shows it"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        # Closing the descriptor releases the lock; the file stays (a lock on a removed file
        # would let the next launcher lock a new one beside a running cluster).
        os.close(fd)


def check_ports(spec: ClusterSpec) -> None:
    """Bind each port every node of ``spec`` will bind, on its bind address, and let it go;
    raises `LaunchRefused` naming the node, the key and the port of each one taken."""
    taken = []
    for node in spec.nodes:
        address = node.bind_address or "0.0.0.0"
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        for key, port in node.listeners:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                # As the node's own listeners do: a closed connection's TIME_WAIT is no owner.
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind((address, port))
                    probe.listen()
                except OSError as exc:
                    why = "in use" if exc.errno == errno.EADDRINUSE else exc.strerror
                    taken.append(f"node {node.name} {key} {port} ({why})")
    if taken:
        them = "them" if len(taken) > 1 else "it"
        raise LaunchRefused(
            f"cannot listen on {'; '.join(taken)}: free {them} or change the key in "
            f"{spec.path or 'the spec'}"
        )


def read_state(spec: ClusterSpec) -> dict[str, Any]:
    """The state file a launcher of ``spec`` keeps; FileNotFoundError when none ran."""
    return dict(json.loads((spec.data_dir / STATE_FILE).read_bytes()))
