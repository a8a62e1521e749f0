"""One node of a launched cluster: an OS process (`_ProcessNode`) or a task of the launcher
(`_InProcessNode`, ``inProcess = true``), each under a supervisor of its own (`node_tree`).
"""

from __future__ import annotations

import collections
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import types

import trio

from actors.broker.broker import Broker
from actors.broker.config import load_broker_config
from actors.controller import Controller, ControllerConfig
from actors.registry import Registry, RegistryConfig
from actors.registry.config import KEYS as REGISTRY_KEYS
from boltmq.launcher.proxy import ProxyHandle, run_proxy
from boltmq.launcher.state import NodeExited, NodeState, RunningCluster
from boltmq.spec import BROKER, CONTROLLER, PROXY, REGISTRY, NodeSpec
from proxy.config import load_config as load_proxy_config
from supervisors.config import format_properties, load_config
from supervisors.supervisor import ChildSpec, RestartPolicy, Supervisor, SupervisorEscalation

log = logging.getLogger("boltmq.launcher")

#: Seconds a node may take to say it is ready after its process starts.
NODE_START_TIMEOUT = 60.0


#: Seconds a node gets to stop cleanly (SIGTERM) before it is killed.
NODE_STOP_TIMEOUT = 20.0


#: The line each kind of node logs once it serves, and the port it names: the node itself
#: says it is ready (a TCP connect could reach another process on its port). The lines are
#: the registry's (actors/registry/service.py), the broker's (actors/broker/broker.py) and the
#: proxy's (boltmq/launcher/proxy.py, boltmq/cli/proxy.py).
READY_LINES = {
    REGISTRY: re.compile(rb"registry ready: tcp port (\d+)"),
    PROXY: re.compile(rb"proxy ready: gRPC port (\d+)"),
    BROKER: re.compile(rb"broker \S+ \(.*\) of cluster \S+ ready on [^\s,;]*:(\d+)"),
    CONTROLLER: re.compile(rb"controller ready: remoting [^\s,;]*:(\d+)"),
}


def node_tree(cluster: RunningCluster, node: NodeSpec) -> ChildSpec:
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
        command = [sys.executable, "-m", "boltmq.cli", *self._config_arguments()]
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

    def _config_arguments(self) -> list[str]:
        """The node's kind and its config file, written now: a properties file for registries
        and brokers, rmq-proxy.json for a proxy (as RocketMQ's own proxy takes it)."""
        node = self.node
        node.data_dir.mkdir(parents=True, exist_ok=True)
        if node.kind == PROXY:
            conf = node.data_dir / "rmq-proxy.json"
            conf.write_text(json.dumps(dict(node.properties), indent=2), encoding="utf-8")
            return [node.kind, "-pc", str(conf)]
        conf = node.data_dir / f"{node.kind}.conf"
        conf.write_text(format_properties(dict(node.properties)), encoding="utf-8")
        return [node.kind, "-c", str(conf)]

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
        self.server: Registry | Broker | Controller | ProxyHandle | None = None
        self.runs = 0
        self.stopping = False
        #: When it ended after being ready, for as long as its supervisor counts restarts.
        self.exits: collections.deque[float] = collections.deque()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the registry, controller, broker or proxy until stopped."""
        node, state = self.node, self.state
        if self.runs:
            state.restarts += 1
            self.cluster._changed(state, "restarting", level=None)  # said when it ended
        self.runs += 1
        started = False
        properties: dict[str, object] = dict(node.properties)
        if node.kind == PROXY:
            self.server = ProxyHandle(load_proxy_config(None, keyed=node.properties))
        elif node.kind == REGISTRY:
            registry_config = load_config(
                RegistryConfig, None, {k: v for k, v in properties.items() if k in REGISTRY_KEYS}
            )
            controller_config = None
            if registry_config.enable_controller_in_namesrv:
                # The embedded controller's keys, from the same node table.
                controller_config = ControllerConfig.from_properties(node.properties)
            registry = Registry(registry_config, controller_config)
            await registry.load()
            self.server = registry
        elif node.kind == CONTROLLER:
            self.server = Controller(load_config(ControllerConfig, None, properties))
        else:
            self.server = Broker(load_broker_config(None, properties))
        if not isinstance(self.server, ProxyHandle):
            self.cluster._in_process[node.name] = self.server
        try:
            async with trio.open_nursery() as nursery:
                if isinstance(self.server, ProxyHandle):
                    await nursery.start(run_proxy, self.server)
                else:
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
