"""JSON bodies of the remoting protocol and the broker's and registry's JSON config files.

Each body is an attrs class with ``from_json(data)`` and ``to_json()``. Decoding is lenient,
as fastjson is: keys in any order, unknown keys ignored, missing collections empty, numbers
given as strings coerced, enums given by NAME or by ordinal (the C++ client sends ordinals),
map keys quoted or bare, `MessageQueue` map keys as objects. Encoding is compact with keys
sorted, enums by name, None-valued optional fields omitted, and map keys in the form the
Java side writes (sheet 4.10):

- standard JSON (quoted keys) for route data, cluster info and everything else, except
- fastjson's own form for ``consumerOffset.json`` and ``delayOffset.json`` (bare int keys)
  and for the MessageQueue-keyed ConsumeStats, TopicStatsTable and ResetOffsetBody.

A bad body raises `BodyError` (a ValueError) naming the body class and the place.
"""

from __future__ import annotations

import datetime
import enum
import struct
import typing
import zlib
from collections.abc import Callable
from typing import Any, ClassVar, Self

import attrs
import cattrs
import orjson
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from protocol import fastjson
from protocol.codes import LanguageCode
from protocol.headers import wire_keys

PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1


def perm_to_string(perm: int) -> str:
    """``RWX``-style text of a perm value, as mqadmin prints it (``RW-``)."""
    return (
        ("R" if perm & PERM_READ else "-")
        + ("W" if perm & PERM_WRITE else "-")
        + ("X" if perm & PERM_INHERIT else "-")
    )


class BodyError(ValueError):
    """A body that does not decode; the message names the body class and what is wrong."""


class ConsumeType(enum.IntEnum):
    """How a consumer consumes: pull (actively) or push (passively)."""

    CONSUME_ACTIVELY = 0
    CONSUME_PASSIVELY = 1


class MessageModel(enum.IntEnum):
    """Consumer group message model."""

    BROADCASTING = 0
    CLUSTERING = 1


class ConsumeFromWhere(enum.IntEnum):
    """Where a new consumer group starts."""

    CONSUME_FROM_LAST_OFFSET = 0
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = 1
    CONSUME_FROM_MIN_OFFSET = 2
    CONSUME_FROM_MAX_OFFSET = 3
    CONSUME_FROM_FIRST_OFFSET = 4
    CONSUME_FROM_TIMESTAMP = 5


class TopicFilterType(enum.IntEnum):
    """Topic filter type (only SINGLE_TAG is used in practice)."""

    SINGLE_TAG = 0
    MULTI_TAG = 1


class _Body:
    """``from_json`` / ``to_json`` for the attrs body classes below."""

    __slots__ = ()
    #: True where Java writes fastjson's non-standard map keys (bare ints, object keys).
    _fastjson_form: ClassVar[bool] = False

    @classmethod
    def from_json(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """Decode a body (standard JSON or fastjson's dialect)."""
        try:
            doc = fastjson.loads(data)
        except ValueError as exc:
            raise BodyError(f"the {cls.__name__} body is not JSON: {exc}") from None
        return cls.from_obj(doc)

    @classmethod
    def from_obj(cls, doc: Any) -> Self:
        """Build from an already parsed JSON value."""
        if not isinstance(doc, dict):
            raise BodyError(f"the {cls.__name__} body is not a JSON object")
        try:
            return _converter.structure(doc, cls)
        except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
            raise BodyError(f"bad {cls.__name__} body: {_describe(exc)}") from None

    def to_obj(self) -> dict[str, Any]:
        """The JSON object (map keys still ints or `fastjson.ObjectKey`s)."""
        return _converter.unstructure(self)  # type: ignore[no-any-return]

    def to_json(self) -> bytes:
        """Compact JSON, keys sorted, in the form a Java peer writes this body in."""
        obj = self.to_obj()
        if self._fastjson_form:
            return fastjson.dumps(obj)
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)


# -- route data and registry answers (4.1-4.3) ------------------------------------------------


