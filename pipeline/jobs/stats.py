"""The stats job: per topic, tag and hour of store time, how many messages, how many body
bytes, and the produce-to-store latency (storeTimestamp - bornTimestamp: average, p50, p99,
max, in ms), read from the brokers and written to Parquet partitioned by topic: the history
behind a cluster's message statistics.

    spark-submit pipeline/jobs/stats.py -n 127.0.0.1:9876 -t Orders,Payments \\
        --from 2026-11-23T00:00 --to 2026-11-24T00:00 -o /data/boltmq-stats

One output row per (topic, tag, hour): ``topic`` (the partition column), ``tag`` (null for
messages without one), ``hour`` (the hour's start, a UTC timestamp), ``messages``, ``bytes``
(sum of body lengths, as stored: a compressed body counts inflated), ``latencyAvgMs``,
``latencyP50Ms``, ``latencyP99Ms`` (exact percentiles, interpolated) and ``latencyMaxMs``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.jobs.common import (
    add_cluster_arguments,
    add_output_arguments,
    add_time_arguments,
    read_partitions,
    run_main,
    session,
    shuffle_partitions,
    time_options,
    topic_list,
)

log = logging.getLogger("boltmq.pipeline.jobs")

DESCRIPTION = (
    "Message counts, body bytes and produce-to-store latency per topic, tag and hour of "
    "store time, read from BoltMQ (or RocketMQ 4.x) brokers, written to Parquet "
    "partitioned by topic."
)
EXAMPLE = """example:
  spark-submit pipeline/jobs/stats.py -n 127.0.0.1:9876 -t Orders,Payments \\
      --from 2026-11-23T00:00 --to 2026-11-24T00:00 -o /data/boltmq-stats
  boltmq pipeline stats -n 127.0.0.1:9876 -t Orders -o /tmp/stats --mode overwrite"""

HOUR_MS = 3_600_000

COLUMNS = ("topic", "tag", "hour", "messages", "bytes", "latencyAvgMs", "latencyP50Ms",
           "latencyP99Ms", "latencyMaxMs")  # fmt: skip
"""The output's columns (``topic`` is the Parquet partition column)."""


def stats_frame(messages: DataFrame, partitions: int | None = None) -> DataFrame:
    """The figures of ``messages`` (rows of the boltmq schema) per (topic, tag, hour), in
    ``partitions`` partitions (None: spark.sql.shuffle.partitions)."""
    stored = F.unix_millis(F.col("storeTimestamp"))
    latency: Column = stored - F.unix_millis(F.col("bornTimestamp"))
    # The hour from the epoch in ms: the same hour whatever the session's time zone.
    hour = F.timestamp_millis(F.floor(stored / HOUR_MS) * HOUR_MS)
    keys = ("topic", "tag", "hour")
    rows = messages.select(
        "topic", F.col("tags").alias("tag"), hour.alias("hour"),
        F.length("body").alias("size"), latency.alias("latency"),
    )  # fmt: skip
    if partitions is not None:
        # Partitioned by the grouping keys, the aggregation needs no shuffle of its own: this
        # one is the job's only shuffle, with the number of partitions given here.
        rows = rows.repartition(partitions, *keys)
    return (
        rows.groupBy(*keys)
        .agg(
            F.count(F.lit(1)).alias("messages"),
            F.sum("size").alias("bytes"),
            F.avg("latency").alias("latencyAvgMs"),
            F.percentile("latency", 0.5).alias("latencyP50Ms"),
            F.percentile("latency", 0.99).alias("latencyP99Ms"),
            F.max("latency").alias("latencyMaxMs"),
        )
        .select(*COLUMNS)
    )


def stats(
    spark: SparkSession,
    *,
    namesrv_addr: str,
    topics: Sequence[str],
    output: str,
    start: str | None = None,
    end: str | None = None,
    mode: str = "errorifexists",
) -> int:
    """Read ``topics`` over [start, end) (store times, see `common.epoch_ms`), write their
    figures to Parquet at ``output`` partitioned by topic; the number of rows written."""
    options = {"namesrvAddr": namesrv_addr, "topics": ",".join(topics),
               **time_options(start, end)}  # fmt: skip
    log.info("stats: reading %s from %s, store times %s to %s", ", ".join(topics),
             namesrv_addr, start or "the oldest message", end or "the newest")  # fmt: skip
    messages = spark.read.format("boltmq").options(**options).load()
    read = read_partitions(options)
    partitions = shuffle_partitions(spark, read)
    log.info("stats: %d partitions read, %d after the shuffle by (topic, tag, hour)", read,
             partitions)  # fmt: skip
    figures = stats_frame(messages, partitions).cache()
    try:
        figures.write.mode(mode).partitionBy("topic").parquet(output)
        # Both totals in one job over the cached figures.
        totals = figures.agg(F.count(F.lit(1)), F.sum("messages")).first()
    finally:
        figures.unpersist()
    rows = 0 if totals is None else int(totals[0])
    counted = 0 if totals is None or totals[1] is None else int(totals[1])
    log.info("stats: wrote %d rows (topic, tag, hour) for %d messages to %s", rows, counted,
             output)  # fmt: skip
    return rows


def setup(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """The job's arguments; returns the function that runs it."""
    add_cluster_arguments(parser)
    parser.add_argument("-t", "--topics", required=True,
                        help="topics to read, comma-separated")  # fmt: skip
    add_time_arguments(parser)
    add_output_arguments(parser)

    def job(args: argparse.Namespace) -> int:
        time_options(args.start, args.end)  # a bad time fails before Spark starts
        spark = session("boltmq-stats", args.master)
        rows = stats(
            spark, namesrv_addr=args.namesrv_addr,
            topics=topic_list(args.topics),
            output=args.output, start=args.start, end=args.end, mode=args.mode,
        )  # fmt: skip
        print(f"stats: {rows} rows written to {args.output}")
        return 0

    return job


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """``spark-submit pipeline/jobs/stats.py ...``."""
    return run_main(DESCRIPTION, EXAMPLE, setup, argv, prog)


if __name__ == "__main__":
    sys.exit(main())
