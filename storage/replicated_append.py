"""A slave's appends: commit-log bytes replicated from the HA master, and their dispatch.

The master sends raw commit-log bytes in runs that may end inside a record. The store writer
takes a run as one `AppendReplicated` command, queued like any put, and appends it at exactly
its max offset as a group of its own. Its records are then dispatched by reading them back
from the commit log up to the committed offset (`CommitLog.dispatch_range`), so a slave writes
the same consume-queue and index bytes as its master; a record cut at the end of a run is
dispatched when its rest arrives.
"""

from __future__ import annotations

import logging

from storage.commit_log import CommitLog
from storage.dispatch import CommitLogDispatcher
from storage.group_commit import CommitGroup
from storage.writer_commands import AppendReplicated

log = logging.getLogger("boltmq.broker.store")


def append_replicated_data(
    commit_log: CommitLog, command: AppendReplicated, group: CommitGroup
) -> None:
    """Append ``command``'s bytes as ``group`` and note its answer: False when they do not
    start at the max offset or the disk refuses them."""
    try:
        ok = commit_log.append_data(command.start_offset, command.data)
    except OSError as exc:  # a full disk: refuse it, the link retries with backoff
        log.error("store writer: replicated data at %d not written: %s",
                  command.start_offset, exc)  # fmt: skip
        ok = False
    group.replicated = ok
    group.replies.append((command.reply.set_result, ok))


def dispatch_replicated(
    commit_log: CommitLog, dispatcher: CommitLogDispatcher, reput_from_offset: int
) -> tuple[int, list[tuple[str, int, int]]]:
    """Dispatch replicated records from ``reput_from_offset`` up to the committed offset
    (they may end inside a record: the rest comes with the next append); returns the new
    dispatch position and (topic, queue id, new max queue offset) per queue that grew."""
    reput_from_offset, grown = commit_log.dispatch_range(
        reput_from_offset, commit_log.committed_offset, dispatcher
    )
    queues = [(topic, queue_id, offset) for (topic, queue_id), offset in grown.items()]
    return reput_from_offset, queues
