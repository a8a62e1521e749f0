"""The broker's topic table (RocketMQ's TopicConfigManager), kept in ``config/topics.json``.

Holds the system topics a broker creates at start, creates topics on a send to an unknown
topic from the TBW102 template, and bumps the data version on every change so registries
learn about it (the `on_change` hooks trigger a registration).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from actors.broker.config import BrokerConfig
from actors.broker.persist import PersistedTable
from protocol.bodies import (
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    DataVersion,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from storage.store_config import SCHEDULE_TOPIC as SCHEDULE_TOPIC

AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
BENCHMARK_TOPIC = "BenchmarkTest"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
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


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``."""
    return DLQ_GROUP_TOPIC_PREFIX + group


def now_ms() -> int:
    """Wall-clock epoch milliseconds."""
    return time.time_ns() // 1_000_000


class TopicManager(PersistedTable):
    """Topic name -> TopicConfig, with its data version; see the module docstring."""

    def __init__(self, config: BrokerConfig, path: Path | None) -> None:
        super().__init__(path)
        self.config = config
        self.topic_config_table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion(timestamp=now_ms(), counter=0)
        self.system_topics: set[str] = set()
        #: Called with the changed topic (None = many) after every change.
        self.on_change: list[Callable[[TopicConfig | None], None]] = []
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

    # -- reads (hot path: plain dict lookups) ------------------------------------------------

    def select(self, topic: str) -> TopicConfig | None:
        """The topic's config, or None."""
        return self.topic_config_table.get(topic)

    def wrapper(self) -> TopicConfigSerializeWrapper:
        """The whole table with its data version (topics.json, registration body)."""
        return TopicConfigSerializeWrapper(
            topic_config_table=dict(self.topic_config_table), data_version=self.data_version
        )

    # -- changes ---------------------------------------------------------------------------

    def create_topic_in_send_message_method(
        self, topic: str, default_topic: str, client_queue_nums: int, topic_sys_flag: int = 0
    ) -> TopicConfig | None:
        """Create ``topic`` from the template ``default_topic`` if that allows it (sheet 3.12)."""
        existing = self.topic_config_table.get(topic)
        if existing is not None:
            return existing
        template = self.topic_config_table.get(default_topic)
        if template is None or not template.perm & PERM_INHERIT:
            return None
        if (
            default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC
            and not self.config.auto_create_topic_enable
        ):
            return None
        queues = max(1, min(client_queue_nums, template.write_queue_nums))
        created = TopicConfig(
            topic_name=topic,
            read_queue_nums=queues,
            write_queue_nums=queues,
            perm=template.perm & ~PERM_INHERIT,
            topic_sys_flag=topic_sys_flag,
        )
        self._put(created)
        return created

    def create_topic_in_send_back(
        self, topic: str, queue_nums: int, perm: int = PERM_RW, topic_sys_flag: int = 0
    ) -> TopicConfig:
        """The retry / DLQ topic ``topic``, created with ``queue_nums`` queues when missing."""
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
        self._put(created)
        return created

    def update_topic_config(self, topic_config: TopicConfig) -> None:
        """Create or replace a topic (UPDATE_AND_CREATE_TOPIC)."""
        self._put(topic_config)

    def delete_topic_config(self, topic: str) -> bool:
        """Remove a topic; False when it did not exist."""
        if self.topic_config_table.pop(topic, None) is None:
            return False
        self._changed(None)
        return True

    def update_order_topics(self, order_topics: set[str]) -> None:
        """Mark exactly ``order_topics`` as ordered (from the registry's ORDER_TOPIC_CONFIG)."""
        changed = False
        for name, cfg in self.topic_config_table.items():
            order = name in order_topics
            if cfg.order != order:
                self.topic_config_table[name] = attrs.evolve(cfg, order=order)
                changed = True
        if changed:
            self.mark_dirty()

    def is_order_topic(self, topic: str) -> bool:
        """Whether the topic is marked ordered."""
        cfg = self.topic_config_table.get(topic)
        return cfg is not None and cfg.order

    def bump_data_version(self) -> None:
        """Mark the table changed without changing a topic (e.g. the broker's permission
        changed), so registries take the next registration's queue data."""
        self._changed(None)

    def _put(self, topic_config: TopicConfig) -> None:
        self.topic_config_table[topic_config.topic_name] = topic_config
        self._changed(topic_config)

    def _changed(self, topic_config: TopicConfig | None) -> None:
        self.data_version = DataVersion(timestamp=now_ms(), counter=self.data_version.counter + 1)
        self.mark_dirty()
        for hook in self.on_change:
            hook(topic_config)

    # -- file ------------------------------------------------------------------------------

    def to_json(self) -> bytes:
        """topics.json."""
        return self.wrapper().to_json()

    def from_json(self, data: bytes) -> None:
        """Load topics.json over the system topics (the file wins for topics it holds)."""
        wrapper = TopicConfigSerializeWrapper.from_json(data)
        self.topic_config_table.update(wrapper.topic_config_table)
        self.data_version = wrapper.data_version
