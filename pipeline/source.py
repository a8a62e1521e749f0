"""The data source Spark sees: ``spark.read.format("boltmq")``,
``spark.readStream.format("boltmq")`` and ``df.write.format("boltmq")``.

    from pipeline import BoltMQDataSource
    spark.dataSource.register(BoltMQDataSource)
    df = spark.read.format("boltmq").option("namesrvAddr", "127.0.0.1:9876") \\
        .option("topic", "Orders").load()

Spark creates this class again in each Python worker it plans or runs a query in, with the
user's options; options are checked at ``load()`` and when a reader or writer is asked for, so
a bad one fails the query before any task starts.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from pipeline.errors import OptionError
from pipeline.options import check_read_options, read_options, stream_options, write_options
from pipeline.reader import BoltMQPushdownReader, BoltMQReader
from pipeline.schema import SCHEMA, same_columns
from pipeline.stream_reader import BoltMQStreamReader
from pipeline.stream_writer import BoltMQStreamWriter
from pipeline.writer import BoltMQWriter, check_columns


class BoltMQDataSource(DataSource):
    """BoltMQ (and RocketMQ 4.x) topics as a Spark data source: batch and streaming read,
    batch and streaming write.

    Options and the row schema: docs/pipeline.md. Register with
    ``spark.dataSource.register(BoltMQDataSource)`` (or `register`, which also turns filter
    pushdown on).
    """

    @classmethod
    def name(cls) -> str:
        """The format name: ``boltmq``."""
        return "boltmq"

    def schema(self) -> StructType:
        """The fixed row schema, `pipeline.schema.SCHEMA`.

        Spark asks for it at ``load()`` (and never for a write), so the read options are
        checked here too: a bad one fails ``load()`` rather than the first action. Spark does
        not say here whether the read is a batch or a streaming one: an option of the other
        kind is refused when the reader is asked for (`reader`, `streamReader`).
        """
        check_read_options(self.options)
        return SCHEMA

    def reader(self, schema: StructType) -> BoltMQReader:
        """A batch reader; OptionError names a bad option.

        A `BoltMQPushdownReader` (filters on ``tags`` go to the broker) unless PySpark's read
        planner asks: that one plans the reads Spark pushes no filters into, and refuses a
        reader with ``pushFilters`` while filter pushdown is off (`PUSHDOWN_CONF`).
        """
        _check_schema(schema)
        options = read_options(self.options)
        if _asked_by(_READ_PLANNER):
            return BoltMQReader(options)
        return BoltMQPushdownReader(options)

    def streamReader(self, schema: StructType) -> BoltMQStreamReader:
        """A streaming reader; OptionError names a bad option."""
        _check_schema(schema)
        return BoltMQStreamReader(stream_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> BoltMQWriter:
        """A batch writer; refuses overwrite (a topic cannot be overwritten, only added to)."""
        options = write_options(self.options)
        if overwrite:
            raise OptionError(
                "boltmq cannot overwrite a topic: messages are only ever appended; use "
                'mode("append")'
            )
        return BoltMQWriter(options, check_columns(schema, options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> BoltMQStreamWriter:
        """A streaming writer; refuses the complete output mode (a topic is only added to)."""
        # Spark hands the sink the query's own options too; they are Spark's, not ours.
        ours = {k: v for k, v in self.options.items() if k.lower() not in _SPARK_STREAM_OPTIONS}
        options = write_options(ours, streaming=True)
        if overwrite:
            raise OptionError(
                "boltmq cannot rewrite a topic in the complete output mode: messages are only "
                'ever appended; use outputMode("append")'
            )
        return BoltMQStreamWriter(options, check_columns(schema, options))


_SPARK_STREAM_OPTIONS = frozenset({"checkpointlocation"})

# PySpark asks for a batch reader from one of two worker modules: the filter-pushdown worker,
# which calls pushFilters (only while the switch is on, and only for a query with filters
# Spark can hand over), or the read planner, which never does and, with the switch off,
# fails the read if the reader's class defines pushFilters. Neither tells the data source the
# switch, and its Python workers cannot see the session, so the caller is the one thing to go
# by. Any other caller (a newer PySpark, a test) gets the reader that takes filters.
_READ_PLANNER = "pyspark.sql.worker.plan_data_source_read"


def _asked_by(module: str) -> bool:
    """Whether a function of ``module`` is among the callers of the current call."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if name == "__main__":  # a worker started as ``python -m module``
            spec = frame.f_globals.get("__spec__")
            name = getattr(spec, "name", name)
        if name == module:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _check_schema(schema: StructType) -> None:
    if not same_columns(schema, SCHEMA):
        raise OptionError(
            "boltmq rows have a fixed schema; read without .schema(...) and select "
            f"columns instead (given: {schema.simpleString()})"
        )


def use_current_python(spark: SparkSession | None = None) -> None:
    """Make Spark's Python workers run this interpreter, where boltmq is installed.

    Sets PYSPARK_PYTHON and PYSPARK_DRIVER_PYTHON to ``sys.executable`` when they are not set;
    call it before the session is built. Given a session whose context was built without
    PYSPARK_PYTHON (it then falls back to ``python3``, which may lack boltmq), also points
    the context's worker executable at this interpreter, for the data sources and functions
    registered from now on. On a real cluster set PYSPARK_PYTHON to the executors' Python,
    with boltmq installed there, and this changes nothing.
    """
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        os.environ.setdefault(name, sys.executable)
    if spark is None:
        return
    try:
        context = spark.sparkContext
    except Exception:  # Spark Connect has no local context: its server's settings rule
        return
    if context.pythonExec == "python3" and os.environ["PYSPARK_PYTHON"] != "python3":
        # The context read the variable when it was built, before it was set above.
        context.pythonExec = os.environ["PYSPARK_PYTHON"]


PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
"""Spark's switch for filter pushdown into Python data sources (off by default). Reads work
either way; on, a filter on ``tags`` is handed to the broker instead of applied by Spark."""


def register(spark: SparkSession) -> None:
    """A convenience: `use_current_python`, filter pushdown on (`PUSHDOWN_CONF`) unless the
    session already sets it, then the standard registration,
    ``spark.dataSource.register(BoltMQDataSource)``."""
    use_current_python(spark)
    if spark.conf.get(PUSHDOWN_CONF, None) in (None, ""):
        spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(BoltMQDataSource)
