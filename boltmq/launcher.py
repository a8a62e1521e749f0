"""Clusters in one program: `embedded` (a registry and a broker in this process), `launch`
(a spec's whole cluster, a process per node: docs/launcher.md) and the pieces the `boltmq`
commands start their servers with.

    async with embedded() as cluster:      # ephemeral loopback ports, temporary data
        print(cluster.registry_address)
"""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from actors.broker.broker import Broker
from actors.broker.config import BrokerConfig, load_broker_config
from actors.registry import Registry, RegistryConfig
from boltmq.spec import BROKER, REGISTRY, ClusterSpec, NodeSpec, load_spec
from protocol.bodies import KVTable
from protocol.client import RemotingClient
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
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

#: Seconds a node may take to say it is ready after its process starts.
NODE_START_TIMEOUT = 60.0
#: Seconds every slave gets, once all nodes are ready, to connect to its master's HA port.
SLAVE_LINK_TIMEOUT = 30.0
#: Seconds a node gets to stop cleanly (SIGTERM) before it is killed.
NODE_STOP_TIMEOUT = 20.0
#: Per node: more than this many restarts within `NODE_RESTART_PERIOD` seconds gives it up.
NODE_RESTART_INTENSITY = 5
NODE_RESTART_PERIOD = 60.0
#: Where the launcher keeps its nodes' state for `boltmq cluster -f SPEC --status`.
STATE_FILE = "cluster-state.json"
#: Held (flock) by the launcher of a data directory for its whole life; holds its pid.
LOCK_FILE = "launcher.lock"

#: The line each kind of node logs once it serves, and the port it names: the node itself
#: says it is ready (a TCP connect could reach another process on its port). The lines are
#: the registry's (actors/registry/service.py) and the broker's (actors/broker/broker.py).
READY_LINES = {
    REGISTRY: re.compile(rb"registry ready: tcp port (\d+)"),
    BROKER: re.compile(rb"broker \S+ \(.*\) of cluster \S+ ready on [^\s,;]*:(\d+)"),
}


class NodeExited(Exception):
    """A node's process ended while the launcher wanted it running."""


class LaunchRefused(Exception):
    """A cluster that must not start: its data directory is another launcher's, or a port a
    node binds is taken. Raised before any node starts; the message is one line."""


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


@asynccontextmanager
async def launch(
    spec: ClusterSpec | ClusterClaim | str | Path,
    *,
    follow: bool = False,
    restart_rules: RestartRules | None = None,
) -> AsyncIterator[RunningCluster]:
    """Start every node of ``spec`` (a `ClusterSpec`, a spec file, or a `ClusterClaim` the
    caller holds) in order, registries then masters then slaves, each once it says it is
    ready; wait until every slave is linked to its master; yield the running cluster; stop
    the nodes in reverse order at the end.

    Raises `LaunchRefused` before anything starts when another launcher holds the data
    directory or a port a node binds is taken (see `claim`). A node that dies is restarted
    on the same config and store with backoff; one that keeps dying is given up while the
    others run."""
    if isinstance(spec, ClusterClaim):
        async with _launch(spec.spec, follow, restart_rules) as cluster:
            yield cluster
        return
    with claim(spec) as claimed:
        async with _launch(claimed.spec, follow, restart_rules) as cluster:
            yield cluster


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


@asynccontextmanager
async def _launch(
    spec: ClusterSpec, follow: bool, restart_rules: RestartRules | None
) -> AsyncIterator[RunningCluster]:
    with _launcher_lines(spec):
        cluster = RunningCluster(spec, follow=follow, restart_rules=restart_rules or RestartRules())
        for node in spec.nodes:
            node.data_dir.mkdir(parents=True, exist_ok=True)
            node.log_file.parent.mkdir(parents=True, exist_ok=True)
        supervisor = Supervisor(
            "cluster", [_node_tree(cluster, node) for node in spec.nodes],
            intensity=len(spec.nodes),
        )  # fmt: skip
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run)
            try:
                # Inside: a Ctrl-C while the slaves link up still stops the nodes in order.
                await _report_up(cluster)
                yield cluster
            finally:
                with trio.CancelScope(shield=True):
                    await supervisor.aclose()
                nursery.cancel_scope.cancel()


