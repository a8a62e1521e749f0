"""The batch reader: partitions planned on the driver, rows pulled on the executors.

Spark calls a Python data source's reader from plain threads: `partitions` once on the
driver, `read` once per partition in an executor's Python worker. The client is async, so each
call runs it in an event loop of its own. `partitions` is one piece of work and uses
``trio.run``. `read` must hand rows to Spark as it pulls them (a queue range may hold more
messages than fit in a worker's memory), so its loop runs in a thread beside Spark's
(anyio's blocking portal, as client.blocking does) and each pull is one call into it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import trio
from anyio.from_thread import start_blocking_portal
from pyspark.sql.datasource import DataSourceReader, InputPartition

from pipeline.options import ReadOptions
from pipeline.planning import QueueRange, plan_ranges
from pipeline.queue_reader import QueueRangeReader


class BoltMQReader(DataSourceReader):
    """Reads the queues of ``options.topics`` between startingOffsets and endingOffsets."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        """One `QueueRange` per queue with messages in range (more with minPartitions)."""
        ranges: list[QueueRange] = trio.run(plan_ranges, self.options)
        # Spark takes an empty list for "not implemented" and reads one InputPartition(None)
        # instead; say so plainly, and `read` reads nothing from it.
        return ranges or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        """The rows of one `QueueRange`, pull by pull, in queue-offset order."""
        if not isinstance(partition, QueueRange) and partition.value is None:
            return iter(())  # nothing in range (see `partitions`)
        options = self.options
        return read_range(
            partition, namesrv_addr=options.namesrv_addr,
            pull_batch_size=options.pull_batch_size,
            fail_on_data_loss=options.fail_on_data_loss,
        )  # fmt: skip


def read_range(
    partition: InputPartition, *, namesrv_addr: str, pull_batch_size: int, fail_on_data_loss: bool
) -> Iterator[tuple[Any, ...]]:
    """The rows of one `QueueRange`, pull by pull, in queue-offset order (batch and streaming
    reads alike)."""
    if not isinstance(partition, QueueRange):
        raise TypeError(f"boltmq cannot read partition {partition!r}")
    reader = QueueRangeReader(
        partition, namesrv_addr=namesrv_addr, pull_batch_size=pull_batch_size,
        fail_on_data_loss=fail_on_data_loss,
    )  # fmt: skip
    # Closing the generator early (a limit() satisfied) leaves both blocks: the client's
    # connections close and the loop thread ends.
    with (
        start_blocking_portal("trio") as portal,
        portal.wrap_async_context_manager(reader),
    ):
        while (rows := portal.call(reader.next_rows)) is not None:
            yield from rows
