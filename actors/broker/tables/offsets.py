"""Consumer offsets (RocketMQ's ConsumerOffsetManager), kept in ``config/consumerOffset.json``.

The key is ``topic@group``; an offset is the next queue offset the group will consume.
`ConsumerOffsetTable` is the plain state; `ConsumerOffsetManager` the actor that alone changes
it. Commits arrive with pulls (the commit-offset bit) and UPDATE_CONSUMER_OFFSET as casts (no
wait: one `cast_nowait` per commit, nothing else), resets, clones, group deletes and the HA
config sync as calls; queries read the table inline. The file is written every
``flushConsumerOffsetInterval`` (5 s) after a change and when the actor stops, so a crash of
the process loses at most the commits of the last interval (consumers then see some messages
again, never lose one).

A restart of the actor keeps the table (it lives on the instance, each change applied whole):
it loses the command that crashed it and the commits queued behind it, which consumers send
again with their next pull or within 5 s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeAlias

import attrs

from actors.broker.tables.table_actor import TableActor
from protocol.bodies import ConsumerOffsetSerializeWrapper
from supervisors.actor import ActorStatistics, Request

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetTable:
    """``topic@group`` -> queue id -> offset; plain state. `version` counts every change."""

    def __init__(self) -> None:
        self.offset_table: dict[str, dict[int, int]] = {}
        self.version = 0

    # -- reads -----------------------------------------------------------------------------

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group has none for the queue."""
        table = self.offset_table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}")
        if table is None:
            return -1
        return table.get(queue_id, -1)

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

    # -- changes ---------------------------------------------------------------------------

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> bool:
        """Record ``offset`` (negative offsets are ignored, as RocketMQ does); True when the
        table changed."""
        if offset < 0:
            return False
        key = f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"
        table = self.offset_table.get(key)
        if table is None:
            table = self.offset_table[key] = {}
        if table.get(queue_id) == offset:
            return False
        table[queue_id] = offset
        self.version += 1
        return True

    def clone_offsets(self, source: str, dest: str, topics: Iterable[str]) -> None:
        """Copy ``source``'s offsets on each of ``topics`` to ``dest`` (CLONE_GROUP_OFFSET)."""
        for topic in topics:
            for queue_id, offset in self.queue_offsets(source, topic).items():
                self.commit_offset(dest, topic, queue_id, offset)

    def remove_group(self, group: str) -> None:
        """Forget every offset of ``group`` (the file is written again even when it had none,
        as before)."""
        suffix = TOPIC_GROUP_SEPARATOR + group
        for key in [k for k in self.offset_table if k.endswith(suffix)]:
            del self.offset_table[key]
        self.version += 1

    def replace(self, offset_table: Mapping[str, Mapping[int, int]]) -> None:
        """Take another broker's whole table (a slave's config sync)."""
        self.offset_table = {key: dict(queues) for key, queues in offset_table.items()}
        self.version += 1

    # -- file ------------------------------------------------------------------------------

    def to_json(self) -> bytes:
        """consumerOffset.json in fastjson's form (bare integer keys)."""
        table = {key: dict(queues) for key, queues in self.offset_table.items()}
        return ConsumerOffsetSerializeWrapper(offset_table=table).to_json()

    def from_json(self, data: bytes) -> None:
        """Load consumerOffset.json."""
        wrapper = ConsumerOffsetSerializeWrapper.from_json(data)
        self.offset_table = {key: dict(queues) for key, queues in wrapper.offset_table.items()}


# -- commands ----------------------------------------------------------------------------------


@attrs.frozen
class CommitOffset:
    """A consumer's offset on one queue, from a pull or UPDATE_CONSUMER_OFFSET (a cast)."""

    group: str
    topic: str
    queue_id: int
    offset: int


@attrs.frozen
class CommitOffsets(Request[None]):
    """Several queues' offsets of one group on one topic at once (a reset, the check service)."""

    group: str
    topic: str
    offsets: Mapping[int, int]


@attrs.frozen
class CloneOffsets(Request[None]):
    """CLONE_GROUP_OFFSET: ``source``'s offsets on ``topics`` copied to ``dest``."""

    source: str
    dest: str
    topics: frozenset[str]


@attrs.frozen
class RemoveGroupOffsets(Request[None]):
    """DELETE_SUBSCRIPTIONGROUP with removeOffset: forget the group's offsets."""

    group: str


@attrs.frozen
class ReplaceOffsetTable(Request[None]):
    """A slave's config sync: the master's whole table."""

    offset_table: Mapping[str, Mapping[int, int]]


OffsetCommand: TypeAlias = (
    CommitOffset | CommitOffsets | CloneOffsets | RemoveGroupOffsets | ReplaceOffsetTable
)


@attrs.frozen
class ConsumerOffsetStatistics(ActorStatistics):
    """The offset actor's counters and its table at one moment."""

    topic_groups: int  # topic@group keys
    queue_offsets: int
    commits: int  # commits that changed an offset
    file_writes: int
    file_errors: int


class ConsumerOffsetManager(TableActor[OffsetCommand]):
    """Owns the broker's `ConsumerOffsetTable`; see the module docstring."""

    def __init__(self, path: Path | None, interval_ms: int = 5000) -> None:
        self.state = ConsumerOffsetTable()
        super().__init__("offsets", self.state, path)
        self.interval = interval_ms / 1000
        self.commits = 0

    # -- reads (inline, no hop) -------------------------------------------------------------

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group has none for the queue."""
        return self.state.query_offset(group, topic, queue_id)

    def queue_offsets(self, group: str, topic: str) -> dict[int, int]:
        """Queue id -> offset of one group on one topic (a copy)."""
        return self.state.queue_offsets(group, topic)

    def topics_of_group(self, group: str) -> set[str]:
        """Topics the group has offsets for."""
        return self.state.topics_of_group(group)

    def groups_of_topic(self, topic: str) -> set[str]:
        """Groups with offsets on the topic."""
        return self.state.groups_of_topic(topic)

    @property
    def offset_table(self) -> Mapping[str, Mapping[int, int]]:
        """``topic@group`` -> queue id -> offset."""
        return self.state.offset_table

    # -- the actor --------------------------------------------------------------------------

    def apply(self, command: OffsetCommand) -> Any:
        """Apply one command."""
        table = self.state
        match command:
            case CommitOffset():
                if table.commit_offset(
                    command.group, command.topic, command.queue_id, command.offset
                ):
                    self.commits += 1
            case CommitOffsets():
                for queue_id, offset in command.offsets.items():
                    if table.commit_offset(command.group, command.topic, queue_id, offset):
                        self.commits += 1
            case CloneOffsets():
                table.clone_offsets(command.source, command.dest, command.topics)
            case RemoveGroupOffsets():
                table.remove_group(command.group)
            case ReplaceOffsetTable():
                table.replace(command.offset_table)
            case _:
                raise TypeError(f"the offset actor takes no {type(command).__name__}")
        return None

    def statistics(self) -> ConsumerOffsetStatistics:
        """Actor counters, table sizes and file writes."""
        table = self.state.offset_table
        return ConsumerOffsetStatistics(
            **self._statistics_fields(),
            topic_groups=len(table),
            queue_offsets=sum(len(queues) for queues in table.values()),
            commits=self.commits,
            file_writes=self.file_writes,
            file_errors=self.file_errors,
        )
