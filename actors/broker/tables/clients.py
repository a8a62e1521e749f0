"""Client connections (RocketMQ's ProducerManager and ConsumerManager).

Producers and consumers announce themselves with HEART_BEAT every 30 s; the broker records
each connection under its groups, with the consumers' subscriptions (a pull without its own
expression filters by them), tells a consumer group's members when membership or
subscriptions change (NOTIFY_CONSUMER_IDS_CHANGED, so they rebalance at once), and forgets a
connection when it closes or has been silent for ``channelExpiredTimeout`` (120 s).

`ClientTable` is the plain state: it decides which groups' members must be told, but tells
nobody. `ClientManager` is the actor that alone changes it: heartbeats, unregistrations and
closed connections arrive as casts (from synchronous handlers and the server's close
listener); a scanner task beside it casts the expiry scan every 10 s; the notifier runs in the
actor's task after each change. Pulls and queries read the table inline.

A restart of the actor keeps the table (it lives on the instance, each change applied whole):
it loses the command that crashed it and those queued behind it. A lost heartbeat comes again
within 30 s; a lost close leaves the connection's entries until the scan drops them 120 s after
their last heartbeat.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import attrs
import trio

from actors.broker.tables.table_actor import TableActor
from protocol.bodies import (
    ConsumeFromWhere,
    ConsumeType,
    MessageModel,
    SubscriptionData,
)
from protocol.codes import LanguageCode
from protocol.connection import Connection
from protocol.message import tag_hash_code
from supervisors.actor import ActorError, ActorStatistics, ActorStopped, Request

log = logging.getLogger("boltmq.broker.clients")

SUB_ALL = "*"


def parse_subscription(
    topic: str, expression: str | None, sub_version: int = 0
) -> SubscriptionData:
    """A TAG subscription from ``TagA || TagB`` (``*`` or blank = everything)."""
    text = (expression or "").strip()
    if not text or text == SUB_ALL:
        return SubscriptionData(topic=topic, sub_string=SUB_ALL, sub_version=sub_version)
    tags = [tag.strip() for tag in text.split("||") if tag.strip()]
    return SubscriptionData(
        topic=topic,
        sub_string=text,
        tags_set=tags,
        code_set=[tag_hash_code(tag) for tag in tags],
        sub_version=sub_version,
    )


def tag_codes(subscription: SubscriptionData) -> frozenset[int] | None:
    """The tag hash codes a subscription accepts; None = all."""
    if subscription.sub_string.strip() in (
        "",
        SUB_ALL,
    ) or subscription.expression_type.upper() not in (
        "",
        "TAG",
    ):
        return None
    codes = subscription.code_set or [tag_hash_code(t) for t in subscription.tags_set]
    return frozenset(codes)


@attrs.define
class ClientChannel:
    """One client connection as a group member."""

    connection: Connection
    client_id: str
    language: LanguageCode
    version: int
    last_update: float  # trio.current_time()


@attrs.define
class ConsumerGroupInfo:
    """A consumer group's live members and subscriptions."""

    group_name: str
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    subscriptions: dict[str, SubscriptionData] = attrs.Factory(dict)
    channels: dict[Connection, ClientChannel] = attrs.Factory(dict)

    def client_ids(self) -> list[str]:
        """Client ids of the live connections (sheet 9.1)."""
        return [channel.client_id for channel in self.channels.values()]


