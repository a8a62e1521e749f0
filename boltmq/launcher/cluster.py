"""`launch`: a spec's whole cluster, a process per node under one supervision tree, up once
every node says it is ready and every slave is linked to its master (docs/launcher.md).
"""

from __future__ import annotations

import collections
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from boltmq.launcher.claim import ClusterClaim, claim
from boltmq.launcher.nodes import node_tree
from boltmq.launcher.state import RestartRules, RunningCluster
from boltmq.spec import ClusterSpec, NodeSpec
from protocol.bodies import KVTable
from protocol.client import RemotingClient
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from supervisors.supervisor import Supervisor

log = logging.getLogger("boltmq.launcher")

#: Seconds every slave gets, once all nodes are ready, to connect to its master's HA port.
SLAVE_LINK_TIMEOUT = 30.0


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
            "cluster", [node_tree(cluster, node) for node in spec.nodes],
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