@attrs.frozen(kw_only=True)
class MessageQueue(_Body):
    """One queue of a topic on a broker; hashable, and a map key in several bodies."""

    topic: str
    broker_name: str
    queue_id: int


@attrs.frozen(kw_only=True)
class QueueData(_Body):
    """A topic's queues on one broker; written with both ``topicSysFlag`` and ``topicSynFlag``."""

    broker_name: str
    read_queue_nums: int = 0
    write_queue_nums: int = 0
    perm: int = PERM_READ | PERM_WRITE
    topic_sys_flag: int = 0


@attrs.frozen(kw_only=True)
class BrokerData(_Body):
    """A broker group's addresses by broker id (0 is the master)."""

    cluster: str = ""
    broker_name: str
    broker_addrs: dict[int, str] = attrs.Factory(dict)


@attrs.frozen(kw_only=True)
class TopicRouteData(_Body):
    """GET_ROUTEINFO_BY_TOPIC body."""

    order_topic_conf: str | None = None
    queue_datas: list[QueueData] = attrs.Factory(list)
    broker_datas: list[BrokerData] = attrs.Factory(list)
    filter_server_table: dict[str, list[str]] = attrs.Factory(dict)


@attrs.frozen(kw_only=True)
class ClusterInfo(_Body):
    """GET_BROKER_CLUSTER_INFO body."""

    broker_addr_table: dict[str, BrokerData] = attrs.Factory(dict)
    cluster_addr_table: dict[str, list[str]] = attrs.Factory(dict)


@attrs.frozen(kw_only=True)
class TopicList(_Body):
    """A list of topic names, with the answering broker's address in some replies."""

    topic_list: list[str] = attrs.Factory(list)
    broker_addr: str | None = None


@attrs.frozen(kw_only=True)
class KVTable(_Body):
    """A string-to-string table (KV namespaces, broker runtime info)."""

    table: dict[str, str] = attrs.Factory(dict)


@attrs.frozen(kw_only=True)
class GroupList(_Body):
    """A list of consumer group names."""

    group_list: list[str] = attrs.Factory(list)


@attrs.frozen(kw_only=True)
class GetConsumerListByGroupResponseBody(_Body):
    """GET_CONSUMER_LIST_BY_GROUP body: the client ids of a group's live consumers."""

    consumer_id_list: list[str] = attrs.Factory(list)


# -- topic config and broker registration (4.4, 4.11) -------------------------------------------


@attrs.frozen(kw_only=True)
class DataVersion(_Body):
    """Version of a broker's topic table; equal when both fields are equal."""

    timestamp: int = 0
    counter: int = 0