class ClientTable:
    """Producer and consumer groups by connection; plain state, no I/O, no clock.

    Times are the caller's (`trio.current_time()` in the broker). A change that the members of
    a consumer group must hear of records the group in `changed_groups`, which the owner
    drains (`take_changed_groups`) and tells.
    """

    def __init__(self, channel_expired: float = 120.0) -> None:
        self.consumer_table: dict[str, ConsumerGroupInfo] = {}
        self.producer_table: dict[str, dict[Connection, ClientChannel]] = {}
        self.channel_expired = channel_expired
        #: Consumer groups whose members are to be told, in the order they changed.
        self.changed_groups: dict[str, None] = {}

    # -- consumers -------------------------------------------------------------------------

    def register_consumer(
        self,
        group: str,
        channel: ClientChannel,
        consume_type: ConsumeType,
        message_model: MessageModel,
        consume_from_where: ConsumeFromWhere,
        subscriptions: Sequence[SubscriptionData],
        notify: bool = True,
    ) -> bool:
        """Record a consumer's heartbeat; True when membership or subscriptions changed (the
        group's members are then told, when ``notify``)."""
        info = self.consumer_table.get(group)
        if info is None:
            info = self.consumer_table[group] = ConsumerGroupInfo(group)
        info.consume_type = consume_type
        info.message_model = message_model
        info.consume_from_where = consume_from_where
        existing = info.channels.get(channel.connection)
        changed = existing is None or existing.client_id != channel.client_id
        if existing is None:
            info.channels[channel.connection] = channel
        else:
            existing.last_update = channel.last_update
            existing.client_id = channel.client_id
        new_subs = {sub.topic: sub for sub in subscriptions}
        for topic, sub in new_subs.items():
            old = info.subscriptions.get(topic)
            if (
                old is None
                or old.sub_string != sub.sub_string
                or old.expression_type != sub.expression_type
            ):
                changed = True
            if old is None or old.sub_version <= sub.sub_version:
                info.subscriptions[topic] = sub
        for topic in [t for t in info.subscriptions if t not in new_subs]:
            # A topic no member subscribes any more.
            del info.subscriptions[topic]
            changed = True
        if changed and notify:
            self.changed_groups[group] = None
        return changed

    def unregister_consumer(self, group: str, connection: Connection) -> bool:
        """Remove one connection from a group; True when it was there."""
        info = self.consumer_table.get(group)
        if info is None or info.channels.pop(connection, None) is None:
            return False
        if not info.channels:
            del self.consumer_table[group]
            log.info("consumer group %s has no members left", group)
        else:
            self.changed_groups[group] = None
        return True

    def get_consumer_group_info(self, group: str) -> ConsumerGroupInfo | None:
        """The group's members and subscriptions."""
        return self.consumer_table.get(group)

    # -- producers -------------------------------------------------------------------------

    def register_producer(self, group: str, channel: ClientChannel) -> None:
        """Record a producer's heartbeat."""
        channels = self.producer_table.setdefault(group, {})
        existing = channels.get(channel.connection)
        if existing is None:
            channels[channel.connection] = channel
        else:
            existing.last_update = channel.last_update

    def unregister_producer(self, group: str, connection: Connection) -> None:
        """Remove one producer connection."""
        channels = self.producer_table.get(group)
        if channels is not None:
            channels.pop(connection, None)
            if not channels:
                del self.producer_table[group]

    # -- connection life -------------------------------------------------------------------

    def connection_closed(self, connection: Connection) -> None:
        """Forget a closed connection everywhere."""
        for group in [g for g, info in self.consumer_table.items() if connection in info.channels]:
            self.unregister_consumer(group, connection)
        for group in [g for g, chans in self.producer_table.items() if connection in chans]:
            self.unregister_producer(group, connection)

    def scan_not_active(self, now: float) -> int:
        """Drop channels silent for longer than the expiry; returns how many went."""
        dropped = 0
        for group, info in list(self.consumer_table.items()):
            for conn, channel in list(info.channels.items()):
                if now - channel.last_update > self.channel_expired:
                    log.warning(
                        "consumer %s of group %s silent for %.0f s: dropped",
                        channel.client_id, group, now - channel.last_update,
                    )  # fmt: skip
                    self.unregister_consumer(group, conn)
                    dropped += 1
        for group, channels in list(self.producer_table.items()):
            for conn, channel in list(channels.items()):
                if now - channel.last_update > self.channel_expired:
                    log.warning(
                        "producer %s of group %s silent for %.0f s: dropped",
                        channel.client_id, group, now - channel.last_update,
                    )  # fmt: skip
                    self.unregister_producer(group, conn)
                    dropped += 1
        return dropped

    def take_changed_groups(self) -> list[tuple[str, list[Connection]]]:
        """Each changed consumer group still with members, and the connections to tell;
        forgets them."""
        if not self.changed_groups:
            return []
        told = []
        for group in self.changed_groups:
            info = self.consumer_table.get(group)
            if info is not None and info.channels:
                told.append((group, list(info.channels)))
        self.changed_groups.clear()
        return told


# -- commands ----------------------------------------------------------------------------------


@attrs.frozen
class ConsumerHeartbeat:
    """One consumer group of a heartbeat."""

    group: str
    consume_type: ConsumeType
    message_model: MessageModel
    consume_from_where: ConsumeFromWhere
    subscriptions: tuple[SubscriptionData, ...]
    notify: bool = True  # tell the group's members when this changes the group


@attrs.frozen
class Heartbeat(Request[None]):
    """HEART_BEAT: a client's consumer and producer groups on one connection (a cast, or a
    call when the answer must wait until the table has it: see `ClientRequests.heart_beat`)."""

    connection: Connection
    client_id: str
    language: LanguageCode
    version: int
    now: float  # trio.current_time() when it arrived
    consumers: tuple[ConsumerHeartbeat, ...] = ()
    producer_groups: tuple[str, ...] = ()


@attrs.frozen
class UnregisterClient:
    """UNREGISTER_CLIENT: a connection leaves a producer and / or consumer group (a cast)."""

    connection: Connection
    producer_group: str | None = None
    consumer_group: str | None = None


@attrs.frozen
class ConnectionClosed:
    """A remoting connection closed: forget it everywhere (a cast)."""

    connection: Connection


@attrs.frozen
class ScanNotActiveChannels:
    """Drop channels silent for longer than the expiry (a cast from the scanner)."""


ClientCommand: TypeAlias = Heartbeat | UnregisterClient | ConnectionClosed | ScanNotActiveChannels

