"""The store writer's mailbox: the commands it takes, its sizes, its counters and its
statistics record.

The writer itself is `storage.store_writer.StoreWriter`; these are the types at its channel
boundary and the counters it keeps for the store, plain data with no behaviour.
"""

from __future__ import annotations

import attrs

from storage.commit_log import EncodedPut
from storage.group_commit import PendingPut
from storage.results import PUT_LATENCY_BUCKETS, PutMessageResult
from supervisors.actor import ActorStatistics, Request

WRITER_MAILBOX_SIZE = 8192
"""Puts that may wait for the next group commit before callers block (backpressure)."""

GROUP_LIMIT = 64
"""Puts per group commit at most. Smaller groups let a SYNC_FLUSH fdatasync of one group
overlap the appending of the next; the writer still takes its whole mailbox per wake-up."""


@attrs.frozen
class PutRecords(Request[PutMessageResult]):
    """Append one encoded put and answer with its result (used when the mailbox is full)."""

    put: EncodedPut


@attrs.frozen
class AppendReplicated(Request[bool]):
    """Append raw commit-log bytes received from the HA master at ``start_offset``."""

    start_offset: int
    data: bytes | memoryview


@attrs.frozen
class TruncateCommitLog(Request[int]):
    """Drop every byte at or past ``offset`` (`storage.truncation`); answers the new max
    offset."""

    offset: int


@attrs.frozen
class PrepareMaster(Request[int]):
    """A slave's store turning master: dispatch what was replicated, drop a partial record at
    the end, and take queue offsets from the consume queues; answers the max offset."""


@attrs.frozen
class SealInline:
    """Complete the open group of puts appended in their callers' tasks (ASYNC_FLUSH)."""


# A queued put (storage.group_commit.PendingPut) is answered by its callback on the trio
# thread (the send path: no task waits per request) or through a shared event; exactly once,
# also when the writer stops before appending (SERVICE_NOT_AVAILABLE).
StoreWriterCommand = (
    PendingPut | PutRecords | AppendReplicated | SealInline | TruncateCommitLog | PrepareMaster
)


@attrs.frozen
class StoreWriterStatistics(ActorStatistics):
    """The writer's counters: group commits, records, bytes, flushes, and how many puts were
    appended in their caller's task (``inline_puts``) rather than queued to the writer."""

    batches: int
    records: int
    bytes_written: int
    sync_flushes: int
    flush_timeouts: int
    largest_batch: int
    inline_puts: int = 0


class StoreCounters:
    """The store's put counters and dispatch position, updated by the store writer alone.

    The store makes one and hands it to each writer it starts, so counts outlive a restart
    of the writer; the file store's `statistics` reads it. ``put_latency`` counts puts per
    bucket of `storage.results.PUT_LATENCY_BUCKETS` (counted per group commit);
    ``reput_from_offset`` is the commit-log offset up to which records are dispatched to the
    consume queues and the index (RocketMQ's reputFromOffset).
    """

    __slots__ = (
        "flushes",
        "put_bytes",
        "put_failures",
        "put_latency",
        "put_messages",
        "puts",
        "reput_from_offset",
        "write_batches",
    )

    def __init__(self) -> None:
        self.puts = 0
        self.put_messages = 0
        self.put_bytes = 0
        self.put_failures = 0
        self.write_batches = 0
        self.flushes = 0
        self.put_latency = [0] * len(PUT_LATENCY_BUCKETS)
        self.reput_from_offset = 0
