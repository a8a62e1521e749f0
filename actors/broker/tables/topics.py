"""The broker's topic table (RocketMQ's TopicConfigManager), kept in ``config/topics.json``.

`TopicConfigTable` is the plain state: the system topics a broker creates at start, topics
created on a send to an unknown topic from the TBW102 template, retry and dead-letter topics,
admin changes; every change of a topic bumps the data version so registries learn about it.
`TopicManager` is the actor that alone changes it. Senders, pullers and queries read it inline
(`select`, `wrapper`, `data_version`); changes arrive as commands: calls from operator requests,
the schedule service and the HA config sync; `call_nowait` from the synchronous send and
send-back handlers when they must create a topic first (`TopicMissing`); casts where nobody
needs the answer (a heartbeat's retry topic, the transaction topics, the registry's order
topics). The `on_change` hooks (the registrar's registration) run in the actor's task after
every change of the data version.

A restart (a crash of the actor, restarted by the broker's supervisor) keeps the table: it lives
on the instance and each change is applied whole, so a crash loses the command that caused it
and the commands queued behind it (a send waiting for its topic is answered SYSTEM_ERROR and
retried by its producer; a lost order-topic update comes again with the next registration).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any, TypeAlias

import attrs

from actors.broker.config import BrokerConfig
from actors.broker.tables.table_actor import TableActor
from protocol.bodies import (
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    DataVersion,
    TopicConfig,
    TopicConfigSerializeWrapper,
    alter_attributes,
)
from protocol.codes import ResponseCode
from protocol.command import ConnectionClosedError, RemotingCommand, RemotingError
from protocol.connection import Connection, code_name
from protocol.names import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    BENCHMARK_TOPIC,
    OFFSET_MOVED_EVENT,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TRACE_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from supervisors.actor import ActorError, ActorStatistics, Request

log = logging.getLogger("boltmq.broker")

PERM_RW = PERM_READ | PERM_WRITE

#: Topics a producer may not send to (sheet 3.12).
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)

_VALID_TOPIC = re.compile(r"^[%|a-zA-Z0-9_-]+$")
TOPIC_MAX_LENGTH = 127


def check_topic_name(topic: str) -> str | None:
    """None when ``topic`` is a valid name, else a remark saying why not."""
    if not topic or not topic.strip():
        return "the topic name is blank"
    if len(topic) > TOPIC_MAX_LENGTH:
        return f"the topic name is longer than {TOPIC_MAX_LENGTH} characters"
    if not _VALID_TOPIC.match(topic):
        return f"the topic name {topic!r} has characters outside [%|a-zA-Z0-9_-]"
    return None


def now_ms() -> int:
    """Wall-clock epoch milliseconds."""
    return time.time_ns() // 1_000_000


class TopicConfigTable:
    """Topic name -> TopicConfig, with its data version; plain state, no I/O, no clock.

    Times (``now_ms``, wall-clock epoch milliseconds) come from the caller: they stamp data
    versions. `version` counts every change, the file's cue to be written.
    """

    def __init__(self, config: BrokerConfig, now_ms: int) -> None:
        self.config = config
        self.topic_config_table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion(timestamp=now_ms, counter=0)
        self.system_topics: set[str] = set()
        self.version = 0
        self._create_system_topics()

    def _create_system_topics(self) -> None:
        c = self.config

        def add(name: str, queues: int, perm: int) -> None:
            self.topic_config_table[name] = TopicConfig(
                topic_name=name, read_queue_nums=queues, write_queue_nums=queues, perm=perm
            )
            self.system_topics.add(name)

        add(SELF_TEST_TOPIC, 1, PERM_RW)
        if c.auto_create_topic_enable:
            add(AUTO_CREATE_TOPIC_KEY_TOPIC, c.default_topic_queue_nums, PERM_RW | PERM_INHERIT)
        add(BENCHMARK_TOPIC, 1024, PERM_RW)
        add(c.broker_cluster_name, 16, PERM_INHERIT | (PERM_RW if c.cluster_topic_enable else 0))
        add(c.broker_name, 1, PERM_INHERIT | (PERM_RW if c.broker_topic_enable else 0))
        add(OFFSET_MOVED_EVENT, 1, PERM_RW)
        add(SCHEDULE_TOPIC, 18, PERM_RW)
        if c.trace_topic_enable:
            add(TRACE_TOPIC, 1, PERM_RW)
        add(f"{c.broker_cluster_name}_REPLY_TOPIC", 1, PERM_RW)

    # -- reads -----------------------------------------------------------------------------

    def select(self, topic: str) -> TopicConfig | None:
        """The topic's config, or None."""
        return self.topic_config_table.get(topic)

    def wrapper(self) -> TopicConfigSerializeWrapper:
        """The whole table with its data version (topics.json, registration body)."""
        return TopicConfigSerializeWrapper(
            topic_config_table=dict(self.topic_config_table), data_version=self.data_version
        )

    def topic_from_template(
        self, topic: str, default_topic: str, client_queue_nums: int, topic_sys_flag: int = 0
    ) -> TopicConfig | None:
        """The topic a send to the unknown ``topic`` creates from the template
        ``default_topic``, or None when the template does not allow it (sheet 3.12)."""
        template = self.topic_config_table.get(default_topic)
        if template is None or not template.perm & PERM_INHERIT:
            return None
        if (
            default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC
            and not self.config.auto_create_topic_enable
        ):
            return None
        queues = max(1, min(client_queue_nums, template.write_queue_nums))
        return TopicConfig(
            topic_name=topic,
            read_queue_nums=queues,
            write_queue_nums=queues,
            perm=template.perm & ~PERM_INHERIT,
            topic_sys_flag=topic_sys_flag,
        )

    # -- changes ---------------------------------------------------------------------------

    def create_topic_in_send_message_method(
        self,
        topic: str,
        default_topic: str,
        client_queue_nums: int,
        topic_sys_flag: int,
        now_ms: int,
    ) -> TopicConfig | None:
        """``topic``, created from the template `topic_from_template` names when missing."""
        existing = self.topic_config_table.get(topic)
        if existing is not None:
            return existing
        created = self.topic_from_template(topic, default_topic, client_queue_nums, topic_sys_flag)
        if created is not None:
            self._put(created, now_ms)
        return created

    def create_topic_in_send_back(
        self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int, now_ms: int
    ) -> TopicConfig:
        """The retry / DLQ (or other internal) topic ``topic``, created with ``queue_nums``
        queues when missing; an existing topic is kept as it is."""
        existing = self.topic_config_table.get(topic)
        if existing is not None:
            return existing
        created = TopicConfig(
            topic_name=topic,
            read_queue_nums=queue_nums,
            write_queue_nums=queue_nums,
            perm=perm,
            topic_sys_flag=topic_sys_flag,
        )
        self._put(created, now_ms)
        return created

    def update_topic_config(
        self,
        topic_config: TopicConfig,
        now_ms: int,
        attribute_changes: Mapping[str, str] | None = None,
    ) -> TopicConfig:
        """Create or replace a topic (UPDATE_AND_CREATE_TOPIC) and answer what is stored.

        The topic keeps its RocketMQ 5 attributes, changed by the signed
        ``attribute_changes`` (``{"+message.type": "FIFO", "-key": ""}``); a refused change
        raises `TopicAttributeError` before anything changes.
        """
        existing = self.topic_config_table.get(topic_config.topic_name)
        current = existing.attributes if existing is not None else {}
        attributes = alter_attributes(current, attribute_changes or {}, create=existing is None)
        stored = attrs.evolve(topic_config, attributes=attributes)
        self._put(stored, now_ms)
        return stored

    def delete_topic_config(self, topic: str, now_ms: int) -> bool:
        """Remove a topic; False when it did not exist."""
        if self.topic_config_table.pop(topic, None) is None:
            return False
        self._changed(now_ms)
        return True

    def update_order_topics(self, order_topics: Iterable[str]) -> bool:
        """Mark exactly ``order_topics`` as ordered (the registry's ORDER_TOPIC_CONFIG); the
        data version stays. True when a topic changed."""
        wanted = set(order_topics)
        changed = False
        for name, cfg in self.topic_config_table.items():
            order = name in wanted
            if cfg.order != order:
                self.topic_config_table[name] = attrs.evolve(cfg, order=order)
                changed = True
        if changed:
            self.version += 1
        return changed

    def bump_data_version(self, now_ms: int) -> None:
        """Mark the table changed without changing a topic (e.g. the broker's permission
        changed), so registries take the next registration's queue data."""
        self._changed(now_ms)

    def replace(self, wrapper: TopicConfigSerializeWrapper) -> bool:
        """Take another broker's whole table and data version (a slave's config sync) when
        its data version differs from ours; True when replaced."""
        if wrapper.data_version == self.data_version:
            return False
        self.topic_config_table.clear()
        self.topic_config_table.update(wrapper.topic_config_table)
        self.data_version = wrapper.data_version
        self.version += 1
        return True

    def _put(self, topic_config: TopicConfig, now_ms: int) -> None:
        self.topic_config_table[topic_config.topic_name] = topic_config
        self._changed(now_ms)

    def _changed(self, now_ms: int) -> None:
        self.data_version = DataVersion(timestamp=now_ms, counter=self.data_version.counter + 1)
        self.version += 1

    # -- file ------------------------------------------------------------------------------

    def to_json(self) -> bytes:
        """topics.json."""
        return self.wrapper().to_json()

    def from_json(self, data: bytes) -> None:
        """Load topics.json over the system topics (the file wins for topics it holds)."""
        wrapper = TopicConfigSerializeWrapper.from_json(data)
        self.topic_config_table.update(wrapper.topic_config_table)
        self.data_version = wrapper.data_version


