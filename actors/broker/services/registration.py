"""The registrar: keeps every configured registry told about this broker (RocketMQ's
BrokerOuterAPI registration loop).

At start and every ``registerNameServerPeriod`` (30 s) it asks each registry whether it holds
the current topic data version (QUERY_DATA_VERSION) and sends a full REGISTER_BROKER when not,
or at once after a topic change (`register_soon`). After topic changes, a master sends a
registry that holds the version of its previous round only the topics changed since, with
the new data version (RocketMQ's registerIncrementBrokerData: a registry adds or updates the
topics it is sent and keeps the others), so a create costs the registry one topic, not the
whole table; a deletion, many changes at once, or a registry that missed a round get the full
table. A registry that is down is logged once and tried again next period; when it comes back
it gets a full registration. On clean shutdown the broker unregisters from all of them.
"""

from __future__ import annotations

import logging
import zlib

import attrs
import trio

from actors.broker.config import BrokerConfig
from actors.broker.tables.topics import TopicManager, UpdateOrderTopics
from protocol.bodies import (
    PERM_READ,
    PERM_WRITE,
    DataVersion,
    KVTable,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from protocol.client import RemotingClient
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.headers import (
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
    decode_header,
    encode_header,
)
from supervisors.actor import ActorError

log = logging.getLogger("boltmq.broker.registrar")


class Registrar:
    """Registers the broker with every registry in ``namesrvAddr``; see the module docstring."""

    def __init__(self, config: BrokerConfig, topics: TopicManager, client: RemotingClient) -> None:
        self.config = config
        self.topics = topics
        self.client = client
        self.master_addr: str | None = None
        self.master_ha_addr: str | None = None
        self.order_topics: set[str] = set()
        self.registrations = 0
        self._down: set[str] = set()
        self._registered_version: dict[str, DataVersion] = {}
        # The broker id each registry last took (controller mode changes it at run time).
        self._registered_id: dict[str, int] = {}
        # Topics changed since the last round began (None: many, register in full), and the
        # data version that round registered.
        self._changed_topics: set[str] | None = set()
        self._round_version: DataVersion | None = None
        self.increments = 0
        self._soon = trio.Event()

    @property
    def addresses(self) -> list[str]:
        """The registries this broker registers with."""
        return self.config.namesrv_list

    def register_soon(self, topic: TopicConfig | None = None) -> None:
        """Ask for a registration now, after a change of ``topic`` (None: of many topics)."""
        if topic is None:
            self._changed_topics = None
        elif self._changed_topics is not None:
            self._changed_topics.add(topic.topic_name)
        self._soon.set()

    def role_changed(self) -> None:
        """The broker's id or role changed (controller mode): register in full with every
        registry at once, so the route names the new master (id 0) without waiting a period."""
        self._registered_version.clear()
        self._registered_id.clear()
        self.master_addr = self.master_ha_addr = None
        self.register_soon(None)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Register now, then every period or when asked; ready after the first round."""
        await self.register_all()
        task_status.started()
        period = self.config.register_name_server_period / 1000
        while True:
            with trio.move_on_after(period):
                await self._soon.wait()
            self._soon = trio.Event()
            await self.register_all()

    async def register_all(self) -> None:
        """One round: every registry, concurrently; failures are logged, never raised."""
        changed, self._changed_topics = self._changed_topics, set()
        base, wrapper = self._round_version, self.topics.wrapper()
        self._round_version = wrapper.data_version
        if not self.addresses:
            return
        increment = None
        table = wrapper.topic_config_table
        if (
            changed
            and base is not None
            and self.config.broker_id == 0
            and all(name in table for name in changed)  # a deletion goes in full
        ):
            increment = attrs.evolve(wrapper, topic_config_table={n: table[n] for n in changed})
        async with trio.open_nursery() as nursery:
            for address in self.addresses:
                if (
                    increment is not None
                    and self._registered_version.get(address) == base
                    and self._registered_id.get(address) == 0
                ):
                    nursery.start_soon(self._register_increment, address, increment)
                else:
                    nursery.start_soon(self._register_one, address, wrapper)

    async def _register_increment(
        self, address: str, increment: TopicConfigSerializeWrapper
    ) -> None:
        timeout = self.config.register_broker_timeout_mills / 1000
        try:
            await self._register(address, timeout, increment)
        except (RemotingError, OSError) as exc:
            self._registered_version.pop(address, None)  # the next round registers in full
            log.warning("registry %s: registration of changed topics failed (%s)", address, exc)
            return
        self.increments += 1
        self._registered_version[address] = increment.data_version
        self._up(address)

    async def _register_one(self, address: str, wrapper: TopicConfigSerializeWrapper) -> None:
        # The round's table: a change made since is in the next round's changed topics.
        version = wrapper.data_version
        timeout = self.config.register_broker_timeout_mills / 1000
        try:
            # A slave registers in full until the answer names its master (HA needs it).
            learned = self.config.broker_id == 0 or self.master_ha_addr is not None
            if (
                learned
                and self._registered_version.get(address) == version
                and self._registered_id.get(address) == self.config.broker_id
                and not await self._changed(address, version, timeout)
            ):
                self._up(address)
                return
            await self._register(address, timeout, wrapper)
            self._registered_version[address] = version
            self._up(address)
        except (RemotingError, OSError) as exc:
            self._registered_version.pop(address, None)
            if address not in self._down:
                self._down.add(address)
                log.warning(
                    "registry %s unreachable (%s); retrying every %d s",
                    address, exc, self.config.register_name_server_period // 1000,
                )  # fmt: skip

    def _up(self, address: str) -> None:
        if address in self._down:
            self._down.discard(address)
            log.info("registry %s reachable again; registered", address)

    def _identity(self) -> dict[str, str]:
        c = self.config
        return encode_header(
            QueryDataVersionRequestHeader(
                broker_name=c.broker_name,
                broker_addr=c.broker_addr,
                cluster_name=c.broker_cluster_name,
                broker_id=c.broker_id,
            )
        )

    async def _changed(self, address: str, version: DataVersion, timeout: float) -> bool:
        request = RemotingCommand.request(
            RequestCode.QUERY_DATA_VERSION, self._identity(), version.to_json()
        )
        response = await self.client.invoke(address, request, timeout)
        if response.code != ResponseCode.SUCCESS:
            return True
        return decode_header(QueryDataVersionResponseHeader, response.ext_fields).changed

    async def _register(
        self, address: str, timeout: float, wrapper: TopicConfigSerializeWrapper
    ) -> None:
        c = self.config
        permission = c.broker_permission
        if not (permission & PERM_READ and permission & PERM_WRITE):
            # A read-only (or write-only) broker registers its topics so: clients stop
            # sending (or pulling) here, as with RocketMQ's brokerPermission.
            wrapper = attrs.evolve(
                wrapper,
                topic_config_table={
                    name: attrs.evolve(cfg, perm=cfg.perm & permission)
                    for name, cfg in wrapper.topic_config_table.items()
                },
            )
        body = RegisterBrokerBody(topic_config_serialize_wrapper=wrapper).encode()
        header = RegisterBrokerRequestHeader(
            broker_name=c.broker_name,
            broker_addr=c.broker_addr,
            cluster_name=c.broker_cluster_name,
            ha_server_addr=c.ha_addr,
            broker_id=c.broker_id,
            compressed=False,
            body_crc32=zlib.crc32(body) & 0x7FFFFFFF,
            websocket_addr=c.websocket_addr,
        )
        request = RemotingCommand.request(RequestCode.REGISTER_BROKER, encode_header(header), body)
        response = await self.client.invoke(address, request, timeout)
        if response.code != ResponseCode.SUCCESS:
            raise RemotingError(response.code, response.remark or "registration refused")
        self.registrations += 1
        self._registered_id[address] = header.broker_id
        answer = decode_header(RegisterBrokerResponseHeader, response.ext_fields)
        if c.broker_id != 0:
            self.master_addr = answer.master_addr or None
            self.master_ha_addr = answer.ha_server_addr or None
        if response.body:
            self.order_topics = set(KVTable.from_json(response.body).table)
            try:
                self.topics.cast_nowait(UpdateOrderTopics(frozenset(self.order_topics)))
            except ActorError as exc:
                log.warning("order topics not updated (%s); later registrations bring them", exc)

    async def unregister_all(self) -> None:
        """Tell every registry this broker is leaving (best effort, bounded by the timeout)."""
        c = self.config
        header = encode_header(
            UnRegisterBrokerRequestHeader(
                broker_name=c.broker_name,
                broker_addr=c.broker_addr,
                cluster_name=c.broker_cluster_name,
                broker_id=c.broker_id,
            )
        )

        async def one(address: str) -> None:
            request = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, dict(header))
            try:
                await self.client.invoke(address, request, 3.0)
            except (RemotingError, OSError) as exc:
                log.warning("could not unregister from registry %s: %s", address, exc)

        async with trio.open_nursery() as nursery:
            for address in self.addresses:
                nursery.start_soon(one, address)
