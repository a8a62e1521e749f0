"""What a launcher knows of its cluster: `RunningCluster` (addresses, each node's `NodeState`,
the state file, test controls) and how its nodes are restarted (`RestartRules`).
"""

from __future__ import annotations

import json
import logging
import os
import signal

import attrs
import trio

from actors.broker.broker import Broker
from actors.controller import Controller
from actors.registry import Registry
from boltmq.spec import ClusterSpec
from supervisors.config_file import save_json_config

log = logging.getLogger("boltmq.launcher")

#: Per node: more than this many restarts within `NODE_RESTART_PERIOD` seconds gives it up.
NODE_RESTART_INTENSITY = 5
NODE_RESTART_PERIOD = 60.0
#: Where the launcher keeps its nodes' state for `boltmq cluster -f SPEC --status`.
STATE_FILE = "cluster-state.json"


class NodeExited(Exception):
    """A node's process ended while the launcher wanted it running."""


@attrs.define
class NodeState:
    """What the launcher knows of one node (also what the state file holds)."""

    name: str
    role: str
    address: str
    status: str = "starting"  # starting, running, restarting, given up, stopped
    pid: int | None = None
    started_at: float | None = None  # epoch seconds of the current run
    restarts: int = 0
    last_exit: str | None = None


class RunningCluster:
    """A cluster started by `launch`: its nodes' addresses and states, and test controls."""

    def __init__(
        self, spec: ClusterSpec, *, follow: bool = False, restart_rules: RestartRules
    ) -> None:
        self.spec = spec
        self.follow = follow
        self.restart_rules = restart_rules
        self.states = {
            node.name: NodeState(node.name, node.role, f"127.0.0.1:{node.port}")
            for node in spec.nodes
        }
        self._processes: dict[str, trio.Process] = {}
        self._in_process: dict[str, Registry | Broker | Controller] = {}

    @property
    def namesrv_addr(self) -> str:
        """Every registry, ``;``-separated: give it to clients."""
        return self.spec.namesrv_addr

    def address(self, name: str) -> str:
        """``host:port`` of node ``name``."""
        return self.states[self.spec.node(name).name].address

    def pid(self, name: str) -> int | None:
        """The process id of node ``name``: None while it is down; the launcher's own for a
        node that runs in-process."""
        return self.states[self.spec.node(name).name].pid

    def kill(self, name: str) -> None:
        """SIGKILL node ``name``'s process, as a crash would (its supervisor restarts it)."""
        self._signal(name, signal.SIGKILL)

    def restart(self, name: str) -> None:
        """Stop node ``name`` cleanly (SIGTERM); its supervisor starts it again."""
        self._signal(name, signal.SIGTERM)

    def _signal(self, name: str, signum: signal.Signals) -> None:
        node = self.spec.node(name)
        process = self._processes.get(node.name)
        if process is None or process.returncode is not None:
            raise RuntimeError(f"node {node.name} has no running process")
        process.send_signal(signum)

    def _changed(
        self, state: NodeState, status: str, detail: str = "", *, level: int | None = logging.INFO
    ) -> None:
        """Record ``state``'s new status and, unless ``level`` is None, say it in one line."""
        state.status = status
        if level is not None:
            line = f"node {state.name} ({state.role} {state.address}) {status}"
            log.log(level, "%s%s", line, f": {detail}" if detail else "")
        self._write_state()

    def _write_state(self) -> None:
        path = self.spec.data_dir / STATE_FILE
        document = {
            "pid": os.getpid(),
            "spec": str(self.spec.path) if self.spec.path else None,
            "nodes": [attrs.asdict(state) for state in self.states.values()],
        }
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            save_json_config(path, json.dumps(document, indent=1).encode())
        except OSError as exc:
            log.warning("could not write %s: %s", path, exc)


@attrs.frozen
class RestartRules:
    """How a node that dies is restarted: backoff from ``backoff_initial`` doubling up to
    ``backoff_max`` seconds; more than ``intensity`` restarts in ``period`` s gives it up."""

    intensity: int = NODE_RESTART_INTENSITY
    period: float = NODE_RESTART_PERIOD
    backoff_initial: float = 0.5
    backoff_max: float = 30.0


def kill_left_over(cluster: RunningCluster) -> list[str]:
    """SIGKILL every node process still running (after the launcher was interrupted before
    its orderly stop finished: the nodes run in sessions of their own); the names killed."""
    killed = []
    for name, process in cluster._processes.items():
        if process.returncode is None and process.poll() is None:
            process.kill()
            killed.append(name)
    return killed
