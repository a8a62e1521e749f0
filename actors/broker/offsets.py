"""Consumer offsets (RocketMQ's ConsumerOffsetManager), kept in ``config/consumerOffset.json``.

The key is ``topic@group``; an offset is the next queue offset the group will consume. Commits
arrive with pulls (the commit-offset bit) and UPDATE_CONSUMER_OFFSET; the file is written every
``flushConsumerOffsetInterval`` (5 s) and at shutdown, so a crash loses at most the commits of
the last interval (consumers then see some messages again, never lose one).
"""

from __future__ import annotations

from pathlib import Path

from actors.broker.persist import PersistedTable
from protocol.bodies import ConsumerOffsetSerializeWrapper

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetManager(PersistedTable):
    """``topic@group`` -> queue id -> offset."""

    def __init__(self, path: Path | None, interval_ms: int = 5000) -> None:
        super().__init__(path)
        self.interval = interval_ms / 1000
        self.offset_table: dict[str, dict[int, int]] = {}

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group has none for the queue."""
        table = self.offset_table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}")
        if table is None:
            return -1
        return table.get(queue_id, -1)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` (negative offsets are ignored, as RocketMQ does)."""
        if offset < 0:
            return
        key = f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"
        table = self.offset_table.get(key)
        if table is None:
            table = self.offset_table[key] = {}
        if table.get(queue_id) != offset:
            table[queue_id] = offset
            self.mark_dirty()

    def queue_offsets(self, group: str, topic: str) -> dict[int, int]:
        """Queue id -> offset of one group on one topic (a copy)."""
        return dict(self.offset_table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {}))

    def topics_of_group(self, group: str) -> set[str]:
        """Topics the group has offsets for."""
        suffix = TOPIC_GROUP_SEPARATOR + group
        return {key[: -len(suffix)] for key in self.offset_table if key.endswith(suffix)}

    def groups_of_topic(self, topic: str) -> set[str]:
        """Groups with offsets on the topic."""
        prefix = topic + TOPIC_GROUP_SEPARATOR
        return {key[len(prefix) :] for key in self.offset_table if key.startswith(prefix)}

    def remove_group(self, group: str) -> None:
        """Forget every offset of ``group``."""
        suffix = TOPIC_GROUP_SEPARATOR + group
        for key in [k for k in self.offset_table if k.endswith(suffix)]:
            del self.offset_table[key]
        self.mark_dirty()

    def to_json(self) -> bytes:
        """consumerOffset.json in fastjson's form (bare integer keys)."""
        table = {key: dict(queues) for key, queues in self.offset_table.items()}
        return ConsumerOffsetSerializeWrapper(offset_table=table).to_json()

    def from_json(self, data: bytes) -> None:
        """Load consumerOffset.json."""
        wrapper = ConsumerOffsetSerializeWrapper.from_json(data)
        self.offset_table = {key: dict(queues) for key, queues in wrapper.offset_table.items()}