@attrs.frozen(kw_only=True)
class TopicConfig(_Body):
    """One topic of a broker's topic table (``topics.json`` entry)."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: TopicFilterType = TopicFilterType.SINGLE_TAG
    topic_sys_flag: int = 0
    order: bool = False


@attrs.frozen(kw_only=True)
class TopicConfigSerializeWrapper(_Body):
    """``topics.json`` and GET_ALL_TOPIC_CONFIG body."""

    topic_config_table: dict[str, TopicConfig] = attrs.Factory(dict)
    data_version: DataVersion = attrs.Factory(DataVersion)


_INT = struct.Struct(">i")
_MAX_INFLATED = 64 << 20


@attrs.frozen(kw_only=True)
class RegisterBrokerBody(_Body):
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
                fields = reader.framed().decode().split(" ")
                if len(fields) < 5:
                    raise BodyError(f"bad topic line {' '.join(fields)!r}")
                name, read, write, perm, filter_type = fields[:5]
                table[name] = TopicConfig(
                    topic_name=name,
                    read_queue_nums=int(read),
                    write_queue_nums=int(write),
                    perm=int(perm),
                    topic_filter_type=TopicFilterType[filter_type],
                )
            servers = orjson.loads(reader.framed())
        except (zlib.error, struct.error, KeyError, ValueError) as exc:
            raise BodyError(f"bad compressed RegisterBrokerBody: {exc}") from None
        if not isinstance(servers, list):
            raise BodyError("bad compressed RegisterBrokerBody: filter servers are not a list")
        wrapper = TopicConfigSerializeWrapper(topic_config_table=table, data_version=version)
        return cls(topic_config_serialize_wrapper=wrapper, filter_server_list=servers)


# -- client heartbeat and connections (4.5-4.7) ------------------------------------------------


@attrs.frozen(kw_only=True)
class SubscriptionData(_Body):
    """One subscription of a consumer group; ``sub_version`` may arrive as a string (C++)."""

    topic: str
    sub_string: str = "*"
    class_filter_mode: bool = False
    tags_set: list[str] = attrs.Factory(list)
    code_set: list[int] = attrs.Factory(list)
    sub_version: int = 0
    expression_type: str = "TAG"


@attrs.frozen(kw_only=True)
class ConsumerData(_Body):
    """A consumer group in a heartbeat."""

    group_name: str
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    subscription_data_set: list[SubscriptionData] = attrs.Factory(list)
    unit_mode: bool = False


@attrs.frozen(kw_only=True)
class ProducerData(_Body):
    """A producer group in a heartbeat."""

    group_name: str


@attrs.frozen(kw_only=True)
class HeartbeatData(_Body):
    """HEART_BEAT body."""

    client_id: str = attrs.field(metadata={"wire": "clientID"})
    producer_data_set: list[ProducerData] = attrs.Factory(list)
    consumer_data_set: list[ConsumerData] = attrs.Factory(list)


@attrs.frozen(kw_only=True)
class LockBatchRequestBody(_Body):
    """LOCK_BATCH_MQ body."""

    consumer_group: str
    client_id: str
    only_this_broker: bool = False
    mq_set: list[MessageQueue] = attrs.Factory(list)


@attrs.frozen(kw_only=True)
class UnlockBatchRequestBody(_Body):
    """UNLOCK_BATCH_MQ body."""

    consumer_group: str
    client_id: str
    only_this_broker: bool = False
    mq_set: list[MessageQueue] = attrs.Factory(list)


@attrs.frozen(kw_only=True)
class LockBatchResponseBody(_Body):
    """LOCK_BATCH_MQ answer: the queues now locked by the asking client."""

    lock_ok_mq_set: list[MessageQueue] = attrs.field(factory=list, metadata={"wire": "lockOKMQSet"})


@attrs.frozen(kw_only=True)
class Connection(_Body):
    """One client connection as admin tools see it."""

    client_id: str = ""
    client_addr: str = ""
    language: LanguageCode = LanguageCode.JAVA
    version: int = 0


@attrs.frozen(kw_only=True)
class ConsumerConnection(_Body):
    """GET_CONSUMER_CONNECTION_LIST body."""

    connection_set: list[Connection] = attrs.Factory(list)
    subscription_table: dict[str, SubscriptionData] = attrs.Factory(dict)
    consume_type: ConsumeType | None = None
    message_model: MessageModel | None = None
    consume_from_where: ConsumeFromWhere | None = None


@attrs.frozen(kw_only=True)
class ProducerConnection(_Body):
    """GET_PRODUCER_CONNECTION_LIST body."""

    connection_set: list[Connection] = attrs.Factory(list)


# -- groups and offsets (4.8, 4.9, 4.11, 4.12) ---------------------------------------------------


@attrs.frozen(kw_only=True)
class SubscriptionGroupConfig(_Body):
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


@attrs.frozen(kw_only=True)
class SubscriptionGroupWrapper(_Body):
    """``subscriptionGroup.json`` and GET_ALL_SUBSCRIPTIONGROUP_CONFIG body."""

    subscription_group_table: dict[str, SubscriptionGroupConfig] = attrs.Factory(dict)
    data_version: DataVersion = attrs.Factory(DataVersion)


@attrs.frozen(kw_only=True)
class ConsumerOffsetSerializeWrapper(_Body):
    """``consumerOffset.json``: ``topic@group`` -> queue id -> next offset to consume."""

    _fastjson_form: ClassVar[bool] = True
    offset_table: dict[str, dict[int, int]] = attrs.Factory(dict)


@attrs.frozen(kw_only=True)
class DelayOffsetSerializeWrapper(_Body):
    """``delayOffset.json``: delay level (1-based) -> SCHEDULE_TOPIC_XXXX queue offset."""

    _fastjson_form: ClassVar[bool] = True
    offset_table: dict[int, int] = attrs.Factory(dict)


@attrs.frozen(kw_only=True)
class KVConfigSerializeWrapper(_Body):
    """The registry's ``kvConfig.json``: namespace -> key -> value."""

    config_table: dict[str, dict[str, str]] = attrs.Factory(dict)


