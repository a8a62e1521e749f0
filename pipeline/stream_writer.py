"""The streaming writer (``df.writeStream.format("boltmq")``): each micro-batch's partitions
are sent as a batch write sends them (`pipeline.writer.send_rows`).

With ``exactlyOnce=true`` a message's dedup key is made of the query id, the micro-batch id,
the partition id and the row's number in its partition. Spark keeps the query id in the
checkpoint (a query restarted from its checkpoint keeps it) and re-runs an unfinished
micro-batch with the same id over the same offsets, so a re-run micro-batch, or a task that
runs again, sends the keys its first run sent, and a BoltMQ broker stores each key once.
Executors learn the two ids from the task's local properties, which Spark sets for every
micro-batch job (``sql.streaming.queryId``, ``streaming.sql.batchId``); option ``writeId``,
when given, stands in for the query id.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator

from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage

from pipeline.errors import WriteError
from pipeline.options import WriteOptions
from pipeline.writer import BoltMQCommitMessage, send_rows, totals

log = logging.getLogger("boltmq.pipeline")

QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""The local property Spark gives every task of a streaming query: the query's id."""
BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""The local property Spark gives every task of a micro-batch: the batch id."""


class BoltMQStreamWriter(DataSourceStreamWriter):
    """Sends each micro-batch's rows as messages (``df.writeStream.format("boltmq")``)."""

    def __init__(self, options: WriteOptions, columns: tuple[str, ...]) -> None:
        self.options = options
        self.columns = columns
        #: Drawn once on the driver: each task starts its queues at this plus its partition id.
        self.queue_offset = random.randrange(1 << 16)

    def write(self, iterator: Iterator[Row]) -> BoltMQCommitMessage:
        """Send the rows of one partition of a micro-batch; the counts go to the driver."""
        prefix = key_prefix(self.options) if self.options.exactly_once else None
        return send_rows(self.options, self.columns, iterator, prefix, self.queue_offset)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Log what the micro-batch sent."""
        sent, body_bytes, sends, not_ok = totals(messages)
        log.info(
            "boltmq stream write, batch %d: %d message(s) (%d body bytes) in %d send(s)%s%s",
            batchId, sum(sent.values()), body_bytes, sends,
            "".join(f", {t}: {n}" for t, n in sorted(sent.items())),
            f"; {not_ok} send(s) not SEND_OK" if not_ok else "",
        )  # fmt: skip

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Log the failed micro-batch; what its tasks sent stays in the topics."""
        sent, _, _, _ = totals(messages)
        log.error(
            "boltmq stream write, batch %d failed; tasks that finished had sent %d message(s), "
            "which stay in their topics%s", batchId, sum(sent.values()),
            " (sent again by a re-run of the batch, they are stored once: exactlyOnce)"
            if self.options.exactly_once else "",
        )  # fmt: skip


def key_prefix(options: WriteOptions) -> str:
    """``query id:batch id`` of the running micro-batch task (``writeId`` for the query id
    when given)."""
    context = TaskContext.get()
    if context is None:
        raise WriteError("an exactly-once stream write runs in a Spark task (no task context)")
    batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
    query_id = options.write_id or context.getLocalProperty(QUERY_ID_PROPERTY)
    if batch_id is None or query_id is None:
        raise WriteError(
            "exactlyOnce: Spark gave this task no micro-batch id or query id "
            f"({BATCH_ID_PROPERTY}={batch_id!r}, {QUERY_ID_PROPERTY}={query_id!r}); "
            "is this a streaming query with a micro-batch trigger?"
        )
    return f"{query_id}:{batch_id}"
