"""The broker: the store, its tables and its request handlers behind remoting listeners.

This is the composition root of `actors.broker`: `Broker` builds every part in three phases
(the tables and the store; the services and replication; the request handlers, through the
code table in `actors.broker.handlers.table`), hands each part the parts it uses, and
supervises them. Nothing in the broker's wings imports this module (docs/architecture.md,
"Inside the broker"); with storeType=memory the store and the tables keep no file.

Children of the broker's supervisor, in start order (stopped in reverse):

1. ``store`` - the message store (writer actor, flush and retention services).
   ``dedup`` - the dedup index rebuilt from the commit log's tail
   (``actors.broker.services.dedup``).
2. ``topics``, ``offsets``, ``groups`` - the table actors kept in ``config/*.json``.
3. ``clients``, ``locks`` - the client connections (with their expiry scan) and orderly locks.
4. ``stats`` - the statistics sampler (minute, hour and day rates).
5. ``schedule`` - delay levels and timed delivery (re-puts due messages); ``pop`` and
   ``pop-revive`` - RocketMQ 5's pop: in-flight checkpoints, read back from the revive topic
   at start, and the ticker that brings back what was not acked in time
   (``actors.broker.services.pop``); with ``aclEnable=true``, then ``acl-watcher`` - reloads
   plain_acl.yml when it changes.
6. ``server`` - listeners on listenPort, listenPort - 2 and the websocket port; on stop it
   answers every held pull first. The TCP ports are bound at the start but listened on only
   here, once the store has recovered (`actors.broker.ports`): a dialed port that answers
   means a broker that serves.
7. ``transaction-check`` - the check-back of unresolved half messages.
8. ``ha-service`` (a master) or ``ha-client`` and ``slave-sync`` (a slave) - replication
   (``actors.broker.ha``); a failed link restarts alone. In controller mode one ``ha-role``
   child runs either role's parts and ``controller`` (`actors.broker.ha.controller_mode`)
   decides the role with the controllers, changing it in place.
9. ``metrics-port`` and ``metrics`` (with ``metricsExporterType=PROM``) - the bound
   metricsPromExporterPort, and Prometheus text at ``/metrics`` on it
   (`actors.broker.services.metrics`); a crash of the responder restarts it alone, on the
   same port.
10. ``registrar`` - registration with the registries; on stop it unregisters.

So a shutdown unregisters, stops serving, writes the tables and flushes the store, in that order.

    async with open_broker(BrokerConfig(listen_port=0, namesrv_addr=registry.address)) as broker:
        print(broker.address)
"""

from __future__ import annotations

import gc
import logging
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import attrs
import trio

from actors.acl import AccessValidator
from actors.broker.config import BrokerConfig
from actors.broker.ha import (
    HAClient,
    HAClientStatistics,
    HAService,
    HAStatistics,
    HighAvailability,
    SlaveSynchronize,
)
from actors.broker.ha.controller_mode import (
    ControlledMasterAddresses,
    ControllerLink,
    ControllerLinkStatistics,
)
from actors.broker.ha.epoch import EpochFile
from actors.broker.handlers.client import notify_request
from actors.broker.handlers.stats import runtime_info
from actors.broker.handlers.table import HandlerParts, register_handlers, stats_parts
from actors.broker.ports import bind_tcp, listen
from actors.broker.services.dedup import DedupIndex, DedupService
from actors.broker.services.metrics import BrokerMetricsCollector, MetricsParts
from actors.broker.services.pop import PopService
from actors.broker.services.pull_hold import PullHoldService, PullHoldStatistics
from actors.broker.services.registration import Registrar
from actors.broker.services.request_stats import RequestStats
from actors.broker.services.schedule import ScheduleMessageService
from actors.broker.services.stats import BrokerStatsManager
from actors.broker.services.transaction import TransactionalMessageService
from actors.broker.tables.clients import ClientManager
from actors.broker.tables.delay_offsets import DelayOffsetTable
from actors.broker.tables.groups import SubscriptionGroupManager
from actors.broker.tables.locks import RebalanceLockManager
from actors.broker.tables.offsets import ConsumerOffsetManager
from actors.broker.tables.topics import TopicManager
from protocol import codecs_status
from protocol.acl import SessionCredentials
from protocol.client import RemotingClient
from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.connection import Connection, Dispatcher
from protocol.rpc_metrics import time_handlers
from protocol.server import RemotingServer, ServerConfig, ServerStatistics
from protocol.tls import client_ssl_context, server_ssl_context, tcp_server_ssl_context
from storage import FileMessageStore, MemoryMessageStore, MessageStore, StoreStatistics
from storage.mapped_file import QUEUE_FILE_DESCRIPTORS
from supervisors.actor import ActorStatistics
from supervisors.limits import raise_open_file_limit
from supervisors.metrics_http import (
    MetricsExporterType,
    hold_listeners,
    open_metrics_listeners,
    serve_metrics,
)
from supervisors.supervisor import ChildSpec, Supervisor, SupervisorStatistics

