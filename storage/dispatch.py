"""The dispatcher: turns stored records into consume-queue entries and index keys.

The store writer hands it the records of each group commit directly (it already knows their
metadata); recovery and replicated (HA) data go through `CommitLog.iter_dispatch`, which
reads the same metadata back from the commit log. Replays are idempotent: an entry or key
that is already there is skipped.
"""

from __future__ import annotations

from storage._record import TRANSACTION_PREPARED, TRANSACTION_ROLLBACK, DispatchRequest
from storage.consume_queue import ConsumeQueueStore
from storage.index_file import IndexService

_TRANSACTION_MASK = 0xC


class CommitLogDispatcher:
    """Builds consume queues and the index from dispatch requests."""

    def __init__(self, consume_queues: ConsumeQueueStore, index: IndexService | None) -> None:
        self.consume_queues = consume_queues
        self.index = index
        # Records at or below this offset are already indexed (replays skip them).
        self.index_end_offset = index.end_phy_offset if index is not None else -1
        self.last_dispatch_timestamp = 0
        self.dispatched = 0

    def dispatch(self, request: DispatchRequest) -> None:
        """Add one record's consume-queue entry and index keys."""
        tran = request.sys_flag & _TRANSACTION_MASK
        if tran != TRANSACTION_PREPARED and tran != TRANSACTION_ROLLBACK:
            queues = self.consume_queues
            queue = queues.queues.get((request.topic, request.queue_id))
            if queue is None:
                queue = queues.find_or_create(request.topic, request.queue_id)
            queue.put(
                request.queue_offset, request.commit_log_offset, request.msg_size, request.tags_code
            )
        index = self.index
        if (
            index is not None
            and tran != TRANSACTION_ROLLBACK
            and request.commit_log_offset > self.index_end_offset
            and (request.keys or request.uniq_key)
        ):
            keys = request.keys.split(" ") if request.keys else []
            if request.uniq_key:
                keys.append(request.uniq_key)
            index.build(request.topic, keys, request.commit_log_offset, request.store_timestamp)
            self.index_end_offset = request.commit_log_offset
        self.last_dispatch_timestamp = request.store_timestamp
        self.dispatched += 1

    def dispatch_group(
        self,
        queue_entries: list[tuple[str, int, int, bytearray]],
        index_keys: list[tuple[str, int]],
        last_offset: int,
        store_timestamp: int,
        count: int,
    ) -> None:
        """Add a group commit's records at once: per queue ``(topic, queue id, first queue
        offset, packed entries)``, and the full index keys ``(<topic>#<key>, offset)``.

        ``last_offset`` is the commit-log offset of the group's last record, ``count`` its
        number of records (they all share ``store_timestamp``).
        """
        queues = self.consume_queues
        for topic, queue_id, queue_offset, entries in queue_entries:
            queue = queues.queues.get((topic, queue_id))
            if queue is None:
                queue = queues.find_or_create(topic, queue_id)
            queue.put_entries(queue_offset, entries)
        index = self.index
        if index is not None and last_offset > self.index_end_offset:
            if index_keys:
                end = self.index_end_offset
                if index_keys[0][1] <= end:  # a replay: skip what is already indexed
                    index_keys = [k for k in index_keys if k[1] > end]
                index.build_many(index_keys, store_timestamp)
            self.index_end_offset = last_offset
        self.last_dispatch_timestamp = store_timestamp
        self.dispatched += count