@attrs.frozen(kw_only=True)
class OffsetWrapper(_Body):
    """One queue's line in ConsumeStats."""

    broker_offset: int = 0
    consumer_offset: int = 0
    last_timestamp: int = 0


@attrs.frozen(kw_only=True)
class ConsumeStats(_Body):
    """GET_CONSUME_STATS body (MessageQueue object keys)."""

    _fastjson_form: ClassVar[bool] = True
    offset_table: dict[MessageQueue, OffsetWrapper] = attrs.Factory(dict)
    consume_tps: float = 0.0


@attrs.frozen(kw_only=True)
class TopicOffset(_Body):
    """One queue's line in TopicStatsTable."""

    min_offset: int = 0
    max_offset: int = 0
    last_update_timestamp: int = 0


@attrs.frozen(kw_only=True)
class TopicStatsTable(_Body):
    """GET_TOPIC_STATS_INFO body (MessageQueue object keys)."""

    _fastjson_form: ClassVar[bool] = True
    offset_table: dict[MessageQueue, TopicOffset] = attrs.Factory(dict)


@attrs.frozen(kw_only=True)
class ResetOffsetBody(_Body):
    """RESET_CONSUMER_CLIENT_OFFSET / INVOKE_BROKER_TO_RESET_OFFSET body (object keys)."""

    _fastjson_form: ClassVar[bool] = True
    offset_table: dict[MessageQueue, int] = attrs.Factory(dict)


@attrs.frozen(kw_only=True)
class BrokerStatsItem(_Body):
    """One window of BrokerStatsData."""

    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0


@attrs.frozen(kw_only=True)
class BrokerStatsData(_Body):
    """VIEW_BROKER_STATS_DATA body."""

    stats_minute: BrokerStatsItem = attrs.Factory(BrokerStatsItem)
    stats_hour: BrokerStatsItem = attrs.Factory(BrokerStatsItem)
    stats_day: BrokerStatsItem = attrs.Factory(BrokerStatsItem)


@attrs.frozen(kw_only=True)
class QueueTimeSpan(_Body):
    """One queue's times in QueryConsumeTimeSpanBody; written with the ``*Str`` renderings."""

    message_queue: MessageQueue
    min_time_stamp: int = 0
    max_time_stamp: int = 0
    consume_time_stamp: int = 0
    delay_time: int = 0


@attrs.frozen(kw_only=True)
class QueryConsumeTimeSpanBody(_Body):
    """QUERY_CONSUME_TIME_SPAN body."""

    consume_time_span_set: list[QueueTimeSpan] = attrs.Factory(list)


# -- answers of a push consumer to the broker's calls (GET_CONSUMER_RUNNING_INFO 307, ...) ----


@attrs.frozen(kw_only=True)
class ProcessQueueInfo(_Body):
    """One queue's local state in ConsumerRunningInfo.mqTable (RocketMQ's ProcessQueueInfo)."""

    commit_offset: int = 0
    cached_msg_min_offset: int = 0
    cached_msg_max_offset: int = 0
    cached_msg_count: int = 0
    cached_msg_size_in_mi_b: int = attrs.field(default=0, metadata={"wire": "cachedMsgSizeInMiB"})
    transaction_msg_min_offset: int = 0
    transaction_msg_max_offset: int = 0
    transaction_msg_count: int = 0
    locked: bool = False
    try_unlock_times: int = 0
    last_lock_timestamp: int = 0
    droped: bool = False  # sic: the Java field name
    last_pull_timestamp: int = 0
    last_consume_timestamp: int = 0


