"""The export job: a range of one or more topics, by store time or by offsets, written to
Parquet with every column of the boltmq schema (one row per message). ``replay`` sends such
a directory back into a topic.

    spark-submit pipeline/jobs/export.py -n 127.0.0.1:9876 -t Orders \\
        --from 2026-11-23T00:00 --to 2026-11-24T00:00 -o /data/orders-2026-11-23
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from pyspark.sql import SparkSession

from pipeline.jobs.common import (
    JobError,
    add_cluster_arguments,
    add_output_arguments,
    add_time_arguments,
    run_main,
    session,
    time_options,
    topic_list,
)

log = logging.getLogger("boltmq.pipeline.jobs")

DESCRIPTION = (
    "Write a range of BoltMQ (or RocketMQ 4.x) topics to Parquet, one row per message with "
    "every column of the boltmq schema."
)
EXAMPLE = """example:
  spark-submit pipeline/jobs/export.py -n 127.0.0.1:9876 -t Orders \\
      --from 2026-11-23T00:00 --to 2026-11-24T00:00 -o /data/orders-2026-11-23
  boltmq pipeline export -n 127.0.0.1:9876 -t Orders --sub-expression 'TagA || TagB' \\
      --starting-offsets earliest -o /tmp/orders"""


def export(
    spark: SparkSession,
    *,
    namesrv_addr: str,
    topics: Sequence[str],
    output: str,
    start: str | None = None,
    end: str | None = None,
    starting_offsets: str | None = None,
    ending_offsets: str | None = None,
    sub_expression: str | None = None,
    mode: str = "errorifexists",
) -> int:
    """Write ``topics`` over a store-time range (``start``/``end``) or an offset range
    (``starting_offsets``/``ending_offsets``: as the read options take them) to Parquet at
    ``output``; the number of messages written."""
    options = {"namesrvAddr": namesrv_addr, "topics": ",".join(topics),
               **time_options(start, end)}  # fmt: skip
    for name, value, clash in (("startingOffsets", starting_offsets, "startingTimestamp"),
                               ("endingOffsets", ending_offsets, "endingTimestamp")):
        if value is not None:
            if clash in options:
                flag = "--from" if clash == "startingTimestamp" else "--to"
                raise JobError(f"give {flag} or the {name} offsets, not both")
            options[name] = value
    if sub_expression is not None:
        options["subExpression"] = sub_expression
    log.info("export: reading %s from %s (%s)", ", ".join(topics), namesrv_addr,
             ", ".join(f"{k}={v}" for k, v in options.items()
                       if k not in ("namesrvAddr", "topics")) or "everything")  # fmt: skip
    messages = spark.read.format("boltmq").options(**options).load().cache()
    try:
        messages.write.mode(mode).parquet(output)
        count = messages.count()
    finally:
        messages.unpersist()
    log.info("export: wrote %d messages to %s", count, output)
    return count


def setup(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """The job's arguments; returns the function that runs it."""
    add_cluster_arguments(parser)
    parser.add_argument("-t", "--topics", required=True,
                        help="topics to read, comma-separated")  # fmt: skip
    add_time_arguments(parser)
    parser.add_argument("--starting-offsets", metavar="OFFSETS",
                        help="earliest, latest or the offsets JSON of startingOffsets "
                        "(instead of --from)")  # fmt: skip
    parser.add_argument("--ending-offsets", metavar="OFFSETS",
                        help="earliest, latest or the offsets JSON of endingOffsets "
                        "(instead of --to)")  # fmt: skip
    parser.add_argument("--sub-expression", metavar="TAGS",
                        help="only these tags, 'TagA || TagB' (the broker filters)")
    add_output_arguments(parser)

    def job(args: argparse.Namespace) -> int:
        time_options(args.start, args.end)  # a bad time fails before Spark starts
        spark = session("boltmq-export", args.master)
        count = export(
            spark, namesrv_addr=args.namesrv_addr,
            topics=topic_list(args.topics),
            output=args.output, start=args.start, end=args.end,
            starting_offsets=args.starting_offsets, ending_offsets=args.ending_offsets,
            sub_expression=args.sub_expression, mode=args.mode,
        )  # fmt: skip
        print(f"export: {count} messages written to {args.output}")
        return 0

    return job


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """``spark-submit pipeline/jobs/export.py ...``."""
    return run_main(DESCRIPTION, EXAMPLE, setup, argv, prog)


if __name__ == "__main__":
    sys.exit(main())
