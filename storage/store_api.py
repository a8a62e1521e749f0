"""The `MessageStore` protocol: what the broker needs of a store (RocketMQ's MessageStore).

It lists every method the broker calls, and the broker holds its store by this type only.
Two implementations: the file store (`storage.message_store`) and the memory store
(`storage.memory_store`, for tests and notebooks); broker tests may use either.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Set
from contextlib import asynccontextmanager
from typing import Protocol, TypeVar

import trio

from storage.results import (
    GetMessageResult,
    MessageBatch,
    MessageExtBrokerInner,
    PutMessageResult,
    QueryMessageResult,
    StoreStatistics,
)
from storage.store_config import BrokerRole, MessageStoreConfig

MessageArrivingListener = Callable[[str, int, int], None]
"""Called after each group commit with (topic, queue id, new max queue offset)."""

MAX_TRANSFER_BYTES_ON_MESSAGE_IN_MEMORY = 256 * 1024
MAX_TRANSFER_COUNT_ON_MESSAGE_IN_MEMORY = 32


class MessageStore(Protocol):
    """What the broker needs of a store (RocketMQ's MessageStore interface)."""

    #: The store's settings; the broker sets ``store_host`` once its listen port is bound.
    config: MessageStoreConfig

    # -- life (a supervisor child) ----------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Open the store and serve until `aclose` or cancellation, then flush and close."""
        ...

    async def aclose(self) -> None:
        """Stop taking puts, finish queued ones, flush and release the directory."""
        ...

    # -- writes -------------------------------------------------------------------------------

    async def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        """Store one message."""
        ...

    async def put_messages(self, batch: MessageBatch) -> PutMessageResult:
        """Store a batch: consecutive queue offsets, one commit-log file."""
        ...

    def put_message_nowait(
        self, msg: MessageExtBrokerInner, callback: Callable[[PutMessageResult], object]
    ) -> None:
        """`put_message` without waiting: ``callback`` gets the result after the group commit."""
        ...

    def put_messages_nowait(
        self, batch: MessageBatch, callback: Callable[[PutMessageResult], object]
    ) -> None:
        """`put_messages` without waiting: ``callback`` gets the result."""
        ...

    async def append_to_commit_log(self, start_offset: int, data: bytes | memoryview) -> bool:
        """Append replicated bytes at exactly the store's max offset (HA slave)."""
        ...

    # -- controller mode: role changes at run time -------------------------------------------

    async def truncate_commit_log(self, offset: int) -> int:
        """Drop the commit log from ``offset`` (a record boundary) on, with the queue entries
        and index keys pointing there, after every put queued before it; returns the new max
        offset. Raises `StoreTruncationError` (nothing changed) when ``offset`` is not a
        record boundary or is below the min offset."""
        ...

    async def change_role(self, role: BrokerRole) -> int:
        """Become a SLAVE (puts refused at once, replicated appends taken at the max offset)
        or a master (ASYNC_MASTER or SYNC_MASTER: puts continue each queue where its consume
        queue ends); returns the commit log's max offset once the change is done."""
        ...

    # -- reads ----------------------------------------------------------------------------------

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        tag_codes: Set[int] | None = None,
        max_total_bytes: int = MAX_TRANSFER_BYTES_ON_MESSAGE_IN_MEMORY,
        record_filter: Callable[[memoryview], bool] | None = None,
    ) -> GetMessageResult:
        """Whole records from ``offset`` on, filtered by tag hash codes (None = ``*``) and then
        by ``record_filter`` on each record's bytes (a SQL92 subscription); the next begin
        offset passes the records either filter left out."""
        ...

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """First live queue offset."""
        ...

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """Entries ever written (next queue offset)."""
        ...

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """Queue offset stored at ``timestamp`` or the nearer neighbour."""
        ...

    def look_message_by_offset(self, commit_log_offset: int) -> memoryview | None:
        """The record at a commit-log offset (VIEW_MESSAGE_BY_ID)."""
        ...

    def query_message(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> QueryMessageResult:
        """Records of ``topic`` with KEYS token or UNIQ_KEY ``key`` stored in ``[begin, end]``."""
        ...

    def get_commit_log_data(self, offset: int) -> memoryview | None:
        """Committed commit-log bytes from ``offset`` to its file's end (HA master)."""
        ...

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store time of a queue's first live message (-1 when none)."""
        ...

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the message at a queue offset (-1 when absent)."""
        ...

    def get_earliest_message_store_time(self) -> int:
        """Store time of the oldest record in the commit log (0 when empty)."""
        ...

    def get_max_phy_offset(self) -> int:
        """Commit-log offset just past the last record."""
        ...

    def get_min_phy_offset(self) -> int:
        """Commit-log offset of the first byte still on disk."""
        ...

    def statistics(self) -> StoreStatistics:
        """Counters at one moment."""
        ...


S = TypeVar("S", bound=MessageStore)


@asynccontextmanager
async def run_store(store: S) -> AsyncIterator[S]:
    """Run ``store`` (either implementation) for the duration of the block, closing it after."""
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        try:
            yield store
        finally:
            await store.aclose()