log = logging.getLogger("boltmq.broker")


@attrs.frozen
class BrokerStatistics:
    """One look at a running broker."""

    address: str
    topics: int
    consumer_groups: int
    producer_groups: int
    store: StoreStatistics
    server: ServerStatistics
    pull_hold: PullHoldStatistics
    supervisor: SupervisorStatistics
    registrations: int
    ha: HAStatistics | HAClientStatistics | None = None  # replication (actors.broker.ha)
    #: The table actors' own records: topics, offsets, groups, clients, locks.
    tables: tuple[ActorStatistics, ...] = ()
    #: Controller mode's link: leader, role, epoch, SyncStateSet, heartbeat age, fencing.
    controller: ControllerLinkStatistics | None = None


class Broker:
    """A RocketMQ 4.x broker; see the module docstring."""

    def __init__(self, config: BrokerConfig | None = None, config_file: Path | None = None) -> None:
        self.config = config = config or BrokerConfig()
        #: The broker.conf it was started with (``-c``): UPDATE_BROKER_CONFIG writes its
        #: changes there, as RocketMQ's broker does (`actors.broker.handlers.config_admin`).
        self.config_file = config_file
        #: Set up in `run` (tlsEnable=true): the context the broker's own TLS calls use.
        self.tls_client_context: ssl.SSLContext | None = None

        # Refused here, in one line, before anything is built: what the store cannot do.
        config.check_store_type()

        # Phase 1: the tables and the store. They use nothing of the broker's.
        def config_file_of(name: str) -> Path | None:
            # storeType=memory keeps no file at all, the tables' included.
            return None if config.in_memory else config.config_dir / name

        self.topics = TopicManager(config, config_file_of("topics.json"))
        self.offsets = ConsumerOffsetManager(
            config_file_of("consumerOffset.json"), config.flush_consumer_offset_interval
        )
        self.groups = SubscriptionGroupManager(
            config_file_of("subscriptionGroup.json"), config.auto_create_subscription_group
        )
        self.clients = ClientManager(config.channel_expired_timeout)
        self.clients.notifier = self._notify_consumers
        self.locks = RebalanceLockManager(config.rebalance_lock_max_live_time)
        self.delay_offsets = DelayOffsetTable(config_file_of("delayOffset.json"))
        self.timer_offsets = DelayOffsetTable(config_file_of("timerOffset.json"))
        # The store tells the long-polling service of arrivals, so that comes first.
        self.pull_hold = PullHoldService(config.max_held_pulls)
        # Opened by its supervisor child in `run`; its host is the bound address, set there.
        store_type = MemoryMessageStore if config.in_memory else FileMessageStore
        self.store: MessageStore = store_type(
            config.store_config(), message_arriving_listener=self.pull_hold.notify_message_arriving
        )

        # Phase 2: the services and replication, each handed the parts it uses.
        metered = config.metrics_exporter_type == MetricsExporterType.PROM
        # Request latencies and dead letters, for the metrics (latencies only when served).
        self.request_stats = RequestStats(timing=metered)
        self.stats = BrokerStatsManager(config.broker_cluster_name)
        self.dedup = DedupService(
            DedupIndex(config.dedup_window_seconds * 1000, config.dedup_max_keys),
            self.store,
            rebuild=not config.in_memory,
        )
        # Entered in `run`; its connections to the registries also carry a slave's config sync.
        self.registry_client = RemotingClient(
            rpc_hook=_credentials(config),
            tls=config.tls_enable,
            tls_ca_file=config.tls_client_trust_cert_path or None,
            tls_cert_file=config.tls_client_cert_path,
            tls_key_file=config.tls_client_key_path,
        )
        self.registrar = Registrar(config, self.topics, self.registry_client)
        self.topics.on_change.append(self.registrar.register_soon)
        idle = config.server_channel_max_idle_time_seconds
        self.server = RemotingServer(Dispatcher(), ServerConfig(idle_timeout=idle or None))
        self.server.add_close_listener(self.clients.connection_closed)
        #: Controller mode's link to the controllers (None without enableControllerMode).
        self.controller: ControllerLink | None = None
        #: The controllers' client (controller mode): a short reconnect backoff (2 s at
        #: most), so a controller that comes back is heard from within a few heartbeats.
        self.controller_client = RemotingClient(
            rpc_hook=_credentials(config),
            tls=config.tls_enable,
            tls_ca_file=config.tls_client_trust_cert_path or None,
            tls_cert_file=config.tls_client_cert_path,
            tls_key_file=config.tls_client_key_path,
            backoff_max=2.0,
        )
        self.ha = self._high_availability()
        if config.enable_controller_mode:
            # Built before the services: from here the broker takes no writes until the
            # controller names it master (config.broker_role reads SLAVE).
            self.controller = self._controller_link()
        self.schedule = ScheduleMessageService(
            config, store=self.store, topics=self.topics, ha=self.ha,
            delay_offsets=self.delay_offsets, timer_offsets=self.timer_offsets,
        )  # fmt: skip
        self.transactions = TransactionalMessageService(
            config, store=self.store, topics=self.topics, offsets=self.offsets,
            clients=self.clients, ha=self.ha,
        )  # fmt: skip
        if self.controller is not None:
            self.controller.on_role_change.append(self.schedule.role_changed)
        self.pop = PopService(
            config, store=self.store, topics=self.topics, offsets=self.offsets, groups=self.groups,
            ha=self.ha,
        )  # fmt: skip

        #: Reads the parts above at each scrape (served with metricsExporterType=PROM).
        self.metrics_collector = BrokerMetricsCollector(
            MetricsParts(
                config, self.store, self.topics, self.groups, self.offsets, self.clients,
                self.ha, self.stats, self.request_stats, self.pop,
            )
        )  # fmt: skip

        # Phase 3: the request handlers, each built from its share of the parts.
        self.handler_parts = HandlerParts(
            config=config, config_file=config_file, store=self.store, topics=self.topics,
            offsets=self.offsets, groups=self.groups, clients=self.clients, locks=self.locks,
            delay_offsets=self.delay_offsets, ha=self.ha, pull_hold=self.pull_hold,
            stats=self.stats, request_stats=self.request_stats, schedule=self.schedule,
            transactions=self.transactions, dedup=self.dedup.index, pop=self.pop,
            controller=self.controller,
        )  # fmt: skip
        self.dispatcher = self.server.dispatcher
        register_handlers(self.dispatcher, self.handler_parts)
        if metered:  # sends and send-back answer from a store callback and time themselves
            time_handlers(self.dispatcher, self.request_stats, skip=_SELF_TIMED)

        self.websocket_port: int | None = None
        self.fast_port: int | None = None
        #: The bound Prometheus port once running with metricsExporterType=PROM.
        self.metrics_port: int | None = None
        self.supervisor: Supervisor | None = None
        #: The ACL check (aclEnable=true), set up in `run`.
        self.acl: AccessValidator | None = None
        #: Called at the start of `run` (a launcher fills in late settings).
        self.before_start: Callable[[], object] | None = None
        # Bound in `run`, listened on by the `server` child (after the store's recovery).
        self._sockets: list[trio.socket.SocketType] = []
        self._fast_sockets: list[trio.socket.SocketType] = []
        self._websocket_tls: ssl.SSLContext | None = None

    def _high_availability(self) -> HighAvailability:
        """The HA parts of this broker's role: the HA service, or the link and config sync."""
        config, store = self.config, self.store
        if config.in_memory:  # nothing to replicate (check_store_type refused the other roles)
            return HighAvailability(store)
        if config.enable_controller_mode:
            # Both roles' parts, run per the controller's word by the ``ha-role`` child.
            self._master_addresses = ControlledMasterAddresses(self.registrar)
            return HighAvailability.controlled(
                store,
                HAService(config, store, self.server.config),
                HAClient(config, store, self._master_addresses, lambda: self.tls_client_context),
                SlaveSynchronize(
                    config, registration=self._master_addresses,
                    invoke=self.registry_client.invoke, topics=self.topics, offsets=self.offsets,
                    groups=self.groups, delay_offsets=self.delay_offsets,
                ),
            )  # fmt: skip
        if not config.is_slave:
            return HighAvailability(store, service=HAService(config, store, self.server.config))
        return HighAvailability(
            store,
            client=HAClient(config, store, self.registrar, lambda: self.tls_client_context),
            sync=SlaveSynchronize(
                config, registration=self.registrar, invoke=self.registry_client.invoke,
                topics=self.topics, offsets=self.offsets, groups=self.groups,
                delay_offsets=self.delay_offsets,
            ),
        )  # fmt: skip

    def _controller_link(self) -> ControllerLink:
        """Controller mode: the link that decides this broker's role (`controller_mode`)."""
        config = self.config
        link = ControllerLink(
            config,
            store=self.store,
            ha=self.ha,
            registration=self.registrar,
            epochs=EpochFile(config.epoch_file_path),
            invoke=self.controller_client.invoke,
        )
        self._master_addresses.link = link
        return link

    # -- addresses -------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """``brokerIP1:listenPort`` (the bound port once running)."""
        return self.config.broker_addr

    # -- life ------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[Broker] = trio.TASK_STATUS_IGNORED) -> None:
        """Bind, open the store, load the tables, serve until cancelled; then shut down cleanly."""
        if self.before_start is not None:
            self.before_start()
        config = self.config
        # Connections (and, without libc, consume-queue files) hold descriptors: the soft
        # limit is raised to the hard one (the Java broker's JVM does the same).
        soft, _ = raise_open_file_limit()
        if QUEUE_FILE_DESCRIPTORS and 0 < soft < 65536:
            log.info(
                "open-file limit %d: room for about %d consume queues beside connections; "
                "raise it (ulimit -n, LimitNOFILE=) for more", soft, max(0, soft - 1024),
            )  # fmt: skip
        self._configure_tls()
        bind = config.bind_address or None
        metrics: list[ChildSpec] = []
        if config.metrics_exporter_type == MetricsExporterType.PROM:
            # Bound first: a taken metrics port then fails the start before anything else binds.
            listeners = await open_metrics_listeners(
                config.metrics_prom_exporter_port, config.metrics_prom_exporter_host
            )
            self.metrics_port = listeners[0].socket.getsockname()[1]
            collector = self.metrics_collector
            metrics += [
                ChildSpec.function("metrics-port", partial(hold_listeners, listeners)),
                ChildSpec.function("metrics", partial(serve_metrics, listeners, collector)),
            ]
        self._sockets = await bind_tcp(config.listen_port, bind)
        config.listen_port = self._sockets[0].getsockname()[1]
        if config.fast_port_enable and config.listen_port > 2:
            try:
                self._fast_sockets = await bind_tcp(config.listen_port - 2, bind)
                self.fast_port = config.listen_port - 2
            except OSError as exc:
                log.warning("fast port %d not available (%s); serving on %d only",
                            config.listen_port - 2, exc, config.listen_port)  # fmt: skip
        # A bad certificate fails the start, before any listener, with the setting named.
        self._websocket_tls = server_ssl_context(
            config.websocket_tls_cert_path, config.websocket_tls_key_path
        )
        # MsgIds carry the broker's address, which an ephemeral listen port fixes only now.
        self.store.config.store_host = (config.broker_ip1, config.listen_port)
        await trio.to_thread.run_sync(self._load_tables)
        acl_children = await self._start_acl()
        registrar = self.registrar
        controller = self.controller
        controller_children = (
            [] if controller is None else [ChildSpec.instance("controller", controller)]
        )
        async with self.registry_client, self.controller_client:
            self.supervisor = supervisor = Supervisor(
                f"broker {config.broker_name}",
                [
                    ChildSpec.instance("store", self.store),
                    ChildSpec.function("dedup", self.dedup.run),  # rebuilt before serving
                    ChildSpec.instance("topics", self.topics),
                    ChildSpec.instance("offsets", self.offsets),
                    ChildSpec.instance("groups", self.groups),
                    ChildSpec.instance("clients", self.clients),
                    ChildSpec.instance("locks", self.locks),
                    ChildSpec.function("stats", self.stats.run),
                    ChildSpec.instance("schedule", self.schedule),
                    ChildSpec.instance("pop", self.pop),
                    ChildSpec.function("pop-revive", self.pop.run_revive_ticks),
                    *acl_children,
                    ChildSpec.function("server", self._serve, aclose=self._quiesce),
                    ChildSpec.function("transaction-check", self.transactions.run),
                    *self.ha.children(),
                    *controller_children,
                    *metrics,
                    ChildSpec.function("registrar", registrar.run, aclose=registrar.unregister_all),
                ],
            )
            async with trio.open_nursery() as nursery:
                await nursery.start(supervisor.run)
                settle_garbage_collector()
                # `boltmq cluster -f` waits for this line's start, up to "ready on <ip>:<port>":
                # keep its words.
                log.info(
                    "broker %s (%s, %s) of cluster %s ready on %s%s%s%s; store %s; registries: %s"
                    "; codecs: %s",
                    config.broker_name, config.broker_role, config.flush_disk_type,
                    config.broker_cluster_name, self.address,
                    f", fast port {self.fast_port}" if self.fast_port else "",
                    f", websocket port {self.websocket_port}" if self.websocket_port else "",
                    f", metrics at :{self.metrics_port}/metrics" if self.metrics_port else "",
                    "in memory (no files; no restart, no replication)" if config.in_memory
                    else config.store_root,
                    ", ".join(config.namesrv_list) or "none", codecs_status(),
                )  # fmt: skip
                task_status.started(self)

    def _configure_tls(self) -> None:
        # Before listening: a bad tls* file raises TlsConfigError naming the key.
        config = self.config
        self.server.config.tls_context = tcp_server_ssl_context(
            config.tls_server_mode,
            config.tls_server_cert_path,
            config.tls_server_key_path,
            config.tls_server_trust_cert_path,
            config.tls_server_need_client_auth,
        )
        self.server.config.tls_mode = config.tls_server_mode
        if config.tls_enable:
            self.tls_client_context = client_ssl_context(
                config.tls_client_trust_cert_path or None,
                config.tls_client_cert_path,
                config.tls_client_key_path,
            )

    async def _start_acl(self) -> list[ChildSpec]:
        # Before listening: a missing or bad plain_acl.yml stops the start (AclConfigError).
        if not self.config.acl_enable:
            return []
        self.acl = AccessValidator(self.config.plain_acl_path)
        await trio.to_thread.run_sync(self.acl.load)
        self.dispatcher.install_guard(self.acl.guard)
        return [ChildSpec.function("acl-watcher", self.acl.watch)]

    def _load_tables(self) -> None:
        for table in (self.topics, self.offsets, self.groups):
            table.load()
        self.topics.persist()

    async def _serve(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        self.pull_hold.closing = False
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.pull_hold.run_rechecks, self.store.get_max_offset_in_queue)
            await nursery.start(self.server.serve_listeners, listen(self._sockets))
            if self._fast_sockets:
                await nursery.start(self.server.serve_listeners, listen(self._fast_sockets))
            if self.config.websocket_listen_port:
                self.websocket_port = await nursery.start(
                    partial(
                        self.server.serve_websocket,
                        ssl_context=self._websocket_tls,
                    ),
                    self.config.websocket_listen_port,
                    self.config.bind_address or "0.0.0.0",
                )
            task_status.started()

    async def _quiesce(self) -> None:
        # Answer held pulls before the listeners go, so consumers get a reply, not a reset.
        self.pull_hold.release_all()
        with trio.move_on_after(1):
            await self.pull_hold.wait_released()
            # The released pulls' answers are queued; let them reach the wire first.
            for connection in list(self.server.connections):
                await connection.drain()

    def _notify_consumers(self, group: str, connections: list[Connection]) -> None:
        for connection in connections:
            if not connection.closed:
                connection.send_oneway(notify_request(group))

    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's table, as an operator's admin tool sees it."""
        return runtime_info(stats_parts(self.handler_parts))

    def statistics(self) -> BrokerStatistics:
        """Counters of the broker's parts."""
        assert self.supervisor is not None, "the broker is not running"
        return BrokerStatistics(
            address=self.address,
            topics=len(self.topics.topic_config_table),
            consumer_groups=len(self.clients.consumer_table),
            producer_groups=len(self.clients.producer_table),
            store=self.store.statistics(),
            server=self.server.statistics(),
            pull_hold=self.pull_hold.statistics(),
            supervisor=self.supervisor.statistics(),
            registrations=self.registrar.registrations,
            ha=self.ha.statistics(),
            tables=tuple(
                table.statistics()
                for table in (self.topics, self.offsets, self.groups, self.clients, self.locks)
            ),
            controller=None if self.controller is None else self.controller.statistics(),
        )


