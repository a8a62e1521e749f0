"""Clusters in one program: `embedded` (a registry and a broker in this process) and the
pieces the `boltmq` commands start their servers with.

    async with embedded() as cluster:      # ephemeral loopback ports, temporary data
        print(cluster.registry_address)
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from actors.broker.broker import Broker
from actors.broker.config import BrokerConfig, load_broker_config
from actors.registry import Registry, RegistryConfig
from boltmq.spec import REGISTRY, ClusterSpec, NodeSpec, load_spec
from supervisors.config import format_properties, load_config
from supervisors.config_file import save_json_config
from supervisors.supervisor import ChildSpec, RestartPolicy, Supervisor, SupervisorEscalation

log = logging.getLogger("boltmq.launcher")

#: Where `boltmq cluster` keeps its data unless told otherwise.
DEFAULT_HOME = Path("~/boltmq")


@attrs.define
class EmbeddedCluster:
    """A registry and a broker running in this process (see `embedded`)."""

    registry: Registry
    broker: Broker
    home: Path

    @property
    def registry_address(self) -> str:
        """``host:port`` of the registry: give it to clients as the name server."""
        return self.registry.address

    @property
    def broker_address(self) -> str:
        """``host:port`` of the broker."""
        return self.broker.address


@asynccontextmanager
async def embedded(
    home: str | Path | None = None, *, store: str = "file", **broker_settings: object
) -> AsyncIterator[EmbeddedCluster]:
    """A registry and a broker on ephemeral loopback ports for the duration of the block.

    Data goes under ``home`` (kept) or a temporary directory (removed at the end).
    ``store="memory"`` runs the broker on the in-memory store (storeType=memory): no file of
    the broker's at all, nothing kept after the block, no replication.
    ``broker_settings`` are `BrokerConfig` fields (``flush_disk_type=...``, ``broker_name=...``);
    the ``tls_server_*`` ones apply to the registry's listener too.
    """
    temporary = home is None
    root = Path(tempfile.mkdtemp(prefix="boltmq-")) if home is None else Path(home).expanduser()
    try:
        registry = Registry(
            RegistryConfig(
                listen_port=0,
                bind_address="127.0.0.1",
                kv_config_path=str(root / "namesrv" / "kvConfig.json"),
                **{k: v for k, v in broker_settings.items() if k.startswith("tls_server_")},  # type: ignore[arg-type]
            )
        )
        await registry.load()
        async with trio.open_nursery() as nursery:
            await nursery.start(registry.run)
            settings: dict[str, object] = {
                "listen_port": 0,
                "bind_address": "127.0.0.1",
                "fast_port_enable": False,
                "store_path_root_dir": str(root / "store"),
                "namesrv_addr": registry.address,
                # In a test process an idle broker should not fault 512 MiB of page cache in.
                "commit_log_idle_prefault_mb": 0,
                "store_type": store,
            }
            settings.update(broker_settings)
            broker = Broker(BrokerConfig(**settings))  # type: ignore[arg-type]
            await nursery.start(broker.run)
            try:
                yield EmbeddedCluster(registry, broker, root)
            finally:
                assert broker.supervisor is not None
                with trio.CancelScope(shield=True):
                    await broker.supervisor.aclose()
                nursery.cancel_scope.cancel()
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)


def broker_child(broker: Broker) -> ChildSpec:
    """A supervisor child that runs ``broker`` and, on stop, shuts it down in order."""

    async def stop() -> None:
        if broker.supervisor is not None:
            await broker.supervisor.aclose()

    return ChildSpec.function("broker", broker.run, aclose=stop, shutdown_timeout=15.0)


# -- the cluster launcher ------------------------------------------------------------------------

#: Seconds a node may take to answer on its port after its process starts.
NODE_START_TIMEOUT = 60.0
#: Seconds a node gets to stop cleanly (SIGTERM) before it is killed.
NODE_STOP_TIMEOUT = 20.0
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
        self._in_process: dict[str, Registry | Broker] = {}

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

    def _changed(self, state: NodeState, status: str, detail: str = "") -> None:
        state.status = status
        line = f"node {state.name} ({state.role} {state.address}) {status}"
        log.log(logging.ERROR if status == "given up" else logging.INFO,
                "%s%s", line, f": {detail}" if detail else "")  # fmt: skip
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


@asynccontextmanager
async def launch(
    spec: ClusterSpec | str | Path,
    *,
    follow: bool = False,
    restart_rules: RestartRules | None = None,
) -> AsyncIterator[RunningCluster]:
    """Start every node of ``spec`` (a `ClusterSpec` or a spec file) in order, registries then
    masters then slaves, each once it answers on its port; yield the running cluster; stop
    the nodes in reverse order at the end. A node that dies is restarted on the same config
    and store with backoff; one that keeps dying is given up while the others keep running."""
    if not isinstance(spec, ClusterSpec):
        spec = load_spec(spec)
    cluster = RunningCluster(spec, follow=follow, restart_rules=restart_rules or RestartRules())
    for node in spec.nodes:
        node.data_dir.mkdir(parents=True, exist_ok=True)
        node.log_file.parent.mkdir(parents=True, exist_ok=True)
    supervisor = Supervisor(
        "cluster", [_node_tree(cluster, node) for node in spec.nodes], intensity=len(spec.nodes)
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        log.info("cluster of %d nodes up; registries: %s", len(spec.nodes), spec.namesrv_addr)
        try:
            yield cluster
        finally:
            with trio.CancelScope(shield=True):
                await supervisor.aclose()
            nursery.cancel_scope.cancel()


def kill_left_over(cluster: RunningCluster) -> list[str]:
    """SIGKILL every node process still running (after the launcher was interrupted before
    its orderly stop finished: the nodes run in sessions of their own); the names killed."""
    killed = []
    for name, process in cluster._processes.items():
        if process.returncode is None and process.poll() is None:
            process.kill()
            killed.append(name)
    return killed


def read_state(spec: ClusterSpec) -> dict[str, Any]:
    """The state file a launcher of ``spec`` keeps; FileNotFoundError when none ran."""
    return dict(json.loads((spec.data_dir / STATE_FILE).read_bytes()))


def _node_tree(cluster: RunningCluster, node: NodeSpec) -> ChildSpec:
    """The launcher's child for one node: a supervisor of its own, so that a node that keeps
    dying is given up alone (its escalation stops here) while the rest keep running."""
    runner = _InProcessNode(cluster, node) if node.in_process else _ProcessNode(cluster, node)
    rules = cluster.restart_rules
    supervisor = Supervisor(
        f"node {node.name}",
        [ChildSpec.function(node.name, runner.run, aclose=runner.stop,
                            shutdown_timeout=NODE_STOP_TIMEOUT + 5)],
        intensity=rules.intensity, period=rules.period,
        backoff_initial=rules.backoff_initial, backoff_max=rules.backoff_max,
    )  # fmt: skip
    state = cluster.states[node.name]

    async def run(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        started = False

        def ready(value: object = None) -> None:
            nonlocal started
            started = True
            task_status.started()

        status = types.SimpleNamespace(started=ready)
        try:
            await supervisor.run(task_status=status)
        except SupervisorEscalation as exc:
            cluster._changed(state, "given up", f"{exc.cause!r}; the other nodes keep running")
            if not started:
                task_status.started()
            return
        cluster._changed(state, "stopped")

    return ChildSpec.function(
        node.name, run, aclose=supervisor.aclose, restart=RestartPolicy.TEMPORARY,
        shutdown_timeout=NODE_STOP_TIMEOUT + 10,
    )  # fmt: skip


class _ProcessNode:
    """One node as an OS process: ``python -m boltmq.cli <kind> -c <node>.conf``."""

    def __init__(self, cluster: RunningCluster, node: NodeSpec) -> None:
        self.cluster = cluster
        self.node = node
        self.state = cluster.states[node.name]
        self.process: trio.Process | None = None
        self.runs = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the process, report ready once it answers on its port, and raise
        `NodeExited` when it ends."""
        node, state = self.node, self.state
        if self.runs:
            state.restarts += 1
            self.cluster._changed(state, "restarting")
        self.runs += 1
        conf = node.data_dir / f"{node.kind}.conf"
        conf.write_text(format_properties(dict(node.properties)), encoding="utf-8")
        command = [sys.executable, "-m", "boltmq.cli", node.kind, "-c", str(conf)]
        # A session of its own: a terminal's Ctrl-C reaches the launcher only, which then
        # stops the nodes in order.
        process = await trio.lowlevel.open_process(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        self.process = process
        self.cluster._processes[node.name] = process
        try:
            async with trio.open_nursery() as nursery:
                assert process.stdout is not None
                nursery.start_soon(self._copy_log, process.stdout)
                await self._wait_until_up(process)
                state.pid, state.started_at = process.pid, time.time()
                self.cluster._changed(state, "running", f"pid {process.pid}")
                task_status.started()
                code = await process.wait()
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The node's own failure, not the nursery's wrapper, is what its supervisor logs.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise
        finally:
            with trio.CancelScope(shield=True):
                await self._kill(process)
            state.pid = None
        state.last_exit = _describe_exit(code)
        self.cluster._changed(state, "exited", state.last_exit)
        raise NodeExited(f"node {node.name} {state.last_exit}")

    async def stop(self) -> None:
        """SIGTERM (a clean stop: unregister, flush, persist), SIGKILL after the deadline."""
        process = self.process
        if process is None or process.returncode is not None:
            return
        process.terminate()
        with trio.move_on_after(NODE_STOP_TIMEOUT):
            await process.wait()
            self.state.last_exit = _describe_exit(process.returncode)
            return
        log.error("node %s did not stop within %.0f s; killing it", self.node.name,
                  NODE_STOP_TIMEOUT)  # fmt: skip
        process.kill()
        await process.wait()

    async def _wait_until_up(self, process: trio.Process) -> None:
        port = self.node.port
        with trio.fail_after(NODE_START_TIMEOUT):
            while True:
                if process.returncode is not None or process.poll() is not None:
                    self.state.last_exit = _describe_exit(process.returncode)
                    raise NodeExited(
                        f"node {self.node.name} {_describe_exit(process.returncode)} before it "
                        f"answered on port {port} (see {self.node.log_file})"
                    )
                try:
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                except OSError:
                    await trio.sleep(0.05)
                    continue
                await stream.aclose()
                return

    async def _copy_log(self, stdout: trio.abc.ReceiveStream) -> None:
        prefix = f"{self.node.name} | ".encode()
        with self.node.log_file.open("ab") as log_file:
            pending = b""
            async for chunk in stdout:
                log_file.write(chunk)
                log_file.flush()
                if self.cluster.follow:
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        sys.stdout.buffer.write(prefix + line + b"\n")
                    sys.stdout.buffer.flush()
            if self.cluster.follow and pending:  # a last line without its newline
                sys.stdout.buffer.write(prefix + pending + b"\n")
                sys.stdout.buffer.flush()

    async def _kill(self, process: trio.Process) -> None:
        if process.returncode is None:
            process.kill()
            await process.wait()


class _InProcessNode:
    """One node as a task of the launcher (``inProcess = true``): for tests and notebooks."""

    def __init__(self, cluster: RunningCluster, node: NodeSpec) -> None:
        self.cluster = cluster
        self.node = node
        self.state = cluster.states[node.name]
        self.server: Registry | Broker | None = None
        self.runs = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the registry or broker until stopped."""
        node, state = self.node, self.state
        if self.runs:
            state.restarts += 1
            self.cluster._changed(state, "restarting")
        self.runs += 1
        properties: dict[str, object] = dict(node.properties)
        if node.kind == REGISTRY:
            registry = Registry(load_config(RegistryConfig, None, properties))
            await registry.load()
            self.server = registry
        else:
            self.server = Broker(load_broker_config(None, properties))
        self.cluster._in_process[node.name] = self.server
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.server.run)
                state.pid, state.started_at = os.getpid(), time.time()
                self.cluster._changed(state, "running", "in process")
                task_status.started()
        finally:
            state.pid = None

    async def stop(self) -> None:
        """Stop the broker's supervisor in order (a registry stops when cancelled)."""
        if isinstance(self.server, Broker) and self.server.supervisor is not None:
            await self.server.supervisor.aclose()


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "ended"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"