async def _report_up(cluster: RunningCluster) -> None:
    """Say "cluster up" once every node is ready and every slave is linked to its master (a
    first send to a SYNC_MASTER then meets no SLAVE_NOT_AVAILABLE); else say what is not."""
    spec = cluster.spec
    given_up = [name for name, state in cluster.states.items() if state.status == "given up"]
    missing = await _wait_for_slaves(cluster)
    if given_up or missing:
        log.error(
            "cluster of %d nodes started incomplete: %s; registries: %s", len(spec.nodes),
            "; ".join([*(f"node {name} given up" for name in given_up), *missing]),
            spec.namesrv_addr,
        )  # fmt: skip
        return
    log.info("cluster of %d nodes up; registries: %s", len(spec.nodes), spec.namesrv_addr)


async def _wait_for_slaves(cluster: RunningCluster) -> list[str]:
    """Wait until each running master counts its running slaves among its HA connections
    (haConnectionCount in its runtime info), `SLAVE_LINK_TIMEOUT` seconds in all; what is
    still missing then, one phrase per master."""
    groups: dict[str, list[NodeSpec]] = collections.defaultdict(list)
    for node in cluster.spec.brokers:
        if cluster.states[node.name].status == "running":
            groups[node.broker_name].append(node)
    missing = []
    deadline = trio.current_time() + SLAVE_LINK_TIMEOUT
    async with RemotingClient() as client:
        for nodes in groups.values():
            masters = [node for node in nodes if node.rank == 1]
            slaves = [node for node in nodes if node.rank == 2]
            if not masters or not slaves:
                continue
            master = masters[0]
            count = await _ha_connections(client, cluster.address(master.name), len(slaves),
                                          deadline)  # fmt: skip
            if count < len(slaves):
                names = ", ".join(slave.name for slave in slaves)
                missing.append(
                    f"{'slave' if len(slaves) == 1 else 'one of the slaves'} {names} not "
                    f"linked to master {master.name} within {SLAVE_LINK_TIMEOUT:g} s "
                    f"(haConnectionCount {count} of {len(slaves)}; see {slaves[0].log_file})"
                )
    return missing


async def _ha_connections(
    client: RemotingClient, address: str, wanted: int, deadline: float
) -> int:
    """The master's haConnectionCount, asked every 0.1 s until it reaches ``wanted`` or the
    deadline passes (then the last count seen)."""
    count = 0
    request = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
    with trio.move_on_at(deadline):
        while True:
            try:
                with trio.move_on_after(3.0):
                    answer = await client.invoke(address, request, 3.0)
                    if answer.code == ResponseCode.SUCCESS:
                        table = KVTable.from_json(answer.body or b"{}").table
                        count = int(table.get("haConnectionCount", "0"))
            except (OSError, RemotingError):
                pass  # a master restarting: ask again until the deadline
            if count >= wanted:
                break
            await trio.sleep(0.1)
    return count