@attrs.frozen(kw_only=True)
class ConsumeStatus(_Body):
    """Per-topic consume rates in ConsumerRunningInfo.statusTable."""

    pull_rt: float = attrs.field(default=0.0, metadata={"wire": "pullRT"})
    pull_tps: float = attrs.field(default=0.0, metadata={"wire": "pullTPS"})
    consume_rt: float = attrs.field(default=0.0, metadata={"wire": "consumeRT"})
    consume_ok_tps: float = attrs.field(default=0.0, metadata={"wire": "consumeOKTPS"})
    consume_failed_tps: float = attrs.field(default=0.0, metadata={"wire": "consumeFailedTPS"})
    consume_failed_msgs: int = 0


@attrs.frozen(kw_only=True)
class ConsumerRunningInfo(_Body):
    """GET_CONSUMER_RUNNING_INFO answer; ``mqTable`` has MessageQueue object keys (fastjson)."""

    _fastjson_form: ClassVar[bool] = True
    properties: dict[str, str] = attrs.Factory(dict)
    subscription_set: list[SubscriptionData] = attrs.Factory(list)
    mq_table: dict[MessageQueue, ProcessQueueInfo] = attrs.Factory(dict)
    status_table: dict[str, ConsumeStatus] = attrs.Factory(dict)
    jstack: str | None = None


@attrs.frozen(kw_only=True)
class ConsumeMessageDirectlyResult(_Body):
    """CONSUME_MESSAGE_DIRECTLY answer; ``consume_result`` is a CMResult name (CR_SUCCESS, ...)."""

    order: bool = False
    auto_commit: bool = True
    consume_result: str = "CR_SUCCESS"
    remark: str | None = None
    spent_time_mills: int = 0


# -- the converter ----------------------------------------------------------------------------

_converter = cattrs.Converter(detailed_validation=True)


def _structure_int(value: Any, _: Any) -> int:
    if type(value) is int:
        return value
    if type(value) is str:
        return int(value)
    if type(value) is float and value.is_integer():
        return int(value)
    raise ValueError(f"expected an integer, got {value!r}")


def _structure_float(value: Any, _: Any) -> float:
    if type(value) in (int, float, str):
        return float(value)
    raise ValueError(f"expected a number, got {value!r}")


def _structure_bool(value: Any, _: Any) -> bool:
    if value is True or value is False:
        return value
    words = {"true": True, "false": False, "1": True, "0": False}
    if isinstance(value, (str, int)) and str(value).lower() in words:
        return words[str(value).lower()]
    raise ValueError(f"expected a boolean, got {value!r}")


def _structure_str(value: Any, _: Any) -> str:
    if type(value) is str:
        return value
    if type(value) in (int, float, bool):
        return str(value).lower() if type(value) is bool else str(value)
    raise ValueError(f"expected a string, got {value!r}")


def _enum_hook(cls: type[enum.IntEnum]) -> Callable[[Any, Any], Any]:
    by_name = {member.name: member for member in cls}

    def structure(value: Any, _: Any) -> Any:
        if type(value) is str:
            member = by_name.get(value) or by_name.get(value.upper())
            if member is not None:
                return member
            if value.lstrip("-").isdigit():
                return cls(int(value))
        elif type(value) is int:
            return cls(value)
        raise ValueError(f"{value!r} is not a {cls.__name__} name or ordinal")

    return structure


_converter.register_structure_hook(int, _structure_int)
_converter.register_structure_hook(float, _structure_float)
_converter.register_structure_hook(bool, _structure_bool)
_converter.register_structure_hook(str, _structure_str)
for _enum in (ConsumeType, MessageModel, ConsumeFromWhere, TopicFilterType, LanguageCode):
    _converter.register_structure_hook(_enum, _enum_hook(_enum))
    _converter.register_unstructure_hook(_enum, lambda member: member.name)


