"""A broker's tables: topic config, REGISTER_BROKER (plain and compressed), and the JSON files
it persists: topics.json, subscriptionGroup.json, consumerOffset.json, delayOffset.json
(sheet 4.4, 4.11, 4.12).
"""

from __future__ import annotations

import enum
import struct
import zlib
from typing import Any, ClassVar, Self

import attrs
import orjson

from protocol.bodies._attributes import MESSAGE_TYPE
from protocol.bodies._codec import (
    Body,
    BodyError,
    converter,
    register_enum,
    unstructure_factory,
)
from protocol.bodies._route import PERM_READ, PERM_WRITE


class TopicFilterType(enum.IntEnum):
    """Topic filter type (only SINGLE_TAG is used in practice)."""

    SINGLE_TAG = 0
    MULTI_TAG = 1


register_enum(TopicFilterType)


@attrs.frozen(kw_only=True)
class DataVersion(Body):
    """Version of a broker's topic table; equal when both fields are equal."""

    timestamp: int = 0
    counter: int = 0


@attrs.frozen(kw_only=True)
class TopicConfig(Body):
    """One topic of a broker's topic table (``topics.json`` entry)."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: TopicFilterType = TopicFilterType.SINGLE_TAG
    topic_sys_flag: int = 0
    order: bool = False
    #: RocketMQ 5's topic attributes (``message.type`` -> ``FIFO``, ...): see
    #: `protocol.bodies.alter_attributes`. Not part of the hash, as a dict cannot be.
    attributes: dict[str, str] = attrs.field(factory=dict, hash=False)

    @property
    def message_type(self) -> str:
        """RocketMQ 5's ``message.type`` attribute; NORMAL when it is not set."""
        return self.attributes.get(MESSAGE_TYPE, "NORMAL")


_unstructure_topic_config = unstructure_factory(TopicConfig)


def _topic_config_obj(config: TopicConfig) -> dict[str, Any]:
    # Empty attributes are left out, so a topic without them is written byte for byte as a
    # 4.x broker writes it (RocketMQ 5 writes "attributes":{}; either reads the other).
    obj: dict[str, Any] = _unstructure_topic_config(config)
    if not config.attributes:
        del obj["attributes"]
    return obj


converter.register_unstructure_hook(TopicConfig, _topic_config_obj)


@attrs.frozen(kw_only=True)
class TopicConfigSerializeWrapper(Body):
    """``topics.json`` and GET_ALL_TOPIC_CONFIG body."""

    topic_config_table: dict[str, TopicConfig] = attrs.Factory(dict)
    data_version: DataVersion = attrs.Factory(DataVersion)


_INT = struct.Struct(">i")
_MAX_INFLATED = 64 << 20


@attrs.frozen(kw_only=True)
class RegisterBrokerBody(Body):
    """REGISTER_BROKER body, plain JSON or the compressed form (sheet 4.4)."""

    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = attrs.Factory(
        TopicConfigSerializeWrapper
    )
    filter_server_list: list[str] = attrs.Factory(list)

    def encode(self, compressed: bool = False) -> bytes:
        """The body as sent with header ``compressed`` set to ``compressed``."""
        if not compressed:
            return self.to_json()
        wrapper = self.topic_config_serialize_wrapper
        parts = [
            _framed(wrapper.data_version.to_json()),
            _INT.pack(len(wrapper.topic_config_table)),
        ]
        for config in wrapper.topic_config_table.values():
            line = (
                f"{config.topic_name} {config.read_queue_nums} {config.write_queue_nums} "
                f"{config.perm} {config.topic_filter_type.name}"
            )
            if config.attributes:
                # RocketMQ 5's sixth field; left out when empty, as a 4.x registry takes
                # exactly five.
                line += " " + orjson.dumps(config.attributes).decode()
            parts.append(_framed(line.encode()))
        parts.append(_framed(orjson.dumps(self.filter_server_list)))
        return zlib.compress(b"".join(parts), 9)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, compressed: bool = False) -> Self:
        """Decode either form; the compressed one carries no topicSysFlag or order."""
        if not compressed:
            return cls.from_json(data)
        try:
            inflater = zlib.decompressobj()
            raw = inflater.decompress(bytes(data), _MAX_INFLATED)
            if inflater.unconsumed_tail:
                raise BodyError("the compressed RegisterBrokerBody inflates beyond 64 MiB")
            reader = _Reader(raw)
            version = DataVersion.from_json(reader.framed())
            table: dict[str, TopicConfig] = {}
            for _ in range(reader.read_int()):
                fields = reader.framed().decode().split(" ", 5)
                if len(fields) < 5:
                    raise BodyError(f"bad topic line {' '.join(fields)!r}")
                name, read, write, perm, filter_type = fields[:5]
                attributes = _attributes_field(fields[5]) if len(fields) > 5 else {}
                table[name] = TopicConfig(
                    topic_name=name,
                    read_queue_nums=int(read),
                    write_queue_nums=int(write),
                    perm=int(perm),
                    topic_filter_type=TopicFilterType[filter_type],
                    attributes=attributes,
                )
            servers = orjson.loads(reader.framed())
        except (zlib.error, struct.error, KeyError, ValueError) as exc:
            raise BodyError(f"bad compressed RegisterBrokerBody: {exc}") from None
        if not isinstance(servers, list):
            raise BodyError("bad compressed RegisterBrokerBody: filter servers are not a list")
        wrapper = TopicConfigSerializeWrapper(topic_config_table=table, data_version=version)
        return cls(topic_config_serialize_wrapper=wrapper, filter_server_list=servers)


@attrs.frozen(kw_only=True)
class SubscriptionGroupConfig(Body):
    """A consumer group's settings (``subscriptionGroup.json`` entry), sheet 4.12 defaults."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    #: RocketMQ 5: pops of the group are FIFO (a queue's next message after the last's ack).
    #: None (unset) is left out of the JSON, which stays RocketMQ 4.x's.
    consume_message_orderly: bool | None = None


@attrs.frozen(kw_only=True)
class SubscriptionGroupWrapper(Body):
    """``subscriptionGroup.json`` and GET_ALL_SUBSCRIPTIONGROUP_CONFIG body."""

    subscription_group_table: dict[str, SubscriptionGroupConfig] = attrs.Factory(dict)
    data_version: DataVersion = attrs.Factory(DataVersion)


@attrs.frozen(kw_only=True)
class ConsumerOffsetSerializeWrapper(Body):
    """``consumerOffset.json``: ``topic@group`` -> queue id -> next offset to consume."""

    _fastjson_form: ClassVar[bool] = True
    offset_table: dict[str, dict[int, int]] = attrs.Factory(dict)


@attrs.frozen(kw_only=True)
class DelayOffsetSerializeWrapper(Body):
    """``delayOffset.json``: delay level (1-based) -> SCHEDULE_TOPIC_XXXX queue offset."""

    _fastjson_form: ClassVar[bool] = True
    offset_table: dict[int, int] = attrs.Factory(dict)


def _attributes_field(text: str) -> dict[str, str]:
    # As RocketMQ 5: an attributes field that does not parse is dropped, not fatal.
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def _framed(data: bytes) -> bytes:
    return _INT.pack(len(data)) + data


class _Reader:
    """Big-endian int and length-prefixed reads over the inflated compressed body."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def read_int(self) -> int:
        (value,) = _INT.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(value)

    def framed(self) -> bytes:
        length = self.read_int()
        if length < 0 or self.pos + length > len(self.data):
            raise ValueError(f"a length of {length} overruns the body")
        chunk = self.data[self.pos : self.pos + length]
        self.pos += length
        return chunk
