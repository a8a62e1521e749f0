"""Cutting the store's tail at run time: a broker that turns slave drops what the new master
never had (controller mode), and a slave that turns master drops a partial record.

The store writer runs it (`StoreWriter.truncate`) once every put appended before is completed,
with nothing appended meanwhile, so no put races it. In memory it drops the consume-queue
entries and index keys pointing at or past the offset and the commit log's bytes, rebuilds
the queue-offset table from the consume queues (the next put of a queue takes the offset
after its last entry), and moves the dispatch position and the committed offset back to the
cut, so readers never see the dropped bytes again. Then it makes the cut durable, each step
before the next: the store's checkpoint times lowered to the newest record left (so an
abnormal recovery replays from before the cut), the consume queues and the index, the commit
log; a crash in between leaves a longer commit log whose records recovery dispatches again,
never a queue entry pointing at bytes that are gone.

Readers holding views of dropped bytes from before (a pull answer being written out) see
zeros from then on: a truncation happens while the broker is changing role, when its
answers no longer count.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import attrs

from storage.commit_log import CommitLog
from storage.consume_queue import ConsumeQueueStore
from storage.dispatch import CommitLogDispatcher
from storage.index_file import IndexFile
from storage.mapped_file import MappedFile
from storage.store_config import StoreTruncationError
from storage.writer_commands import StoreCounters

log = logging.getLogger("boltmq.storage")

__all__ = ["StoreTruncationError", "Truncation", "truncate_store"]


@attrs.define
class Truncation:
    """What a truncation changed: the files to make durable, in order, and the offsets."""

    from_offset: int
    to_offset: int
    logic_files: list[MappedFile] = attrs.field(factory=list)
    index_files: list[IndexFile] = attrs.field(factory=list)
    commit_log_files: list[MappedFile] = attrs.field(factory=list)

    def sync(self, first: Callable[[], object] | None = None) -> None:
        """Make the cut durable: ``first`` (the store's checkpoint), queues and index, then
        the commit log (blocking)."""
        if first is not None:
            first()
        for mapped in self.logic_files:
            mapped.sync_all()
        for index in self.index_files:
            index.flush()
        for mapped in self.commit_log_files:
            mapped.sync_all()


def truncate_store(
    offset: int,
    commit_log: CommitLog,
    consume_queues: ConsumeQueueStore,
    dispatcher: CommitLogDispatcher,
    counters: StoreCounters,
    *,
    at_dispatch_position: bool = False,
) -> Truncation:
    """Drop everything at or past commit-log ``offset`` in memory (see the module doc);
    raises `StoreTruncationError` when ``offset`` is not a record boundary.
    ``at_dispatch_position``: ``offset`` is where dispatch stopped, a boundary already known
    (the record after it may be partial, so it cannot be checked)."""
    before = commit_log.max_offset
    if offset >= before:
        return Truncation(before, before)
    if offset < commit_log.min_offset:
        raise StoreTruncationError(
            f"cannot truncate the commit log to {offset}: its first byte still on disk is "
            f"at {commit_log.min_offset} (retention deleted the rest)"
        )
    why = None if at_dispatch_position else commit_log.boundary_error(offset)
    if why is not None:
        raise StoreTruncationError(f"cannot truncate the commit log to {offset}: {why}")
    cut = Truncation(before, offset)
    for queue in consume_queues.truncate_dirty(offset):
        if queue.files.files:
            cut.logic_files.append(queue.files.files[-1])
    index = dispatcher.index
    if index is not None:
        dispatcher.build_deferred_index()  # keys waiting past the cut are cut with the rest
        cut.index_files = index.truncate_from(offset)
        dispatcher.index_end_offset = index.end_phy_offset
    cut.commit_log_files = commit_log.truncate_to(offset)
    commit_log.topic_queue_table = consume_queues.queue_offset_table()
    counters.reput_from_offset = min(counters.reput_from_offset, offset)
    dispatcher.last_dispatch_timestamp = min(
        dispatcher.last_dispatch_timestamp, commit_log.last_store_timestamp
    )
    log.warning("commit log truncated from %d to %d (%d bytes dropped)",
                before, offset, before - offset)  # fmt: skip
    return cut
