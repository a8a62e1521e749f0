"""What goes into the store and what comes back: messages to put, statuses and results."""

from __future__ import annotations

import enum
import struct
from bisect import bisect_right
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from protocol.message import MessageExt

Host = tuple[str, int]

#: RocketMQ's put-latency buckets (StoreStatsService): each name and the lowest milliseconds
#: of the next bucket (a put of ``ms`` goes to the first bucket whose limit is above it).
PUT_LATENCY_BUCKETS: tuple[str, ...] = (
    "[<=0ms]", "[0~10ms]", "[10~50ms]", "[50~100ms]", "[100~200ms]", "[200~500ms]",
    "[500ms~1s]", "[1~2s]", "[2~3s]", "[3~4s]", "[4~5s]", "[5~10s]", "[10s~]",
)  # fmt: skip
PUT_LATENCY_LIMITS: tuple[int, ...] = (
    1,
    10,
    50,
    100,
    200,
    500,
    1000,
    2000,
    3000,
    4000,
    5000,
    10000,
)


def put_latency_bucket(ms: int) -> int:
    """The index in `PUT_LATENCY_BUCKETS` of a put that took ``ms`` milliseconds."""
    return bisect_right(PUT_LATENCY_LIMITS, ms)


def put_latency_text(counts: tuple[int, ...] | list[int]) -> str:
    """The histogram as RocketMQ writes putMessageDistributeTime: ``[<=0ms]:3 [0~10ms]:1 ...``."""
    return " ".join(f"{name}:{n}" for name, n in zip(PUT_LATENCY_BUCKETS, counts, strict=True))


class PutMessageStatus(enum.StrEnum):
    """Outcome of a put (RocketMQ's PutMessageStatus)."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPEDFILE_FAILED = "CREATE_MAPEDFILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class GetMessageStatus(enum.StrEnum):
    """Outcome of a get by queue offset (RocketMQ's GetMessageStatus)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@attrs.define(slots=True)
class MessageExtBrokerInner:
    """A message as the broker hands it to the store (one commit-log record)."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = attrs.field(factory=dict)
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: Host = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    # None: the hash of the TAGS property (a delay service sets the delivery time instead).
    tags_code: int | None = None

    @classmethod
    def from_stored(
        cls,
        message: MessageExt,
        *,
        topic: str,
        queue_id: int,
        properties: dict[str, str],
        sys_flag: int | None = None,
        reconsume_times: int | None = None,
        prepared_transaction_offset: int | None = None,
        tags_code: int | None = None,
    ) -> MessageExtBrokerInner:
        """A stored message put again (a retry, a due delayed message, a transaction's half or
        commit): body, flag, born time and host carry over; sys flag, reconsume times and the
        prepared-transaction offset too unless given."""
        return cls(
            topic=topic,
            body=message.body,
            queue_id=queue_id,
            flag=message.flag,
            properties=properties,
            sys_flag=message.sys_flag if sys_flag is None else sys_flag,
            born_timestamp=message.born_timestamp,
            born_host=message.born_host,
            reconsume_times=(
                message.reconsume_times if reconsume_times is None else reconsume_times
            ),
            prepared_transaction_offset=(
                message.prepared_transaction_offset
                if prepared_transaction_offset is None
                else prepared_transaction_offset
            ),
            tags_code=tags_code,
        )


@attrs.define(slots=True)
class MessageBatch:
    """A batch send: one record per element, consecutive queue offsets, one file."""

    topic: str
    queue_id: int
    # (flag, body, element properties string) per element; protocol.message.decode_batch
    # gives BatchElement objects with exactly these fields.
    elements: list[tuple[int, bytes, str]]
    # Properties from the request header (WAIT, CLUSTER, ...) appended to each element's.
    properties: str = ""
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: Host = ("127.0.0.1", 0)
    reconsume_times: int = 0


@attrs.define(slots=True)
class PutMessageResult:
    """A put's answer; offsets are the first record's for a batch."""

    status: PutMessageStatus
    wrote_offset: int = 0
    wrote_bytes: int = 0
    queue_offset: int = 0
    msg_num: int = 0
    store_timestamp: int = 0
    # Commit-log offset of every record (one for a single message).
    physical_offsets: list[int] = attrs.field(factory=list)
    # Hex of the store host, the first part of an offset msg id.
    msg_id_prefix: str = ""
    remark: str = ""

    @property
    def msg_ids(self) -> list[str]:
        """Offset msg id of every record (store host + commit-log offset, upper-case hex)."""
        # One format applied by map (a loop in C), the prefix's own "%" kept as text.
        return list(map(f"{self.msg_id_prefix.replace('%', '%%')}%016X".__mod__,
                        self.physical_offsets))  # fmt: skip

    @property
    def ok(self) -> bool:
        """Whether the message is stored (a flush timeout still stores it)."""
        return self.status in (
            PutMessageStatus.PUT_OK,
            PutMessageStatus.FLUSH_DISK_TIMEOUT,
            PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
            PutMessageStatus.SLAVE_NOT_AVAILABLE,
        )

    @property
    def msg_id(self) -> str:
        """Offset msg id; comma-joined for a batch, as in the send response."""
        offsets = self.physical_offsets
        count = len(offsets)
        prefix = self.msg_id_prefix
        if count == 1:  # a single send: one format, no list
            return f"{prefix}{offsets[0]:016X}"
        if not count:
            return ""
        pack = _OFFSET_PACKERS.get(count)
        if pack is None:
            if len(_OFFSET_PACKERS) >= 64:
                _OFFSET_PACKERS.clear()
            pack = _OFFSET_PACKERS[count] = struct.Struct(f">{count}Q").pack
        # A batch's offsets packed at once and written out as hex, 8 bytes (16 digits) between
        # commas, then the prefix put before each: half the time of one format per record.
        return prefix + pack(*offsets).hex(",", 8).upper().replace(",", "," + prefix)


# Per record count: the struct that packs a batch's commit-log offsets (`msg_id`).
_OFFSET_PACKERS: dict[int, Callable[..., bytes]] = {}


@attrs.define(slots=True)
class GetMessageResult:
    """A get's answer: whole commit-log records as zero-copy slices of the mapped files."""

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffers: list[memoryview] = attrs.field(factory=list)
    queue_offsets: list[int] = attrs.field(factory=list)
    buffer_total_size: int = 0

    @property
    def message_count(self) -> int:
        """Number of records returned."""
        return len(self.buffers)

    def release(self) -> None:
        """Let go of the slices (lets retention unmap deleted files sooner)."""
        for buffer in self.buffers:
            buffer.release()
        self.buffers = []


@attrs.define(slots=True)
class QueryMessageResult:
    """Messages found by key: records plus the index's last update (QUERY_MESSAGE header)."""

    buffers: list[memoryview]
    index_last_update_timestamp: int
    index_last_update_phyoffset: int

    @property
    def buffer_total_size(self) -> int:
        """Bytes in all records."""
        return sum(len(b) for b in self.buffers)


@attrs.frozen
class StoreStatistics:
    """The store's counters at one moment."""

    commit_log_min_offset: int
    commit_log_max_offset: int
    committed_offset: int
    flushed_offset: int
    commit_log_files: int
    consume_queues: int
    index_files: int
    puts: int
    put_messages: int
    put_bytes: int
    put_failures: int
    write_batches: int
    flushes: int
    gets: int
    get_messages: int
    dispatch_behind_bytes: int
    running: bool
    #: Puts per latency bucket of `PUT_LATENCY_BUCKETS` (RocketMQ's putMessageDistributeTime).
    put_latency: tuple[int, ...] = ()