# -- commands ----------------------------------------------------------------------------------


@attrs.frozen
class CreateTopicInSendMessageMethod(Request[TopicConfig | None]):
    """A send to an unknown topic: create it from its default topic (the template) if that
    allows it; answers the topic, or None."""

    topic: str
    default_topic: str
    client_queue_nums: int
    topic_sys_flag: int = 0


@attrs.frozen
class CreateTopicInSendBack(Request[TopicConfig]):
    """A retry, dead-letter or internal topic, created when missing; answers the topic."""

    topic: str
    queue_nums: int
    perm: int = PERM_RW
    topic_sys_flag: int = 0


@attrs.frozen
class CreateSystemTopic(Request[TopicConfig]):
    """`CreateTopicInSendBack` for a topic the broker itself uses (the timer topic), which
    GET_SYSTEM_TOPIC_LIST_FROM_BROKER then lists and admins may not overwrite."""

    topic: str
    queue_nums: int
    perm: int = PERM_RW


@attrs.frozen
class UpdateTopicConfig(Request[TopicConfig]):
    """UPDATE_AND_CREATE_TOPIC; answers the topic as stored. ``attribute_changes`` are
    RocketMQ 5's signed attribute changes (pairs of ``"+key"``/``"-key"`` and value); a
    refused change raises `TopicAttributeError` and changes nothing."""

    topic_config: TopicConfig
    attribute_changes: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class DeleteTopicConfig(Request[bool]):
    """DELETE_TOPIC_IN_BROKER; answers whether the topic existed."""

    topic: str


