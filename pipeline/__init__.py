"""BoltMQ on Spark: the ``boltmq`` data source (PySpark 4's Python Data Source API).

    from pipeline import BoltMQDataSource
    spark.dataSource.register(BoltMQDataSource)
    df = (spark.read.format("boltmq").option("namesrvAddr", "127.0.0.1:9876")
          .option("topic", "Orders").load())
    df.write.format("boltmq").mode("append").option("namesrvAddr", "127.0.0.1:9876").save()
    stream = (spark.readStream.format("boltmq").option("namesrvAddr", "127.0.0.1:9876")
              .option("topic", "Orders").option("maxOffsetsPerTrigger", "10000").load())

Modules, one concern each:

- ``source``: `BoltMQDataSource` (the format), `register` (the registration, with filter
  pushdown turned on), `use_current_python`.
- ``options``: the options, checked and typed (`ReadOptions`, `StreamOptions`,
  `WriteOptions`).
- ``schema``: the row schema (`SCHEMA`) and one message as one row.
- ``planning``: on the driver, queues and offsets to `QueueRange` partitions.
- ``timestamps``: on the driver, startingTimestamp / endingTimestamp as offsets.
- ``queue_reader``: on an executor, the pulls of one range (``pulls``: one PULL_MESSAGE,
  with the read's tags as its subscription).
- ``arrow_rows``: pulled messages as Arrow record batches of the row schema.
- ``sender``: on an executor, one write task's batched sends.
- ``stream_writer``: `BoltMQStreamWriter`, a micro-batch's sends (exactly once with
  ``exactlyOnce``: dedup keys from the query and batch ids).
- ``stream_planning``: on the driver, a streaming query's offsets per micro-batch, the
  ranges between two, and the consumer group's commits.
- ``reader`` / ``stream_reader`` / ``writer``: Spark's reader, stream reader and writer
  classes over those.
- ``errors``: `OptionError`, `DataLossError`, `WriteError`.
- ``jobs``: Spark jobs on the data source (stats, export, replay), for spark-submit and
  ``boltmq pipeline``.

Needs the ``pipeline`` extra (pyspark, pyarrow) on the driver and on every executor. Reaches
BoltMQ through client/ only: importing it never loads the store or the servers.
"""

from pipeline.errors import BoltMQSourceError, DataLossError, OptionError, WriteError
from pipeline.options import ReadOptions, StreamOptions, WriteOptions
from pipeline.planning import QueueRange
from pipeline.schema import SCHEMA
from pipeline.source import BoltMQDataSource, register, use_current_python
from pipeline.stream_reader import BoltMQStreamReader
from pipeline.stream_writer import BoltMQStreamWriter
from pipeline.writer import BoltMQCommitMessage

__all__ = [
    "SCHEMA",
    "BoltMQCommitMessage",
    "BoltMQDataSource",
    "BoltMQSourceError",
    "BoltMQStreamReader",
    "BoltMQStreamWriter",
    "DataLossError",
    "OptionError",
    "QueueRange",
    "ReadOptions",
    "StreamOptions",
    "WriteError",
    "WriteOptions",
    "register",
    "use_current_python",
]
