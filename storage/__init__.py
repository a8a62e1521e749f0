"""BoltMQ's message store: RocketMQ 4.x's on-disk format, read and written from trio.

Layers, bottom up:

* `mapped_file` - fixed-size memory-mapped files named by their 20-digit start offset.
* `commit_log`, `consume_queue`, `index_file`, `checkpoint` - the store files (sheet 6).
* `dispatch` - commit-log records to consume-queue entries and index keys.
* `group_commit` - one group commit's puts: appended straight into the mapped commit log.
* `store_writer` - the store writer actor: queued puts, group commit, flush, completion.
  Its parts: `writer_commands` (its mailbox's commands, its counters and statistics
  record), `inline_puts` (puts appended in their callers' tasks, a part the writer owns and
  calls), `replicated_append` (a slave's appends of the master's commit-log bytes).
* `message_store` - `FileMessageStore`, which implements the `MessageStore` protocol
  (`store_api`): its writes go through the store writer actor, its reads slice the maps.
* `retention` - deletion of old files.
* `truncation` - cutting the store's tail at run time (a broker changing role).

Beside the file store, `memory_store` - `MemoryMessageStore`, the same protocol in memory
(same record bytes, no files) for test suites and notebooks.

Beside them: `store_config` (settings and errors), `results` (messages in, results out), and
the private record helpers `_encode`, `_record` and `_hash`.

docs/storage.md describes the layout, flush modes, recovery and retention.
"""

from storage.checkpoint import StoreCheckpoint, StoreLock
from storage.commit_log import AppendResult, CommitLog, EncodedPut
from storage.consume_queue import CQ_STORE_UNIT_SIZE, ConsumeQueue, ConsumeQueueStore
from storage.dispatch import CommitLogDispatcher
from storage.index_file import IndexFile, IndexService, index_file_size
from storage.mapped_file import MappedFile, MappedFileQueue, offset_to_file_name
from storage.memory_store import MemoryMessageStore, open_memory_store
from storage.message_store import (
    FileMessageStore,
    MessageArrivingListener,
    MessageStore,
    open_message_store,
)
from storage.results import (
    GetMessageResult,
    GetMessageStatus,
    MessageBatch,
    MessageExtBrokerInner,
    PutMessageResult,
    PutMessageStatus,
    QueryMessageResult,
    StoreStatistics,
)
from storage.retention import RetentionResult, RetentionService
from storage.store_config import (
    BrokerRole,
    FlushDiskType,
    MessageStoreConfig,
    StoreCorruptionError,
    StoreError,
    StoreLockedError,
    StoreTruncationError,
    StoreUnsupportedError,
)
from storage.writer_commands import StoreCounters

__all__ = [
    "CQ_STORE_UNIT_SIZE",
    "AppendResult",
    "BrokerRole",
    "CommitLog",
    "CommitLogDispatcher",
    "ConsumeQueue",
    "ConsumeQueueStore",
    "EncodedPut",
    "FileMessageStore",
    "FlushDiskType",
    "GetMessageResult",
    "GetMessageStatus",
    "IndexFile",
    "IndexService",
    "MappedFile",
    "MappedFileQueue",
    "MemoryMessageStore",
    "MessageArrivingListener",
    "MessageBatch",
    "MessageExtBrokerInner",
    "MessageStore",
    "MessageStoreConfig",
    "PutMessageResult",
    "PutMessageStatus",
    "QueryMessageResult",
    "RetentionResult",
    "RetentionService",
    "StoreCheckpoint",
    "StoreCorruptionError",
    "StoreCounters",
    "StoreError",
    "StoreLock",
    "StoreLockedError",
    "StoreTruncationError",
    "StoreStatistics",
    "StoreUnsupportedError",
    "index_file_size",
    "offset_to_file_name",
    "open_memory_store",
    "open_message_store",
]
