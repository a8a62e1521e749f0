"""The operator's requests about a broker's configuration: its settings, its topics and its
subscription groups (mqadmin's getBrokerConfig, updateBrokerConfig, updateTopic, deleteTopic,
updateSubGroup, deleteSubGroup, and the tables a slave's config sync reads).

UPDATE_BROKER_CONFIG (25) changes only `RUNTIME_KEYS`, the settings the broker reads at each
use; any other key, an unknown key or a bad value refuses the whole request and changes
nothing. A broker started with a config file (``-c broker.conf``) writes the changed keys
into that file before it applies them, as RocketMQ's broker persists its configuration to the
file it was started with (here only the changed lines change; comments and other settings
stay), so they hold after a restart. GET_BROKER_CONFIG (26) answers every setting as
``key=value`` lines. Topic and group changes go to the table actors and are answered once
applied and written to the table's file
(`TableActor.call_persisted`), as RocketMQ persists before it answers: a broker killed right
after the answer still has the change when it restarts.

The sheet's WIPE_WRITE_PERM_OF_BROKER (205) is a registry request; brokers have no such code.
"""

from __future__ import annotations

import logging
from pathlib import Path

import attrs
import trio

from actors.broker.config import BrokerConfig, ConfigError
from actors.broker.tables.groups import DeleteGroup, SubscriptionGroupManager, UpdateGroup
from actors.broker.tables.offsets import ConsumerOffsetManager, RemoveGroupOffsets
from actors.broker.tables.topics import (
    BumpDataVersion,
    DeleteTopicConfig,
    TopicManager,
    UpdateTopicConfig,
)
from protocol.bodies import (
    BodyError,
    SubscriptionGroupConfig,
    TopicAttributeError,
    TopicConfig,
    TopicFilterType,
    TopicList,
    parse_attribute_changes,
)
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.connection import Connection
from protocol.headers import (
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetBrokerConfigResponseHeader,
    GetTopicConfigRequestHeader,
    decode_header,
    encode_header,
)
from protocol.names import SYSTEM_TOPICS
from supervisors.config import parse_properties, property_key, update_properties_file

log = logging.getLogger("boltmq.broker.admin")

#: Settings UPDATE_BROKER_CONFIG may change: each is read where it is used, so a change
#: takes effect with the next request.
RUNTIME_KEYS = frozenset(
    {
        "brokerPermission",
        "autoCreateTopicEnable",
        "autoCreateSubscriptionGroup",
        "notifyConsumerIdsChangedEnable",
        "longPollingEnable",
        "shortPollingTimeMills",
        "slaveReadEnable",
        "whichBrokerWhenConsumeSlowly",
    }
)

_FIELD_BY_KEY = {property_key(field): field.name for field in attrs.fields(BrokerConfig)}


@attrs.frozen
class ConfigAdminParts:
    """What the operator's settings, topic and group requests change."""

    config: BrokerConfig
    topics: TopicManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    config_file: Path | None