def _structure_factory(cls: type) -> Callable[[Any, Any], Any]:
    renames = {name: override(rename=key) for name, key in wire_keys(cls).items()}
    return make_dict_structure_fn(cls, _converter, **renames)  # type: ignore[arg-type]


def _unstructure_factory(cls: type) -> Callable[[Any], Any]:
    overrides = {
        field.name: override(
            rename=wire_keys(cls)[field.name], omit_if_default=field.default is None
        )
        for field in attrs.fields(cls)
    }
    return make_dict_unstructure_fn(cls, _converter, **overrides)  # type: ignore[arg-type]


_converter.register_structure_hook_factory(attrs.has, _structure_factory)
_converter.register_unstructure_hook_factory(attrs.has, _unstructure_factory)

_structure_mq = _structure_factory(MessageQueue)


def _structure_message_queue(value: Any, _: Any) -> MessageQueue:
    # As a map key it arrives as an ObjectKey (fastjson form) or as JSON text in a string.
    if isinstance(value, fastjson.ObjectKey):
        value = value.as_dict()
    elif isinstance(value, str):
        value = fastjson.loads(value)
    return _structure_mq(value, MessageQueue)  # type: ignore[no-any-return]


_converter.register_structure_hook(MessageQueue, _structure_message_queue)


def _is_mq_keyed(annotation: Any) -> bool:
    return typing.get_origin(annotation) is dict and typing.get_args(annotation)[0] is MessageQueue


def _mq_keyed_unstructure(annotation: Any) -> Callable[[Any], Any]:
    value_type = typing.get_args(annotation)[1]
    unstructure = _converter.unstructure

    def unstructure_map(table: dict[MessageQueue, Any]) -> dict[Any, Any]:
        return {
            fastjson.ObjectKey.of(unstructure(mq)): unstructure(value, value_type)
            for mq, value in table.items()
        }

    return unstructure_map


_converter.register_unstructure_hook_factory(_is_mq_keyed, _mq_keyed_unstructure)

_structure_queue_data = _structure_factory(QueueData)
_unstructure_queue_data = _unstructure_factory(QueueData)


def _queue_data_from(value: Any, _: Any) -> QueueData:
    # Brokers up to 4.8 (and the Go client) spell the flag topicSynFlag.
    if isinstance(value, dict) and "topicSysFlag" not in value and "topicSynFlag" in value:
        value = {**value, "topicSysFlag": value["topicSynFlag"]}
    return _structure_queue_data(value, QueueData)  # type: ignore[no-any-return]


def _queue_data_to(queue_data: QueueData) -> dict[str, Any]:
    obj: dict[str, Any] = _unstructure_queue_data(queue_data)
    obj["topicSynFlag"] = obj["topicSysFlag"]
    return obj


_converter.register_structure_hook(QueueData, _queue_data_from)
_converter.register_unstructure_hook(QueueData, _queue_data_to)

_unstructure_time_span = _unstructure_factory(QueueTimeSpan)


def _time_span_to(span: QueueTimeSpan) -> dict[str, Any]:
    obj: dict[str, Any] = _unstructure_time_span(span)
    obj["minTimeStampStr"] = _human_time(span.min_time_stamp)
    obj["maxTimeStampStr"] = _human_time(span.max_time_stamp)
    obj["consumeTimeStampStr"] = _human_time(span.consume_time_stamp)
    return obj


_converter.register_unstructure_hook(QueueTimeSpan, _time_span_to)


# -- helpers ------------------------------------------------------------------------------------


def _human_time(millis: int) -> str:
    # Java's UtilAll.timeMillisToHumanString2 layout: "yyyy-MM-dd HH:mm:ss,SSS", local time.
    moment = datetime.datetime.fromtimestamp(millis / 1000)
    return moment.strftime("%Y-%m-%d %H:%M:%S,") + f"{millis % 1000:03d}"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(exc))
    return str(exc) or type(exc).__name__


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
