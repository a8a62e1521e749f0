"""The batch readers: partitions planned on the driver, rows pulled on the executors.

Two classes, because Spark checks the reader class against its filter-pushdown switch
(``spark.sql.python.filterPushdown.enabled``, off by default): a reader that defines
``pushFilters`` fails every read planned while the switch is off. `BoltMQReader` has no
``pushFilters`` and keeps the tags of its options only (Spark applies filters on ``tags``
itself, on the executors); `BoltMQPushdownReader` takes filters on ``tags`` too, so the broker
skips the other messages. `pipeline.source.BoltMQDataSource.reader` picks one.

Spark calls a Python data source's reader from plain threads: `partitions` once on the
driver, `read` once per partition in an executor's Python worker. The client is async, so each
call runs it in an event loop of its own. `partitions` is one piece of work and uses
``trio.run``. `read` must hand rows to Spark as it pulls them (a queue range may hold more
messages than fit in a worker's memory), so its loop runs in a thread beside Spark's
(anyio's blocking portal, as client.blocking does) and each pull is one call into it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence

import pyarrow as pa
import trio
from anyio.from_thread import start_blocking_portal
from pyspark.sql.datasource import DataSourceReader, EqualTo, Filter, In, InputPartition

from pipeline.arrow_rows import record_batch
from pipeline.options import ReadOptions
from pipeline.planning import QueueRange, plan_ranges
from pipeline.queue_reader import QueueRangeReader
from protocol.message import MessageExt

ARROW_BATCH_ROWS = 1024
"""Messages per Arrow record batch a task hands Spark (32 pulls of the default size)..."""
ARROW_BATCH_BYTES = 16 << 20
"""... or fewer once their bodies (as stored) reach this: large messages stay in bounds."""


class BoltMQReader(DataSourceReader):
    """Reads the queues of ``options.topics`` between startingOffsets and endingOffsets (or
    the timestamps), keeping the messages of subExpression's tags."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        #: The tags the read keeps: subExpression's (narrowed by pushed filters, below).
        self.tags: frozenset[str] | None = options.tags

    def partitions(self) -> Sequence[InputPartition]:
        """One `QueueRange` per queue with messages in range (more with minPartitions)."""
        ranges: list[QueueRange] = [] if self.tags == frozenset() else trio.run(
            plan_ranges, self.options)  # fmt: skip
        # Spark takes an empty list for "not implemented" and reads one InputPartition(None)
        # instead; say so plainly, and `read` reads nothing from it.
        return ranges or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The rows of one `QueueRange` in queue-offset order, as Arrow record batches."""
        if not isinstance(partition, QueueRange) and partition.value is None:
            return iter(())  # nothing in range (see `partitions`)
        options = self.options
        return read_range(
            partition, namesrv_addr=options.namesrv_addr,
            pull_batch_size=options.pull_batch_size,
            fail_on_data_loss=options.fail_on_data_loss, tags=self.tags,
        )  # fmt: skip


class BoltMQPushdownReader(BoltMQReader):
    """`BoltMQReader` that also takes Spark's filters on ``tags``; for a read planned with
    filter pushdown on."""

    def __init__(self, options: ReadOptions) -> None:
        super().__init__(options)
        #: The filters taken from Spark, in the order given.
        self.pushed: list[Filter] = []

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Take ``tags = 'T'`` and ``tags IN (...)``: the broker filters by tag (its consume
        queue keeps each message's tag hash code) and `read` checks each tag again. Every
        other filter is left to Spark."""
        for condition in filters:
            wanted = _tags_of(condition)
            if wanted is None:
                yield condition
            else:
                self.pushed.append(condition)
                self.tags = wanted if self.tags is None else self.tags & wanted


def _tags_of(condition: Filter) -> frozenset[str] | None:
    """The tags an EqualTo / In filter on column ``tags`` keeps; None for any other filter
    (or a value a TAG expression cannot carry)."""
    if not isinstance(condition, (EqualTo, In)) or tuple(condition.attribute) != ("tags",):
        return None
    values = (condition.value,) if isinstance(condition, EqualTo) else tuple(condition.value)
    if not all(isinstance(v, str) and v and "||" not in v and v != "*" for v in values):
        return None
    return frozenset(values)


def read_range(
    partition: InputPartition,
    *,
    namesrv_addr: str,
    pull_batch_size: int,
    fail_on_data_loss: bool,
    tags: Collection[str] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of one `QueueRange` in queue-offset order, as Arrow record batches of up to
    ARROW_BATCH_ROWS messages or ARROW_BATCH_BYTES (batch and streaming reads alike); with
    ``tags``, only messages with one of those tags."""
    if not isinstance(partition, QueueRange):
        raise TypeError(f"boltmq cannot read partition {partition!r}")
    reader = QueueRangeReader(
        partition, namesrv_addr=namesrv_addr, pull_batch_size=pull_batch_size,
        fail_on_data_loss=fail_on_data_loss, tags=tags,
    )  # fmt: skip
    # Closing the generator early (a limit() satisfied) leaves both blocks: the client's
    # connections close and the loop thread ends.
    with (
        start_blocking_portal("trio") as portal,
        portal.wrap_async_context_manager(reader),
    ):
        pending: list[MessageExt] = []
        size = 0
        while (messages := portal.call(reader.next_messages)) is not None:
            pending += messages
            size += sum(len(m.body) for m in messages)
            if len(pending) >= ARROW_BATCH_ROWS or size >= ARROW_BATCH_BYTES:
                yield record_batch(pending, partition.broker_name)
                pending, size = [], 0
        if pending:
            yield record_batch(pending, partition.broker_name)
