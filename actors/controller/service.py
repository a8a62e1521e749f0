"""`Controller`: the replicas state, the liveness table, the handlers and the leader's scan.

Standalone it serves its own remoting port (`boltmq controller`); embedded it lends its
handlers to another dispatcher (the registry's, with ``enableControllerInNamesrv=true``) and
runs only its journal and scan::

    async with open_controller(ControllerConfig(listen_port=0)) as controller:
        print(controller.address)

The leader scans every scanNotActiveBrokerInterval: a group whose master has not beaten
within its heartbeatTimeoutMills gets a new master from the live members of its SyncStateSet,
and each live broker of the group gets NOTIFY_BROKER_ROLE_CHANGED (oneway).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial

import attrs
import trio

from actors.controller.config import ControllerConfig
from actors.controller.heartbeat import DEFAULT_HEARTBEAT_TIMEOUT, BrokerLiveInfo, HeartbeatTable
from actors.controller.journal import Journal, LocalJournal
from actors.controller.replicas import ElectMasterEvent, Liveness, Result
from protocol.client import RemotingClient
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.connection import Dispatcher
from protocol.headers import NotifyBrokerRoleChangedRequestHeader, encode_header
from protocol.server import RemotingServer, ServerStatistics
from supervisors.metrics_http import (
    MetricsExporterType,
    hold_listeners,
    open_metrics_listeners,
    serve_metrics,
)
from supervisors.supervisor import ChildSpec, Supervisor

log = logging.getLogger("boltmq.controller")

__all__ = ["Controller", "ControllerStatistics", "ElectionRecord", "open_controller"]

#: A single controller's state file, under controllerStorePath.
STATE_FILE = "replicas.json"

#: Seconds a NOTIFY_BROKER_ROLE_CHANGED may take to go out before it is given up (the
#: brokers' own GET_REPLICA_INFO poll catches a notice that was lost).
NOTIFY_TIMEOUT = 3.0


@attrs.frozen
class ElectionRecord:
    """One committed election: who, why, and the offsets the operator needs to judge loss."""

    cluster_name: str
    broker_name: str
    trigger: str  # "scan" (master went silent), "broker" (a broker asked), "admin"
    old_master_broker_id: int | None
    new_master_broker_id: int | None
    master_epoch: int
    old_master_max_offset: int | None
    new_master_max_offset: int | None

    @property
    def may_lose(self) -> int | None:
        """Bytes the old master had that the new one did not report (an ASYNC master's loss)."""
        if self.old_master_max_offset is None or self.new_master_max_offset is None:
            return None
        return max(0, self.old_master_max_offset - self.new_master_max_offset)


@attrs.frozen
class ControllerStatistics:
    """The controller's counters at one moment."""

    is_leader: bool
    leader_id: str | None
    leader_address: str | None
    broker_groups: int
    alive_brokers: int
    heartbeats: int
    #: (cluster, brokerName, trigger) -> masters elected by this controller.
    elections: dict[tuple[str, str, str], int]
    #: brokerName -> size of its SyncStateSet.
    sync_state_set_sizes: dict[str, int]
    server: ServerStatistics | None


class _LivenessAt(Liveness):
    """The heartbeat table seen at one instant (what `ReplicaTable` operations ask)."""

    def __init__(self, table: HeartbeatTable, now: float) -> None:
        self._table, self._now = table, now

    def is_alive(self, cluster_name: str, broker_name: str, broker_id: int) -> bool:
        return self._table.is_alive(cluster_name, broker_name, broker_id, self._now)

    def get(self, cluster_name: str, broker_name: str, broker_id: int) -> BrokerLiveInfo | None:
        return self._table.get(cluster_name, broker_name, broker_id)


class Controller:
    """RocketMQ 5's controller: broker ids, masters, epochs and SyncStateSets, and elections."""

    def __init__(self, config: ControllerConfig | None = None, journal: Journal | None = None):
        self.config = config or ControllerConfig()
        if journal is None:
            journal = self._make_journal()
        self.journal: Journal = journal
        self.heartbeats = HeartbeatTable()
        self.dispatcher = Dispatcher()
        self.server: RemotingServer | None = None
        self.port: int | None = None
        #: The bound Prometheus port once running with metricsExporterType=PROM.
        self.metrics_port: int | None = None
        #: Set by `run` (own port) or by the host that embeds it.
        self._address: str | None = None
        self.client: RemotingClient | None = None
        self.elections: Counter[tuple[str, str, str]] = Counter()
        #: Every election committed here, oldest first (the last 100).
        self.election_log: list[ElectionRecord] = []
        self._write_lock = trio.Lock()
        self._nursery: trio.Nursery | None = None
        self._running = False
        self._started = 0.0
        self._was_leader: bool | None = None
        self._election_listeners: list[Callable[[ElectionRecord], None]] = []
        from actors.controller.handlers import register_handlers  # handlers import this module

        register_handlers(self.dispatcher, self)

    def _make_journal(self) -> Journal:
        if not self.config.controller_dleger_peers:
            store = self.config.controller_store_path
            path = os.path.join(os.path.expanduser(store), STATE_FILE) if store else None
            return LocalJournal(path)
        from actors.controller.raft import RaftJournal  # pysyncobj only when peers are set

        return RaftJournal(self.config)

    # ------------------------------------------------------------------ addresses

    @property
    def host(self) -> str:
        """A host a local client can dial (the bind address, loopback for the wildcard)."""
        bind = self.config.bind_address
        return "127.0.0.1" if bind in ("", "0.0.0.0", "::") else bind

    @property
    def address(self) -> str:
        """This controller's remoting ``host:port`` (its own port, or its host's)."""
        if self._address is None:
            raise RuntimeError("the controller has no address before it serves")
        return self._address

    def register_on(self, dispatcher: Dispatcher) -> None:
        """Serve the controller's request codes on another dispatcher too (embedding)."""
        for code in self.dispatcher.codes():
            found = self.dispatcher.lookup(code)
            assert found is not None
            dispatcher.register(code, found[1])

    def add_election_listener(self, listener: Callable[[ElectionRecord], None]) -> None:
        """Call ``listener`` with every election this controller commits (CLI progress)."""
        self._election_listeners.append(listener)

    # ------------------------------------------------------------------ running

    async def run(
        self,
        *,
        address: str | None = None,
        task_status: trio.TaskStatus[Controller] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve until cancelled: on its own listenPort, or (``address`` given, embedded) on
        the host's port whose address that is, with the handlers lent by `register_on`."""
        try:
            await self._serve(address, task_status)
        finally:
            self._running = False
            self._nursery = None
            self.client = None

    async def _serve(self, address: str | None, task_status: trio.TaskStatus[Controller]) -> None:
        async with RemotingClient() as client, trio.open_nursery() as nursery:
            self.client = client
            self._nursery = nursery
            standalone = address is None
            if address is None:
                self.server = RemotingServer(self.dispatcher)
                bind = self.config.bind_address or None
                self.port = await nursery.start(
                    self.server.serve_tcp, self.config.listen_port, bind
                )
                address = f"{self.host}:{self.port}"
            self._address = address
            # Embedded, the host's /metrics carries the controller's series.
            if standalone and self.config.metrics_exporter_type == MetricsExporterType.PROM:
                await self._start_metrics(nursery)
            await nursery.start(partial(self.journal.run, address))
            self._running = True
            self._started = self.now()
            nursery.start_soon(self._scan_loop)
            nursery.start_soon(self._watch_leader)
            peers = self.journal.peers_text()
            log.info(
                "controller ready: remoting %s%s, %s, store %s",
                address,
                f", metrics at :{self.metrics_port}/metrics" if self.metrics_port else "",
                f"Raft peers {peers} (self {self.config.controller_dleger_self_id})"
                if peers
                else "single controller (no Raft)",
                self.config.controller_store_path or "in memory",
            )
            task_status.started(self)

    async def _start_metrics(self, nursery: trio.Nursery) -> None:
        from actors.controller.metrics import ControllerMetricsCollector  # it imports this

        config = self.config
        listeners = await open_metrics_listeners(
            config.metrics_prom_exporter_port, config.metrics_prom_exporter_host
        )
        self.metrics_port = listeners[0].socket.getsockname()[1]
        collector = ControllerMetricsCollector(self.address, self.statistics)
        # Its own supervisor: a crashed responder restarts alone, on the same port.
        supervisor = Supervisor(
            "controller metrics",
            [
                ChildSpec.function("metrics-port", partial(hold_listeners, listeners)),
                ChildSpec.function("metrics", partial(serve_metrics, listeners, collector)),
            ],
        )
        await nursery.start(supervisor.run)

    def now(self) -> float:
        """The controller's clock (trio's, so tests can mock it), in seconds."""
        return trio.current_time()

    def liveness(self) -> Liveness:
        """The heartbeat table at this instant."""
        return _LivenessAt(self.heartbeats, self.now())

    # ------------------------------------------------------------------ requests

    def check_running(self) -> None:
        """Refuse requests before the journal runs (an embedding host may listen earlier)."""
        if not self._running:
            raise RemotingError(
                ResponseCode.SYSTEM_BUSY, "the controller is starting; retry in a moment"
            )

    def check_leader(self) -> None:
        """Raise CONTROLLER_NOT_LEADER (naming the leader's address) on a follower."""
        self.check_running()
        if not self.journal.is_leader():
            leader = self.journal.leader_address()
            raise RemotingError(
                ResponseCode.CONTROLLER_NOT_LEADER,
                f"this controller is not the leader; the leader is {leader}"
                if leader
                else "this controller is not the leader and no leader is elected yet; retry",
            )

    def read(self, operation: Callable[[Liveness], Result]) -> Result:
        """Run a read-only operation on the state (any controller may answer reads)."""
        self.check_running()
        liveness = self.liveness()
        with self.journal.lock:
            return operation(liveness)

    async def write(self, operation: Callable[[Liveness], Result], trigger: str = "") -> Result:
        """Run an operation on the leader and commit its events; one write at a time, so
        each decides on the state every earlier write left."""
        self.check_leader()
        async with self._write_lock:
            self.check_leader()
            liveness = self.liveness()
            with self.journal.lock:
                result = operation(liveness)
                before = {
                    e.broker_name: self._master_snapshot(e.broker_name)
                    for e in result.events
                    if isinstance(e, ElectMasterEvent)
                }
            if result.events:
                await self.journal.commit(result.events)
            for name, (cluster, old_master) in before.items():
                self._elected(cluster, name, old_master, trigger or "broker")
        return result

    def _master_snapshot(self, broker_name: str) -> tuple[str, int | None]:
        group = self.journal.table.groups[broker_name]
        return group.cluster_name, group.master_broker_id

    def log_broker_alive(self, info: BrokerLiveInfo) -> None:
        """A progress line for a broker's first heartbeat (or its first after going silent)."""
        log.info(
            "broker %s/%s id %d at %s beats (epoch %d, max offset %d, timeout %.1f s)",
            info.cluster_name, info.broker_name, info.broker_id, info.broker_addr, info.epoch,
            info.max_offset, info.timeout,
        )  # fmt: skip

    # ------------------------------------------------------------------ elections

    def _elected(
        self, cluster: str, broker_name: str, old_master: int | None, trigger: str
    ) -> None:
        with self.journal.lock:
            group = self.journal.table.groups.get(broker_name)
            if group is None:
                return
            new_master, epoch = group.master_broker_id, group.master_epoch
            members = dict(group.addresses)
            sync_state_set_body = group.sync_state_set_body()
            sync_state_set_epoch = group.sync_state_set_epoch
        old = (
            None
            if old_master is None
            else self.heartbeats.last_known(cluster, broker_name, old_master)
        )
        new = (
            None
            if new_master is None
            else self.heartbeats.last_known(cluster, broker_name, new_master)
        )
        record = ElectionRecord(
            cluster_name=cluster,
            broker_name=broker_name,
            trigger=trigger,
            old_master_broker_id=old_master,
            new_master_broker_id=new_master,
            master_epoch=epoch,
            old_master_max_offset=None if old is None else old.max_offset,
            new_master_max_offset=None if new is None else new.max_offset,
        )
        if new_master is not None:  # a group left without a master is no election
            self.elections[(cluster, broker_name, trigger)] += 1
        self.election_log = [*self.election_log[-99:], record]
        if new_master is None:
            log.warning(
                "no master for %s/%s: master %s went silent and no live broker of its "
                "SyncStateSet can take over (epoch stays %d); waiting for one to return",
                cluster, broker_name, old_master, epoch,
            )  # fmt: skip
        else:
            log.info(
                "elected broker %d (%s) master of %s/%s at epoch %d (%s; old master %s at "
                "offset %s, new master at offset %s%s)",
                new_master, members.get(new_master), cluster, broker_name, epoch, trigger,
                old_master, record.old_master_max_offset, record.new_master_max_offset,
                f"; an ASYNC master may have lost {record.may_lose} bytes"
                if record.may_lose else "",
            )  # fmt: skip
        for listener in self._election_listeners:
            listener(record)
        if new_master is not None and self.config.notify_broker_role_changed:
            self._notify(cluster, broker_name, members, new_master, epoch,
                         sync_state_set_epoch, sync_state_set_body)  # fmt: skip

    def _notify(
        self,
        cluster: str,
        broker_name: str,
        members: dict[int, str],
        master: int,
        epoch: int,
        sync_state_set_epoch: int,
        body: bytes,
    ) -> None:
        if self._nursery is None or self.client is None:
            return
        header = NotifyBrokerRoleChangedRequestHeader(
            master_address=members.get(master),
            master_broker_id=master,
            master_epoch=epoch,
            sync_state_set_epoch=sync_state_set_epoch,
        )
        liveness = self.liveness()
        for broker_id, address in sorted(members.items()):
            if liveness.is_alive(cluster, broker_name, broker_id):
                request = RemotingCommand.request(
                    RequestCode.NOTIFY_BROKER_ROLE_CHANGED,
                    encode_header(header),
                    body,
                    oneway=True,
                )
                self._nursery.start_soon(self._send_notice, address, request)

    async def _send_notice(self, address: str, request: RemotingCommand) -> None:
        assert self.client is not None
        with trio.move_on_after(NOTIFY_TIMEOUT) as scope:
            try:
                await self.client.invoke_oneway(address, request)
            except (OSError, trio.BrokenResourceError, RemotingError) as exc:
                log.warning(
                    "could not tell %s of its new role (%s); it will learn it from its "
                    "CONTROLLER_GET_REPLICA_INFO poll",
                    address, exc,
                )  # fmt: skip
        if scope.cancelled_caught:
            log.warning("telling %s of its new role took over %.0f s; gave up", address,
                        NOTIFY_TIMEOUT)  # fmt: skip

    async def scan_once(self) -> None:
        """Drop brokers that went silent; elect for groups whose master is among them."""
        now = self.now()
        for info in self.heartbeats.scan(now):
            log.warning(
                "broker %s/%s id %d at %s went silent (no heartbeat for %.1f s)",
                info.cluster_name, info.broker_name, info.broker_id, info.broker_addr,
                now - info.last_update,
            )  # fmt: skip
        if not self.journal.is_leader():
            return
        with self.journal.lock:
            names = self.journal.table.groups_needing_election(self.liveness())
            masters = {n: self._master_snapshot(n) for n in names}
        settled = now - self._started >= DEFAULT_HEARTBEAT_TIMEOUT
        for name in names:
            cluster, master = masters[name]
            unheard = (
                master is not None and self.heartbeats.last_known(cluster, name, master) is None
            )
            if unheard and not settled:
                # Just started: the master may beat to us any moment; electing now would
                # depose a live master.
                continue
            try:
                await self.write(partial(self._scan_elect, name), trigger="scan")
            except RemotingError as exc:
                log.warning("could not elect a master for %s: %s", name, exc)

    def _scan_elect(self, broker_name: str, liveness: Liveness) -> Result:
        return self.journal.table.elect_master(
            broker_name,
            None,
            designate=False,
            liveness=liveness,
            unclean=self.config.enable_elect_unclean_master,
        )

    async def _scan_loop(self) -> None:
        while True:
            # Read each round: UPDATE_CONTROLLER_CONFIG may change it.
            await trio.sleep(self.config.scan_not_active_broker_interval / 1000)
            await self.scan_once()

    async def _watch_leader(self) -> None:
        # Progress lines on leadership changes; a poll is enough for a log line.
        while True:
            leader = self.journal.is_leader()
            if leader != self._was_leader and self.journal.peers_text():
                if leader:
                    log.info("this controller (%s) is now the leader",
                             self.config.controller_dleger_self_id)  # fmt: skip
                else:
                    log.info(
                        "this controller (%s) is a follower; leader %s at %s",
                        self.config.controller_dleger_self_id,
                        self.journal.leader_id(), self.journal.leader_address(),
                    )  # fmt: skip
            self._was_leader = leader
            await trio.sleep(0.2)

    # ------------------------------------------------------------------ statistics

    def statistics(self) -> ControllerStatistics:
        """Leadership, groups, liveness and election counters."""
        with self.journal.lock:
            groups = self.journal.table.groups
            sizes = {name: len(g.sync_state_set) for name, g in groups.items()}
        return ControllerStatistics(
            is_leader=self.journal.is_leader(),
            leader_id=self.journal.leader_id(),
            leader_address=self.journal.leader_address(),
            broker_groups=len(sizes),
            alive_brokers=len(self.heartbeats.alive(self.now())),
            heartbeats=self.heartbeats.beats,
            elections=dict(self.elections),
            sync_state_set_sizes=sizes,
            server=self.server.statistics() if self.server is not None else None,
        )


@asynccontextmanager
async def open_controller(config: ControllerConfig | None = None) -> AsyncIterator[Controller]:
    """Run a controller on its own port for the duration of the block."""
    controller = Controller(config)
    await controller.journal.load()  # before the nursery, so a bad state file raises plainly
    async with trio.open_nursery() as nursery:
        await nursery.start(controller.run)
        try:
            yield controller
        finally:
            nursery.cancel_scope.cancel()
