"""Opening a put's consume-queue files before its record is appended.

Opening a consume-queue file takes a descriptor (for good without libc, else until it is
mapped) and a map, so a broker can reach its open-file limit or vm.max_map_count. The entries
of a put are written when its group commit is completed, after its record is in the commit
log: a file that could not be opened then would leave a record no queue points at and stop
the store writer. So the writer opens the files a put's entries will need first
(`ConsumeQueue.open_files_for`), and refuses the put when one cannot be opened, with one log
line saying which limit and how to raise it. The writer counts the refused put.
"""

from __future__ import annotations

import errno
import logging

from storage.commit_log import CommitLog
from storage.consume_queue import CQ_STORE_UNIT_SIZE, ConsumeQueueStore
from storage.results import PutMessageResult, PutMessageStatus
from supervisors.limits import open_failure_advice, open_file_limit

log = logging.getLogger("boltmq.broker.store")


class QueueFileOpener:
    """The store writer's check before appending a put (see the module doc)."""

    def __init__(self, commit_log: CommitLog, consume_queues: ConsumeQueueStore) -> None:
        # The commit log's queue-offset table says where a put's entries will go.
        self.commit_log = commit_log
        self.consume_queues = consume_queues
        # A file could not be opened: logged once, until one opens again.
        self.refusing = False

    def refusal(
        self, topic: str, queue_id: int, count: int, queued_ahead: int
    ) -> PutMessageResult | None:
        """Open the files ``count`` entries of (topic, queue id) will be written to; the
        refusal when one cannot be opened. ``queued_ahead``: puts queued before this one,
        which may take queue offsets first (room for one entry each)."""
        key = (topic, queue_id)
        queue_offset = self.commit_log.topic_queue_table.get(key, 0)
        queue = self.consume_queues.queues.get(key)
        if queue is not None and (files := queue.files.files):
            # The common case, kept cheap (it runs for every put): the last file has room.
            end = (queue_offset + count + queued_ahead) * CQ_STORE_UNIT_SIZE
            if end <= files[-1].file_from_offset + queue.file_size:
                return None
        try:
            opened = self.consume_queues.open_files_for(
                topic, queue_id, queue_offset, count + queued_ahead
            )
        except OSError as exc:
            if not self.refusing:
                self.refusing = True
                log.error(
                    "store writer: cannot open a consume-queue file for %s:%d (%s); sends to "
                    "queues that need a new file are refused until one opens: %s",
                    topic, queue_id, exc.strerror or exc, open_failure_advice(exc),
                )  # fmt: skip
            limit = ""
            if exc.errno == errno.EMFILE:
                limit = f"; the broker's open-file limit, {open_file_limit()[0]:,}, is reached"
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE,
                remark=f"the broker cannot open the consume-queue file of {topic}:{queue_id} "
                f"({exc.strerror or exc}{limit}); retry later, or its operator raises the limit",
            )
        if opened and self.refusing:
            self.refusing = False
            log.warning("store writer: consume-queue files open again (%s:%d)", topic, queue_id)
        return None