def _credentials(config: BrokerConfig) -> Callable[[RemotingCommand], None] | None:
    """The signing hook of the broker's own requests (accessKey / secretKey set)."""
    if not (config.access_key or config.secret_key):
        return None
    return SessionCredentials(config.access_key, config.secret_key).sign


def settle_garbage_collector() -> None:
    """Once recovered and serving: keep the cyclic garbage collector off the start-up heap.

    Everything alive now (modules, tables, the recovered store's objects: some 65,000 in a
    fresh broker) lives as long as the process, yet each full collection walked it all
    again: 50-110 ms pauses on a busy machine, straight into the send latency's p99. Frozen,
    it is skipped. The young-generation threshold stays as it is: raised tenfold, each young
    collection took about 1 ms instead of 0.1-0.2 ms for no less collecting overall."""
    gc.collect()
    gc.freeze()


#: Request codes whose handlers count their own latency (they answer from a store callback).
_SELF_TIMED = (
    RequestCode.SEND_MESSAGE,
    RequestCode.SEND_MESSAGE_V2,
    RequestCode.SEND_BATCH_MESSAGE,
    RequestCode.CONSUMER_SEND_MSG_BACK,
)


@asynccontextmanager
async def open_broker(config: BrokerConfig | None = None) -> AsyncIterator[Broker]:
    """Run a broker for the duration of the block; yields it once it serves."""
    broker = Broker(config)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        try:
            yield broker
        finally:
            assert broker.supervisor is not None
            await broker.supervisor.aclose()
            nursery.cancel_scope.cancel()