@attrs.frozen
class BumpDataVersion(Request[None]):
    """A new data version without a topic change (the broker's permission changed)."""


@attrs.frozen
class ReplaceTopicTable(Request[bool]):
    """A slave's config sync: the master's table, taken when its data version differs."""

    wrapper: TopicConfigSerializeWrapper


@attrs.frozen
class UpdateOrderTopics:
    """The registry's ORDER_TOPIC_CONFIG names from a registration answer (a cast)."""

    order_topics: frozenset[str]


TopicCommand: TypeAlias = (
    CreateTopicInSendMessageMethod
    | CreateTopicInSendBack
    | CreateSystemTopic
    | UpdateTopicConfig
    | DeleteTopicConfig
    | BumpDataVersion
    | ReplaceTopicTable
    | UpdateOrderTopics
)

TopicCreation: TypeAlias = CreateTopicInSendMessageMethod | CreateTopicInSendBack


class TopicMissing(Exception):
    """A synchronous handler needs a topic it may create: it has the topic actor create it
    (`TopicManager.call_nowait`) and serves the request again once it exists."""

    def __init__(self, create: TopicCreation) -> None:
        super().__init__(f"topic {create.topic} is created first")
        self.create = create


@attrs.frozen
class TopicManagerStatistics(ActorStatistics):
    """The topic actor's counters and its table at one moment."""

    topics: int
    system_topics: int
    data_version: int  # the data version's counter
    file_writes: int
    file_errors: int


