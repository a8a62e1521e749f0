"""`Registry`: the actor, its handlers and the remoting listeners, started as one unit.

With ``metricsExporterType=PROM`` it also serves Prometheus text at ``/metrics`` on
metricsPromExporterPort (`actors.registry.metrics`), from a child of its own supervisor so a
crash of the responder restarts it alone, on the same port.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import attrs
import trio
from prometheus_client.registry import Collector

from actors.acl import AccessValidator
from actors.controller import Controller, ControllerConfig
from actors.controller.metrics import ControllerMetricsCollector
from actors.registry.actor import RegistryActor, RegistryStatistics
from actors.registry.config import RegistryConfig
from actors.registry.handlers import BROKER_CONNECTION, register_handlers
from actors.registry.kv_config import KVConfig
from actors.registry.metrics import RegistryMetricsCollector
from protocol.connection import Connection, Dispatcher
from protocol.rpc_metrics import RpcLatency, time_handlers
from protocol.server import RemotingServer, ServerConfig, ServerStatistics
from protocol.tls import server_ssl_context, tcp_server_ssl_context
from supervisors.metrics_http import (
    MetricsExporterType,
    hold_listeners,
    open_metrics_listeners,
    serve_metrics,
)
from supervisors.supervisor import ChildSpec, Supervisor

log = logging.getLogger("boltmq.registry")


@attrs.frozen
class RegistryServiceStatistics:
    """The registry's actor and server counters at one moment."""

    actor: RegistryStatistics
    server: ServerStatistics


