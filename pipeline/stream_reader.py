"""The streaming reader: micro-batch offsets planned on the driver, rows pulled on executors.

Spark keeps one instance on the driver for the life of a query (in a Python worker of its own)
and calls `initialOffset`, `latestOffset`, `partitions` and `commit` on it from one thread;
each call is one ``trio.run`` of `pipeline.stream_planning`. Executors get a pickled copy and
call `read`, which pulls a range as a batch read does (`pipeline.reader.read_range`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence

import pyarrow as pa
import trio
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from pipeline.options import StreamOptions
from pipeline.reader import read_range
from pipeline.stream_planning import (
    Offsets,
    OffsetsJson,
    available,
    commit_offsets,
    current_queues,
    from_json,
    initial_offsets,
    next_offsets,
    ranges_between,
    target_offsets,
    to_json,
)

log = logging.getLogger("boltmq.pipeline")


class BoltMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads the queues of ``options.topics`` micro-batch by micro-batch."""

    def __init__(self, options: StreamOptions) -> None:
        self.options = options
        #: Where a Trigger.AvailableNow query stops (`prepareForTriggerAvailableNow`).
        self.target: Offsets | None = None
        #: The offsets last committed under groupId.
        self.committed: Offsets | None = None
        #: startingOffsets as `initialOffset` first resolved them.
        self.initial: OffsetsJson | None = None
        #: Every queue's max offset at the last trigger (`reportLatestOffset`).
        self.latest: OffsetsJson | None = None
        #: time.monotonic() of the last micro-batch planned (minOffsetsPerTrigger's delay).
        self.last_batch_at = time.monotonic()

    def initialOffset(self) -> OffsetsJson:
        """startingOffsets resolved against the queues (a query without a checkpoint).

        Resolved once: Spark asks again at every trigger until the first batch has data, and
        ``latest`` resolved anew each time would skip what was sent in between.
        """
        if self.initial is None:
            self.initial = to_json(trio.run(initial_offsets, self.options))
        return self.initial

    def getDefaultReadLimit(self) -> ReadLimit:
        """maxOffsetsPerTrigger as Spark's ReadMaxRows, else minOffsetsPerTrigger as
        ReadMinRows; without either, everything available.

        PySpark's API has no composite limit (Kafka's source gives Spark both); with both
        options the source applies minOffsetsPerTrigger itself under a ReadMaxRows limit.
        """
        options = self.options
        if options.max_offsets_per_trigger is not None:
            return ReadMaxRows(options.max_offsets_per_trigger)
        if options.min_offsets_per_trigger is not None:
            return ReadMinRows(options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> OffsetsJson | None:
        """Every queue's max offset as the last trigger saw it, for the query's progress."""
        return self.latest

    def prepareForTriggerAvailableNow(self) -> None:
        """Remember every queue's max offset now: the query reads up to there and stops."""
        self.target = target_offsets(trio.run(current_queues, self.options))

    def latestOffset(self, start: OffsetsJson, limit: ReadLimit) -> OffsetsJson:
        """The end of the next micro-batch: up to each queue's max offset (or the AvailableNow
        target), at most ``limit``'s rows when it is a ReadMaxRows.

        ``start`` is the end of the last finished batch (Spark asks for the next batch only
        once the last one is done), so with groupId it is committed here too: Spark calls
        `commit` for a batch only when the batch after it starts, which would leave the
        group one batch behind and the last batch of a Trigger.AvailableNow run uncommitted.
        """
        offsets = from_json(start)
        self._commit_group(offsets)
        queues = trio.run(current_queues, self.options)
        self.latest = to_json({q.key: q.max_offset for q in queues})
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = next_offsets(
            offsets, queues, max_rows=max_rows, target=self.target,
            fail_on_data_loss=self.options.fail_on_data_loss,
        )  # fmt: skip
        if self._wait_for_more(offsets, end, limit):
            return start
        return to_json(end)

    def _wait_for_more(self, start: Offsets, end: Offsets, limit: ReadLimit) -> bool:
        """Whether minOffsetsPerTrigger holds the next batch back: fewer new messages than it
        asks for, and less than maxTriggerDelay since the last batch. Not under a limit of
        everything available (a trigger that asks for all) nor Trigger.AvailableNow, which
        must not wait for messages that may never come."""
        least = self.options.min_offsets_per_trigger
        now = time.monotonic()
        if (
            least is not None
            and self.target is None
            and not isinstance(limit, ReadAllAvailable)
            and available(start, end) < least
            and now - self.last_batch_at < self.options.max_trigger_delay
        ):
            return True
        if end != start:
            self.last_batch_at = now
        return False

    def partitions(self, start: OffsetsJson, end: OffsetsJson) -> Sequence[InputPartition]:
        """One `QueueRange` per queue with messages in [start, end) (more with minPartitions);
        none for an empty batch."""
        return trio.run(ranges_between, self.options, from_json(start), from_json(end))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The rows of one `QueueRange` in queue-offset order, as Arrow record batches."""
        options = self.options
        return read_range(
            partition, namesrv_addr=options.namesrv_addr,
            pull_batch_size=options.pull_batch_size,
            fail_on_data_loss=options.fail_on_data_loss, tags=options.tags,
        )  # fmt: skip

    def commit(self, end: OffsetsJson) -> None:
        """With groupId, a finished batch's end offsets as the group's offsets on the brokers
        (unless `latestOffset` has committed them already)."""
        self._commit_group(from_json(end))

    def _commit_group(self, offsets: Offsets) -> None:
        """UPDATE_CONSUMER_OFFSET of ``offsets`` under groupId when they moved; a failure is
        logged, not raised (Spark's checkpoint, not the group, is what the query resumes
        from), and the next call tries again."""
        group = self.options.group_id
        if group is None or offsets == self.committed:
            return
        try:
            trio.run(commit_offsets, self.options.namesrv_addr, group, offsets)
        except Exception as exc:
            log.warning("commit of offsets for group %s failed: %s", group, exc)
            return
        self.committed = offsets