class ConfigAdmin:
    """Handlers of the operator's configuration requests."""

    def __init__(self, parts: ConfigAdminParts) -> None:
        self.parts = parts

    # -- settings ------------------------------------------------------------------------------

    def get_broker_config(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        parts = self.parts
        text = "".join(f"{key}={value}\n" for key, value in parts.config.to_properties().items())
        version = parts.topics.data_version.to_json().decode()
        ext = encode_header(GetBrokerConfigResponseHeader(version=version))
        return request.response(ext_fields=ext, body=text.encode())

    async def update_broker_config(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        raw = bytes(request.body or b"")
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            text = raw.decode("iso-8859-1")
        try:
            changes = parse_properties(text, source="UPDATE_BROKER_CONFIG body")
        except ConfigError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        unknown = sorted(key for key in changes if key not in _FIELD_BY_KEY)
        if unknown:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"unknown broker setting(s) {', '.join(unknown)}; nothing was changed",
            )
        fixed = sorted(key for key in changes if key not in RUNTIME_KEYS)
        if fixed:
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"{', '.join(fixed)} cannot change while the broker runs (set them in "
                f"broker.conf and restart); settings that can: {', '.join(sorted(RUNTIME_KEYS))}. "
                "Nothing was changed",
            )
        try:
            checked = BrokerConfig.from_properties(changes)
        except ConfigError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"{exc}; nothing was changed")
        parts = self.parts
        if parts.config_file is not None:
            # Written before it is applied: a change the file cannot keep is no change.
            try:
                await trio.to_thread.run_sync(update_properties_file, parts.config_file, changes)
            except OSError as exc:
                return request.response(
                    ResponseCode.SYSTEM_ERROR,
                    f"could not write {parts.config_file}: {exc}; nothing was changed",
                )
        for key in changes:
            name = _FIELD_BY_KEY[key]
            setattr(parts.config, name, getattr(checked, name))
        parts.groups.auto_create = parts.config.auto_create_subscription_group
        if "brokerPermission" in changes:
            # As RocketMQ: a new data version, so the registries replace the queue data
            # with perms folded by the broker's permission (the registrar's on_change hook
            # registers at once).
            await parts.topics.call_persisted(BumpDataVersion())
        if parts.config_file is not None:
            log.info(
                "broker settings changed by %s and written to %s: %s",
                connection.peer, parts.config_file, changes,
            )  # fmt: skip
        else:
            log.info(
                "broker settings changed by %s until the broker stops (it was started without "
                "a config file, -c, to write them to): %s",
                connection.peer, changes,
            )  # fmt: skip
        return request.response()

    # -- topics --------------------------------------------------------------------------------

    async def update_and_create_topic(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        from actors.broker.tables.topics import check_topic_name

        header = decode_header(CreateTopicRequestHeader, request.ext_fields)
        parts = self.parts
        if parts.config.is_slave:
            return request.response(
                ResponseCode.NO_PERMISSION, "a slave does not create topics; ask its master"
            )
        problem = check_topic_name(header.topic)
        if problem is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, problem)
        if (
            header.topic in parts.topics.system_topics
            or header.topic == parts.config.broker_cluster_name
        ):
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"topic {header.topic} is a system topic"
            )
        try:
            filter_type = TopicFilterType[header.topic_filter_type or "SINGLE_TAG"]
        except KeyError:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"topicFilterType {header.topic_filter_type!r} is not SINGLE_TAG or MULTI_TAG",
            )
        try:
            changes = parse_attribute_changes(header.attributes)
        except TopicAttributeError as exc:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"topic {header.topic} not changed: {exc}"
            )
        try:
            stored = await parts.topics.call_persisted(UpdateTopicConfig(
                TopicConfig(
                    topic_name=header.topic,
                    read_queue_nums=header.read_queue_nums,
                    write_queue_nums=header.write_queue_nums,
                    perm=header.perm,
                    topic_filter_type=filter_type,
                    topic_sys_flag=header.topic_sys_flag or 0,
                    order=header.order,
                ),
                tuple(changes.items()),
            ))  # fmt: skip
        except TopicAttributeError as exc:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"topic {header.topic} not changed: {exc}"
            )
        if changes:
            log.info(
                "topic %s attributes set by %s: %s",
                header.topic, connection.peer, stored.attributes or "{}",
            )  # fmt: skip
        return request.response()

    def get_topic_config(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        """GET_TOPIC_CONFIG (RocketMQ 5): the topic's config with its attributes, as the JSON
        of RocketMQ 5's TopicConfigAndQueueMapping (no static-topic mapping here)."""
        header = decode_header(GetTopicConfigRequestHeader, request.ext_fields)
        topic_config = self.parts.topics.select(header.topic)
        if topic_config is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic {header.topic} does not exist on broker {self.parts.config.broker_name}",
            )
        return request.response(body=topic_config.to_json())

    async def delete_topic_in_broker(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(DeleteTopicRequestHeader, request.ext_fields)
        await self.parts.topics.call_persisted(DeleteTopicConfig(header.topic))
        return request.response()

    def get_all_topic_config(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        return request.response(body=self.parts.topics.to_json())

    def get_system_topic_list(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        topics = sorted(SYSTEM_TOPICS | self.parts.topics.system_topics)
        return request.response(body=TopicList(topic_list=topics).to_json())

    # -- subscription groups -------------------------------------------------------------------

    async def update_and_create_group(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        try:
            config = SubscriptionGroupConfig.from_json(request.body or b"")
        except BodyError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad group body: {exc}")
        await self.parts.groups.call_persisted(UpdateGroup(config))
        return request.response()

    async def delete_group(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(DeleteSubscriptionGroupRequestHeader, request.ext_fields)
        await self.parts.groups.call_persisted(DeleteGroup(header.group_name))
        if header.remove_offset:
            await self.parts.offsets.call_persisted(RemoveGroupOffsets(header.group_name))
        return request.response()

    def get_all_group_config(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        return request.response(body=self.parts.groups.to_json())