class Registry:
    """A RocketMQ NameServer: route tables, broker liveness and KV config over remoting."""

    def __init__(
        self,
        config: RegistryConfig | None = None,
        controller_config: ControllerConfig | None = None,
    ) -> None:
        self.config = config or RegistryConfig()
        self.kv_config = KVConfig(self.config.kv_config_path)
        self.actor = RegistryActor(self.config, kv_config=self.kv_config)
        self.dispatcher = Dispatcher()
        register_handlers(self.dispatcher, self.actor)
        #: The embedded controller (enableControllerInNamesrv=true), on this registry's port.
        self.controller: Controller | None = None
        if self.config.enable_controller_in_namesrv:
            if controller_config is None:
                controller_config = ControllerConfig(
                    controller_store_path=embedded_controller_store(self.config)
                )
            self.controller = Controller(controller_config)
            self.controller.register_on(self.dispatcher)
        self.rpc_latency = RpcLatency()  # rocketmq_rpc_latency (actors.registry.metrics)
        if self.config.metrics_exporter_type == MetricsExporterType.PROM:
            time_handlers(self.dispatcher, self.rpc_latency)
        idle = self.config.server_channel_max_idle_time_seconds
        self.server = RemotingServer(self.dispatcher, ServerConfig(idle_timeout=idle or None))
        self.server.add_close_listener(self._connection_closed)
        self.port: int | None = None
        self.websocket_port: int | None = None
        #: The bound Prometheus port once running with metricsExporterType=PROM.
        self.metrics_port: int | None = None
        #: Supervises the metrics responder (None without metrics).
        self.metrics_supervisor: Supervisor | None = None
        #: The ACL check (aclEnable=true), set up in `run`.
        self.acl: AccessValidator | None = None
        self._loaded = False

    async def load(self) -> None:
        """Read kvConfig.json (`run` does it when not done yet); raises `KVConfigError`."""
        await trio.to_thread.run_sync(self.load_blocking)

    def load_blocking(self) -> None:
        """`load` for code outside trio (a command line before it starts the event loop)."""
        self.kv_config.load()
        self.actor.route_table.invalidate_all()
        self._loaded = True

    @property
    def host(self) -> str:
        """A host a local client can dial (the bind address, loopback for the wildcard)."""
        bind = self.config.bind_address
        return "127.0.0.1" if bind in ("", "0.0.0.0", "::") else bind

    @property
    def address(self) -> str:
        """``host:port`` of the TCP listener (after start)."""
        return f"{self.host}:{self.port}"

    @property
    def websocket_address(self) -> str | None:
        """``ws://host:port/`` (``wss://`` with TLS) of the websocket listener, when one runs."""
        if not self.websocket_port:
            return None
        scheme = "wss" if self.config.websocket_tls_cert_path else "ws"
        return f"{scheme}://{self.host}:{self.websocket_port}/"

    async def run(
        self, *, task_status: trio.TaskStatus[Registry] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Load the KV config, start the actor and the listeners; serve until cancelled.

        Raises `KVConfigError` before listening when kvConfig.json cannot be read.
        """
        if not self._loaded:
            await self.load()
        # A bad certificate fails the start, before any listener, with the setting named.
        tls = server_ssl_context(
            self.config.websocket_tls_cert_path, self.config.websocket_tls_key_path
        )
        self._configure_tcp_tls()
        if self.config.acl_enable:
            # Before listening: a missing or bad plain_acl.yml stops the start.
            self.acl = AccessValidator(self.config.plain_acl_file)
            await trio.to_thread.run_sync(self.acl.load)
            self.dispatcher.install_guard(self.acl.guard)
        async with trio.open_nursery() as nursery:
            await nursery.start(self.actor.run)
            if self.acl is not None:
                await nursery.start(self.acl.watch)
            bind = self.config.bind_address or None
            self.port = await nursery.start(self.server.serve_tcp, self.config.listen_port, bind)
            if self.controller is not None:
                await nursery.start(partial(self.controller.run, address=self.address))
            if self.config.websocket_listen_port:
                self.websocket_port = await nursery.start(
                    partial(self.server.serve_websocket, ssl_context=tls),
                    self.config.websocket_listen_port,
                    self.config.bind_address or "0.0.0.0",
                )
            if self.config.metrics_exporter_type == MetricsExporterType.PROM:
                await self._start_metrics(nursery)
            # `boltmq cluster -f` waits for this line's start, up to the port: keep its words.
            log.info(
                "registry ready: tcp port %d%s%s%s, KV config %s",
                self.port,
                ", controller embedded" if self.controller is not None else "",
                f", websocket port {self.websocket_port}" if self.websocket_port else "",
                f", metrics at :{self.metrics_port}/metrics" if self.metrics_port else "",
                self.kv_config.path or "in memory",
            )
            task_status.started(self)

    async def _start_metrics(self, nursery: trio.Nursery) -> None:
        config = self.config
        listeners = await open_metrics_listeners(
            config.metrics_prom_exporter_port, config.metrics_prom_exporter_host
        )
        self.metrics_port = listeners[0].socket.getsockname()[1]
        # Built once the TCP port is bound, so the address (the node_id label) is final.
        collector: Collector = RegistryMetricsCollector(
            self.address, self.rpc_latency, self.actor.statistics
        )
        if self.controller is not None:
            collector = ControllerMetricsCollector(
                self.address, self.controller.statistics, host=collector
            )
        serve = partial(serve_metrics, listeners, collector)
        self.metrics_supervisor = Supervisor(
            "registry metrics",
            [
                ChildSpec.function("metrics-port", partial(hold_listeners, listeners)),
                ChildSpec.function("metrics", serve),
            ],
        )
        await nursery.start(self.metrics_supervisor.run)

    def _configure_tcp_tls(self) -> None:
        # Raises TlsConfigError naming the key when tlsServerMode needs a file that is bad.
        config = self.config
        self.server.config.tls_context = tcp_server_ssl_context(
            config.tls_server_mode,
            config.tls_server_cert_path,
            config.tls_server_key_path,
            config.tls_server_trust_cert_path,
            config.tls_server_need_client_auth,
        )
        self.server.config.tls_mode = config.tls_server_mode

    def statistics(self) -> RegistryServiceStatistics:
        """Actor and server counters."""
        return RegistryServiceStatistics(self.actor.statistics(), self.server.statistics())

    def _connection_closed(self, connection: Connection) -> None:
        # Only connections a broker registered over can remove anything.
        if connection.attributes.get(BROKER_CONNECTION):
            reason = f"connection closed ({connection.close_reason or 'peer went away'})"
            self.actor.notify_connection_closed(connection, reason)


def embedded_controller_store(config: RegistryConfig) -> str:
    """Where an embedded controller keeps its state unless controllerStorePath says: beside
    the registry's kvConfig.json (so registries on one host do not share it), or nowhere
    (memory) for a registry whose KV config is in memory."""
    if config.kv_config_path is None:
        return ""
    return os.path.join(os.path.dirname(os.path.expanduser(config.kv_config_path)), "controller")


@asynccontextmanager
async def open_registry(
    config: RegistryConfig | None = None, controller_config: ControllerConfig | None = None
) -> AsyncIterator[Registry]:
    """Run a registry for the duration of the block; yields it once it listens."""
    registry = Registry(config, controller_config)
    await registry.load()  # before the nursery, so a bad KV file raises plainly
    async with trio.open_nursery() as nursery:
        await nursery.start(registry.run)
        try:
            yield registry
        finally:
            nursery.cancel_scope.cancel()
