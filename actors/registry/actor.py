"""The registry actor: sole writer of the route tables and the KV configuration.

Every change (a registration, an unregistration, expiry, a closed connection, a topic delete,
a write-permission change, a KV put/delete, a config update) is a command in the actor's
mailbox and is applied by the actor's task alone, in arrival order. Queries do not use the
mailbox: they read `route_table` and `kv_config` directly (see docs/actors.md for why this is
safe on trio).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import attrs
import trio

from actors.registry.config import RegistryConfig
from actors.registry.kv_config import ORDER_TOPIC_CONFIG, KVConfig
from actors.registry.route_table import (
    RegisterResult,
    RouteTable,
    RouteTableStatistics,
    TopicConfigLike,
)
from supervisors.actor import Actor, ActorError, ActorStatistics, ActorStopped, Request

log = logging.getLogger("boltmq.registry")


@attrs.frozen
class RegisterBroker(Request[RegisterResult]):
    """REGISTER_BROKER, already checked and decoded."""

    cluster: str
    broker_addr: str
    broker_name: str
    broker_id: int
    ha_server_addr: str
    data_version: object | None
    topic_config_table: Mapping[str, TopicConfigLike] | None
    filter_server_list: Sequence[str] = ()
    connection: object | None = None
    websocket_addr: str | None = None


@attrs.frozen
class UnregisterBroker(Request[None]):
    """UNREGISTER_BROKER."""

    cluster: str
    broker_addr: str
    broker_name: str
    broker_id: int


@attrs.frozen
class QueryDataVersion(Request[tuple[bool, object | None]]):
    """QUERY_DATA_VERSION: (changed, stored data version); unchanged refreshes last-update."""

    broker_addr: str
    data_version: object


@attrs.frozen
class ConnectionClosed:
    """A remoting connection closed: drop every broker that registered over it (a cast)."""

    connection: object
    reason: str = "connection closed"


@attrs.frozen
class ScanNotActiveBrokers:
    """Drop brokers whose last registration is older than the expiry (a cast)."""


@attrs.frozen
class DeleteTopic(Request[bool]):
    """DELETE_TOPIC_IN_NAMESRV (``cluster`` limits it to that cluster's brokers)."""

    topic: str
    cluster: str | None = None


@attrs.frozen
class SetWritePerm(Request[int]):
    """WIPE_WRITE_PERM_OF_BROKER / ADD_WRITE_PERM_OF_BROKER; answers the queue-data count."""

    broker_name: str
    writable: bool


@attrs.frozen
class PutKVConfig(Request[None]):
    """PUT_KV_CONFIG (persisted before the answer)."""

    namespace: str
    key: str
    value: str


@attrs.frozen
class DeleteKVConfig(Request[None]):
    """DELETE_KV_CONFIG (persisted before the answer)."""

    namespace: str
    key: str


@attrs.frozen
class UpdateConfig(Request[list[str]]):
    """UPDATE_NAMESRV_CONFIG with runtime-changeable keys only."""

    properties: Mapping[str, str]


RegistryCommand: TypeAlias = (
    RegisterBroker
    | UnregisterBroker
    | QueryDataVersion
    | ConnectionClosed
    | ScanNotActiveBrokers
    | DeleteTopic
    | SetWritePerm
    | PutKVConfig
    | DeleteKVConfig
    | UpdateConfig
)


@attrs.frozen
class RegistryStatistics(ActorStatistics):
    """The registry actor's counters and table sizes at one moment."""

    routes: RouteTableStatistics
    kv_entries: int
    brokers_dropped: int


class RegistryActor(Actor[RegistryCommand]):
    """Owns `RouteTable` and `KVConfig`; applies commands from its mailbox; scans liveness.

    A restart keeps the tables (they live on the instance and every change is applied whole
    before the next command), so a crash costs nothing but the command that caused it.
    """

    # Connections close in numbers while a cluster stops; the tables go with the registry.
    quiet_drops = (ConnectionClosed,)

    def __init__(
        self,
        config: RegistryConfig,
        route_table: RouteTable | None = None,
        kv_config: KVConfig | None = None,
    ) -> None:
        # A large mailbox: close notifications come from a synchronous listener and must
        # not be refused while a burst of registrations is queued.
        super().__init__("registry", mailbox_size=65536)
        self.config = config
        self.kv_config = kv_config if kv_config is not None else KVConfig(None)
        self.route_table = route_table if route_table is not None else RouteTable()
        self._apply_order_setting()
        self.brokers_dropped = 0

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Apply commands until cancelled or closed; the liveness scanner runs beside it."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._scanner)
            await super().run(task_status=task_status)
            nursery.cancel_scope.cancel()

    def notify_connection_closed(self, connection: object, reason: str) -> None:
        """Tell the actor a connection closed (callable from synchronous code)."""
        try:
            self.cast_nowait(ConnectionClosed(connection, reason))
        except ActorStopped:
            pass  # the registry is stopping: its tables go with it
        except ActorError as exc:
            # The mailbox is full: the scanner drops the broker after the expiry instead.
            log.warning(
                "registry: connection close of %s not handled now (%s); its brokers expire later",
                getattr(connection, "peer", connection), exc,
            )  # fmt: skip

    def statistics(self) -> RegistryStatistics:
        """Actor counters, table sizes and the number of brokers dropped."""
        return RegistryStatistics(
            **self._statistics_fields(),
            routes=self.route_table.statistics(),
            kv_entries=self.kv_config.statistics().entries,
            brokers_dropped=self.brokers_dropped,
        )

    # ----------------------------------------------------------------- commands

    async def handle(self, command: RegistryCommand) -> Any:
        """Apply one command to the tables."""
        table = self.route_table
        match command:
            case RegisterBroker():
                return table.register_broker(
                    cluster=command.cluster,
                    broker_addr=command.broker_addr,
                    broker_name=command.broker_name,
                    broker_id=command.broker_id,
                    ha_server_addr=command.ha_server_addr,
                    data_version=command.data_version,
                    topic_config_table=command.topic_config_table,
                    filter_server_list=command.filter_server_list,
                    connection=command.connection,
                    websocket_addr=command.websocket_addr,
                    now=trio.current_time(),
                )
            case QueryDataVersion():
                changed = table.data_version_changed(command.broker_addr, command.data_version)
                if not changed:
                    table.refresh(command.broker_addr, trio.current_time())
                return changed, table.data_version_of(command.broker_addr)
            case UnregisterBroker():
                table.unregister_broker(
                    cluster=command.cluster,
                    broker_addr=command.broker_addr,
                    broker_name=command.broker_name,
                    broker_id=command.broker_id,
                )
                return None
            case ConnectionClosed():
                for addr in table.addresses_of_connection(command.connection):
                    if table.drop_broker(addr, command.reason):
                        self.brokers_dropped += 1
                return None
            case ScanNotActiveBrokers():
                return self._scan()
            case DeleteTopic():
                return table.delete_topic(command.topic, command.cluster)
            case SetWritePerm():
                return table.set_write_perm(command.broker_name, command.writable)
            case PutKVConfig():
                self.kv_config.put(command.namespace, command.key, command.value)
                self._kv_changed(command.namespace, command.key)
                await self._save_kv()
                return None
            case DeleteKVConfig():
                if self.kv_config.delete(command.namespace, command.key):
                    self._kv_changed(command.namespace, command.key)
                    await self._save_kv()
                return None
            case UpdateConfig():
                applied = self.config.update(command.properties, runtime=True)
                self._apply_order_setting()
                log.info("registry: config updated: %s", dict(command.properties))
                return applied
        raise TypeError(f"the registry actor takes no {type(command).__name__}")

    def _scan(self) -> list[str]:
        table = self.route_table
        expiry = self.config.broker_expired_millis / 1000
        now = trio.current_time()
        dropped = []
        for addr in table.expired(now, expiry):
            live = table.broker_live_table[addr]
            idle = now - live.last_update
            close = getattr(live.connection, "close", None)
            if callable(close):
                close(f"broker expired after {idle:.0f}s without registration")
            if table.drop_broker(
                addr, f"no registration for {idle:.0f}s (limit {expiry:g}s), connection closed"
            ):
                self.brokers_dropped += 1
                dropped.append(addr)
        return dropped

    async def _scanner(self) -> None:
        while True:
            await trio.sleep(max(0.01, self.config.scan_not_active_broker_interval / 1000))
            try:
                self.cast_nowait(ScanNotActiveBrokers())
            except ActorError as exc:
                log.debug("registry: liveness scan skipped: %s", exc)

    def _kv_changed(self, namespace: str, key: str) -> None:
        if namespace == ORDER_TOPIC_CONFIG:
            self.route_table.invalidate_topic(key)

    async def _save_kv(self) -> None:
        # Snapshot in the actor's task, write (with fsync) in a thread: the loop keeps serving.
        document = self.kv_config.to_json()
        await trio.to_thread.run_sync(self.kv_config.save, document)

    def _apply_order_setting(self) -> None:
        kv = self.kv_config
        enabled = self.config.order_message_enable
        was_enabled = self.route_table.order_topic_conf is not None
        if enabled:
            self.route_table.order_topic_conf = lambda topic: kv.get(ORDER_TOPIC_CONFIG, topic)
        else:
            self.route_table.order_topic_conf = None
        if enabled != was_enabled:
            self.route_table.invalidate_all()