Notifier = Callable[[str, list[Connection]], None]


@attrs.frozen
class ClientManagerStatistics(ActorStatistics):
    """The client actor's counters and its tables at one moment."""

    consumer_groups: int
    consumer_channels: int
    producer_groups: int
    producer_channels: int
    channels_expired: int
    notifications: int  # groups told of a change


class ClientManager(TableActor[ClientCommand]):
    """Owns the broker's `ClientTable`; see the module docstring."""

    # Connections close in numbers while the broker stops; the table goes with it.
    quiet_drops = (ConnectionClosed,)

    def __init__(self, channel_expired_ms: int = 120_000, scan_interval: float = 10.0) -> None:
        super().__init__("clients")
        self.state = ClientTable(channel_expired_ms / 1000)
        self.scan_interval = scan_interval
        #: Called with (group, connections to tell) when a group's membership changes, in
        #: the actor's task.
        self.notifier: Notifier | None = None
        self.channels_expired = 0
        self.notifications = 0

    # -- reads (inline, no hop) -------------------------------------------------------------

    def get_consumer_group_info(self, group: str) -> ConsumerGroupInfo | None:
        """The group's members and subscriptions."""
        return self.state.consumer_table.get(group)

    @property
    def consumer_table(self) -> Mapping[str, ConsumerGroupInfo]:
        """Consumer group -> members and subscriptions."""
        return self.state.consumer_table

    @property
    def producer_table(self) -> Mapping[str, Mapping[Connection, ClientChannel]]:
        """Producer group -> connection -> channel."""
        return self.state.producer_table

    @property
    def channel_expired(self) -> float:
        """Seconds of silence after which a channel is dropped."""
        return self.state.channel_expired

    # -- changes from synchronous code ------------------------------------------------------

    def connection_closed(self, connection: Connection) -> None:
        """The server's close listener: have the connection forgotten everywhere."""
        try:
            self.cast_nowait(ConnectionClosed(connection))
        except ActorStopped:
            pass  # the broker is stopping (or the actor restarting): the scan drops it later
        except ActorError as exc:
            log.warning(
                "close of %s not handled now (%s); its entries expire after %.0f s",
                connection.peer, exc, self.state.channel_expired,
            )  # fmt: skip

    # -- the actor --------------------------------------------------------------------------

    def start_background(self, nursery: trio.Nursery) -> None:
        """The expiry scanner."""
        nursery.start_soon(self._scanner)

    def apply(self, command: ClientCommand) -> Any:
        """Apply one command, then tell the groups it changed."""
        table = self.state
        try:
            match command:
                case Heartbeat():
                    self._heartbeat(command)
                case UnregisterClient():
                    if command.producer_group:
                        table.unregister_producer(command.producer_group, command.connection)
                    if command.consumer_group:
                        table.unregister_consumer(command.consumer_group, command.connection)
                case ConnectionClosed():
                    table.connection_closed(command.connection)
                case ScanNotActiveChannels():
                    self.channels_expired += table.scan_not_active(trio.current_time())
                case _:
                    raise TypeError(f"the client actor takes no {type(command).__name__}")
        finally:
            self._tell(table.take_changed_groups())
        return None

    def statistics(self) -> ClientManagerStatistics:
        """Actor counters and table sizes."""
        table = self.state
        return ClientManagerStatistics(
            **self._statistics_fields(),
            consumer_groups=len(table.consumer_table),
            consumer_channels=sum(len(i.channels) for i in table.consumer_table.values()),
            producer_groups=len(table.producer_table),
            producer_channels=sum(len(c) for c in table.producer_table.values()),
            channels_expired=self.channels_expired,
            notifications=self.notifications,
        )

    def _heartbeat(self, command: Heartbeat) -> None:
        table = self.state

        def channel() -> ClientChannel:
            return ClientChannel(
                command.connection, command.client_id, command.language, command.version,
                command.now,
            )  # fmt: skip

        for consumer in command.consumers:
            changed = table.register_consumer(
                consumer.group, channel(), consumer.consume_type, consumer.message_model,
                consumer.consume_from_where, consumer.subscriptions, consumer.notify,
            )  # fmt: skip
            if changed:
                log.info(
                    "consumer group %s: %s joined or changed its subscriptions",
                    consumer.group, command.client_id,
                )  # fmt: skip
        for group in command.producer_groups:
            table.register_producer(group, channel())

    def _tell(self, groups: list[tuple[str, list[Connection]]]) -> None:
        notifier = self.notifier
        if notifier is None:
            return
        for group, connections in groups:
            self.notifications += 1
            try:
                notifier(group, connections)
            except Exception:
                log.exception("could not tell the members of %s of its change", group)

    async def _scanner(self) -> None:
        while True:
            await trio.sleep(self.scan_interval)
            try:
                self.cast_nowait(ScanNotActiveChannels())
            except ActorError as exc:
                log.debug("clients: expiry scan skipped: %s", exc)
