"""Client connections (RocketMQ's ProducerManager and ConsumerManager).

Producers and consumers announce themselves with HEART_BEAT every 30 s; the broker records
each connection under its groups, with the consumers' subscriptions (a pull without its own
expression filters by them), tells a consumer group's members when membership or
subscriptions change (NOTIFY_CONSUMER_IDS_CHANGED, so they rebalance at once), and forgets a
connection when it closes or has been silent for ``channelExpiredTimeout`` (120 s).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import attrs
import trio

from protocol.bodies import (
    ConsumeFromWhere,
    ConsumeType,
    MessageModel,
    SubscriptionData,
)
from protocol.codes import LanguageCode
from protocol.connection import Connection
from protocol.message import tag_hash_code

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


Notifier = Callable[[str, list[Connection]], None]


class ClientManager:
    """Producer and consumer groups by connection; see the module docstring."""

    def __init__(self, channel_expired_ms: int = 120_000, scan_interval: float = 10.0) -> None:
        self.consumer_table: dict[str, ConsumerGroupInfo] = {}
        self.producer_table: dict[str, dict[Connection, ClientChannel]] = {}
        self.channel_expired = channel_expired_ms / 1000
        self.scan_interval = scan_interval
        #: Called with (group, connections to tell) when a group's membership changes.
        self.notifier: Notifier | None = None

    # -- consumers -------------------------------------------------------------------------

    def register_consumer(
        self,
        group: str,
        channel: ClientChannel,
        consume_type: ConsumeType,
        message_model: MessageModel,
        consume_from_where: ConsumeFromWhere,
        subscriptions: list[SubscriptionData],
        notify: bool = True,
    ) -> bool:
        """Record a consumer's heartbeat; True when membership or subscriptions changed."""
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
            if old is None or old.sub_string != sub.sub_string:
                changed = True
            if old is None or old.sub_version <= sub.sub_version:
                info.subscriptions[topic] = sub
        for topic in [t for t in info.subscriptions if t not in new_subs]:
            # A topic no member subscribes any more.
            del info.subscriptions[topic]
            changed = True
        if changed and notify:
            self._notify(group, info)
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
            self._notify(group, info)
        return True

    def find_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        """The group's subscription to ``topic`` from its heartbeats."""
        info = self.consumer_table.get(group)
        return None if info is None else info.subscriptions.get(topic)

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
        """Forget a closed connection everywhere (a server close listener)."""
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

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Scan for silent clients every ``scan_interval`` seconds."""
        task_status.started()
        while True:
            await trio.sleep(self.scan_interval)
            self.scan_not_active(trio.current_time())

    def _notify(self, group: str, info: ConsumerGroupInfo) -> None:
        if self.notifier is not None and info.channels:
            self.notifier(group, list(info.channels))