@contextlib.contextmanager
def _launcher_lines(spec: ClusterSpec) -> Iterator[None]:
    """Quiet the supervisor's own lines about the launcher's supervisors while it runs: the
    launcher says each node event in one line, and a restart's traceback would bury it."""
    names = {"cluster", *(f"node {node.name}" for node in spec.nodes)}

    def keep(record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not any(isinstance(arg, str) and arg in names for arg in args[:2])

    supervisor_log = logging.getLogger("boltmq.supervisor")
    supervisor_log.addFilter(keep)
    try:
        yield
    finally:
        supervisor_log.removeFilter(keep)


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
            error = exc.cause
            if isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
                error = error.exceptions[0]  # an in-process node's failure, in its nursery's
            cause = str(error) if isinstance(error, NodeExited) else repr(error)
            if started:
                cause += f" (more than {rules.intensity} restarts in {rules.period:g} s)"
            cluster._changed(state, "given up", f"{cause}; the other nodes keep running",
                             level=logging.ERROR)  # fmt: skip
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
        self.stopping = False
        #: When it ended after being ready, for as long as its supervisor counts restarts.
        self.exits: collections.deque[float] = collections.deque()
        self.ready = False
        self.ready_or_ended = trio.Event()
        #: Why it failed to start, mostly: the message of its last ERROR or CRITICAL line,
        #: else its last line that starts a line of its own (a traceback's exception line).
        self.last_error = ""
        self.last_line = ""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the process, report ready once it says it is, and raise `NodeExited` when
        it ends."""
        node, state = self.node, self.state
        if self.runs:
            state.restarts += 1
            self.cluster._changed(state, "restarting", level=None)  # said when it ended
        self.runs += 1
        self.ready, self.ready_or_ended = False, trio.Event()
        self.last_error = self.last_line = ""
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
                try:
                    await self._wait_until_ready(process)
                except NodeExited as exc:
                    if self.runs == 1 or self.stopping:
                        raise  # a first start that fails gives it up, and that line says why
                    raise self._ended(str(exc).removeprefix(f"node {node.name} ")) from None
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
        if self.stopping:
            return
        raise self._ended(state.last_exit)

    def _ended(self, why: str) -> NodeExited:
        """Say in one line that the node ended, why, and whether it is restarted; the error
        its supervisor then acts on."""
        _say_ended(self.cluster, self.state, self.exits, why)
        return NodeExited(f"node {self.node.name} {why}")

    async def stop(self) -> None:
        """SIGTERM (a clean stop: unregister, flush, persist), SIGKILL after the deadline."""
        self.stopping = True
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

    async def _wait_until_ready(self, process: trio.Process) -> None:
        node = self.node
        with trio.move_on_after(NODE_START_TIMEOUT):
            await self.ready_or_ended.wait()
        if self.ready:
            return
        if not self.ready_or_ended.is_set():
            raise NodeExited(
                f"node {node.name} did not say it was ready within {NODE_START_TIMEOUT:g} s, "
                f"so it was stopped (see {node.log_file})"
            )
        await process.wait()
        self.state.last_exit = _describe_exit(process.returncode)
        last = self.last_error or self.last_line
        said = f": {last}" if last else ""
        raise NodeExited(
            f"node {node.name} {self.state.last_exit} before it was ready{said} "
            f"(see {node.log_file})"
        )

    async def _copy_log(self, stdout: trio.abc.ReceiveStream) -> None:
        """Copy the node's output to its log file (and, with follow, to stdout behind its
        name), watching for its ready line."""
        prefix = f"{self.node.name} | ".encode()
        ready_line = READY_LINES[self.node.kind]
        with self.node.log_file.open("ab") as log_file:
            pending = b""
            async for chunk in stdout:
                log_file.write(chunk)
                log_file.flush()
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if not self.ready and self._says_ready(ready_line, line):
                        self.ready = True
                        self.ready_or_ended.set()
                    elif not self.ready:
                        self._note(line)
                    if self.cluster.follow:
                        sys.stdout.buffer.write(prefix + line + b"\n")
                if self.cluster.follow:
                    sys.stdout.buffer.flush()
            if self.cluster.follow and pending:  # a last line without its newline
                sys.stdout.buffer.write(prefix + pending + b"\n")
                sys.stdout.buffer.flush()
        self.ready_or_ended.set()

    def _note(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").rstrip()[:300]
        if " ERROR " in text or " CRITICAL " in text:
            # The message, after "time level logger: " (the format of boltmq.cli's logging).
            self.last_error = text.split(": ", 1)[-1]
        elif text and not text[0].isspace():
            self.last_line = text

    def _says_ready(self, ready_line: re.Pattern[bytes], line: bytes) -> bool:
        match = ready_line.search(line)
        return match is not None and int(match.group(1)) == self.node.port

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
        self.stopping = False
        #: When it ended after being ready, for as long as its supervisor counts restarts.
        self.exits: collections.deque[float] = collections.deque()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the registry or broker until stopped."""
        node, state = self.node, self.state
        if self.runs:
            state.restarts += 1
            self.cluster._changed(state, "restarting", level=None)  # said when it ended
        self.runs += 1
        started = False
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
                started = True
        except Exception as exc:
            if started:  # a first start that fails gives it up, and that line says why
                error = exc.exceptions[0] if isinstance(exc, ExceptionGroup) and len(
                    exc.exceptions) == 1 else exc  # fmt: skip
                _say_ended(self.cluster, state, self.exits, f"crashed: {error!r}")
            raise
        finally:
            state.pid = None
        if started and not self.stopping:
            _say_ended(self.cluster, state, self.exits, "returned")

    async def stop(self) -> None:
        """Stop the broker's supervisor in order (a registry stops when cancelled)."""
        self.stopping = True
        if isinstance(self.server, Broker) and self.server.supervisor is not None:
            await self.server.supervisor.aclose()


def _say_ended(
    cluster: RunningCluster, state: NodeState, exits: collections.deque[float], why: str
) -> None:
    """One line for a node that ended after it was ready: why, and that it is restarted; or
    nothing when it is given up (the "given up" line then says it). ``exits`` are its recent
    restarts, counted as its `Supervisor` counts them, so the line tells what it will do."""
    rules = cluster.restart_rules
    now = trio.current_time()
    while exits and exits[0] <= now - rules.period:
        exits.popleft()
    if len(exits) + 1 > rules.intensity:
        cluster._changed(state, "exited", level=None)
        return
    exits.append(now)
    # One line for the whole event: its supervisor's own lines are quieted.
    cluster._changed(state, "exited", f"{why}; restarting it", level=logging.WARNING)


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "ended"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"