class TopicManager(TableActor[TopicCommand]):
    """Owns the broker's `TopicConfigTable`; see the module docstring."""

    def __init__(self, config: BrokerConfig, path: Path | None) -> None:
        self.config = config
        self.state = TopicConfigTable(config, now_ms())
        super().__init__("topics", self.state, path)
        #: Called with the changed topic (None = many) after every change of the data
        #: version, in the actor's task.
        self.on_change: list[Callable[[TopicConfig | None], None]] = []

    # -- reads (inline, no hop; the send path's is a plain dict lookup) ----------------------

    def select(self, topic: str) -> TopicConfig | None:
        """The topic's config, or None."""
        return self.state.topic_config_table.get(topic)

    def wrapper(self) -> TopicConfigSerializeWrapper:
        """The whole table with its data version (topics.json, registration body)."""
        return self.state.wrapper()

    def to_json(self) -> bytes:
        """topics.json, as GET_ALL_TOPIC_CONFIG answers it."""
        return self.state.to_json()

    def topic_from_template(
        self, topic: str, default_topic: str, client_queue_nums: int, topic_sys_flag: int = 0
    ) -> TopicConfig | None:
        """What a send to the unknown ``topic`` would create now (None: it may not)."""
        return self.state.topic_from_template(
            topic, default_topic, client_queue_nums, topic_sys_flag
        )

    @property
    def data_version(self) -> DataVersion:
        """The table's data version."""
        return self.state.data_version

    @property
    def system_topics(self) -> AbstractSet[str]:
        """Topics the broker made for itself."""
        return self.state.system_topics

    @property
    def topic_config_table(self) -> Mapping[str, TopicConfig]:
        """Topic name -> config."""
        return self.state.topic_config_table

    # -- changes without waiting ------------------------------------------------------------

    def create_topic_in_send_back_nowait(
        self, topic: str, queue_nums: int, perm: int = PERM_RW
    ) -> None:
        """Have ``topic`` created when it is missing, for a caller that does not use the
        topic's config (a heartbeat's retry topic, the transaction topics)."""
        if topic in self.state.topic_config_table:
            return
        try:
            self.cast_nowait(CreateTopicInSendBack(topic, queue_nums, perm))
        except ActorError as exc:
            log.warning("topic %s not created now (%s); the next use asks again", topic, exc)

    # -- the actor --------------------------------------------------------------------------

    def apply(self, command: TopicCommand) -> Any:
        """Apply one command; the hooks run when the data version moved."""
        table = self.state
        before = table.data_version
        result: Any = None
        match command:
            case CreateTopicInSendMessageMethod():
                result = table.create_topic_in_send_message_method(
                    command.topic, command.default_topic, command.client_queue_nums,
                    command.topic_sys_flag, now_ms(),
                )  # fmt: skip
            case CreateTopicInSendBack():
                result = table.create_topic_in_send_back(
                    command.topic, command.queue_nums, command.perm, command.topic_sys_flag,
                    now_ms(),
                )  # fmt: skip
            case CreateSystemTopic():
                result = table.create_topic_in_send_back(
                    command.topic, command.queue_nums, command.perm, 0, now_ms()
                )
                table.system_topics.add(command.topic)
            case UpdateTopicConfig():
                result = table.update_topic_config(
                    command.topic_config, now_ms(), dict(command.attribute_changes)
                )
            case DeleteTopicConfig():
                result = table.delete_topic_config(command.topic, now_ms())
            case BumpDataVersion():
                table.bump_data_version(now_ms())
            case ReplaceTopicTable():
                result = table.replace(command.wrapper)
            case UpdateOrderTopics():
                table.update_order_topics(command.order_topics)
            case _:
                raise TypeError(f"the topic actor takes no {type(command).__name__}")
        if table.data_version is not before:
            changed = result if isinstance(result, TopicConfig) else None
            for hook in self.on_change:
                hook(changed)
        return result

    def statistics(self) -> TopicManagerStatistics:
        """Actor counters, table sizes and file writes."""
        table = self.state
        return TopicManagerStatistics(
            **self._statistics_fields(),
            topics=len(table.topic_config_table),
            system_topics=len(table.system_topics),
            data_version=table.data_version.counter,
            file_writes=self.file_writes,
            file_errors=self.file_errors,
        )


def create_then_serve(
    topics: TopicManager,
    missing: TopicMissing,
    connection: Connection,
    request: RemotingCommand,
    serve: Callable[[Connection, RemotingCommand], RemotingCommand | None],
) -> RemotingCommand | None:
    """Have the topic actor create the topic ``missing`` names, then serve ``request`` again
    with ``serve`` (in the actor's task, where the topic now exists) and send its answer.

    For synchronous handlers on hot paths (send, send-back), which cannot await `call`: only a
    topic's first use comes here. Answers SYSTEM_ERROR at once when the actor cannot take it.
    """
    topic = missing.create.topic
    create: Request[Any] = missing.create

    def answer_late(answer: RemotingCommand | None) -> None:
        if answer is None or request.is_oneway or connection.closed:
            return
        try:
            connection.send(answer)
        except ConnectionClosedError:
            pass  # the client went away; it sends again

    def resume(_created: object) -> None:
        try:
            answer = serve(connection, request)
        except RemotingError as exc:
            answer = request.response(exc.code, exc.remark)
        except Exception as exc:
            log.exception("%s from %s failed", code_name(request.code), connection.peer)
            answer = request.response(
                ResponseCode.SYSTEM_ERROR,
                f"{type(exc).__name__}: {exc} (while handling {code_name(request.code)})",
            )
        answer_late(answer)

    def failed(error: Exception) -> None:
        answer_late(
            request.response(ResponseCode.SYSTEM_ERROR, f"topic {topic} not created: {error}")
        )

    try:
        topics.call_nowait(create, resume, failed)
    except ActorError as exc:
        return request.response(ResponseCode.SYSTEM_ERROR, f"topic {topic} not created: {exc}")
    return None
