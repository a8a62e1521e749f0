"""The replay job: rows of Parquet (an ``export``, or anything with a ``body`` column) sent
back into a topic, exactly once.

    spark-submit pipeline/jobs/replay.py -n 127.0.0.1:9876 -i /data/orders-2026-11-23 \\
        -t OrdersReplay

Each row becomes a message with its ``body``, ``tags``, ``keys`` and ``properties``; without
``--topic`` each goes to the topic of its ``topic`` column. The write runs with
``exactlyOnce=true`` and a ``writeId`` (by default derived from the input path and the
topic), so a task Spark retries, or the whole job run again with the same write id, stores
each row once (the brokers' dedup index).
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import sys
from collections.abc import Callable, Sequence

from pyspark.sql import SparkSession

from pipeline.jobs.common import JobError, add_cluster_arguments, run_main, session

log = logging.getLogger("boltmq.pipeline.jobs")

DESCRIPTION = (
    "Send Parquet rows (an export, or any table with a body column) back into a BoltMQ "
    "(or RocketMQ 4.x) topic, exactly once."
)
EXAMPLE = """example:
  spark-submit pipeline/jobs/replay.py -n 127.0.0.1:9876 -i /data/orders-2026-11-23 \\
      -t OrdersReplay
  boltmq pipeline replay -n 127.0.0.1:9876 -i /tmp/orders --write-id orders-fix-1"""

MESSAGE_COLUMNS = ("topic", "body", "tags", "keys", "properties")
"""The columns replay sends; the others an export has are left out."""


def default_write_id(input_path: str, topic: str | None) -> str:
    """A write id stable across runs of the same replay: ``replay-`` and a digest of the
    input's absolute path and the topic."""
    digest = hashlib.sha256(f"{os.path.abspath(input_path)}\n{topic or ''}".encode())
    return f"replay-{digest.hexdigest()[:16]}"


def replay(
    spark: SparkSession,
    *,
    namesrv_addr: str,
    input_path: str,
    topic: str | None = None,
    exactly_once: bool = True,
    write_id: str | None = None,
) -> int:
    """Send the rows of the Parquet at ``input_path`` to ``topic`` (each row's ``topic``
    column when None); the number of rows sent."""
    rows = spark.read.parquet(input_path)
    if "body" not in rows.columns:
        raise JobError(f"{input_path} has no body column (columns: {', '.join(rows.columns)})")
    if topic is None and "topic" not in rows.columns:
        raise JobError(f"{input_path} has no topic column: name the topic with --topic")
    rows = rows.select(*[c for c in MESSAGE_COLUMNS if c in rows.columns])
    writer = rows.write.format("boltmq").mode("append").option("namesrvAddr", namesrv_addr)
    if topic is not None:
        writer = writer.option("topic", topic)
    if exactly_once:
        write_id = write_id or default_write_id(input_path, topic)
        writer = writer.option("exactlyOnce", "true").option("writeId", write_id)
    count = rows.count()
    log.info("replay: sending %d rows of %s to %s%s", count, input_path,
             topic or "the topics of their topic column",
             f" exactly once (writeId {write_id})" if exactly_once else "")  # fmt: skip
    writer.save()
    log.info("replay: sent %d rows", count)
    return count


def setup(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """The job's arguments; returns the function that runs it."""
    add_cluster_arguments(parser)
    parser.add_argument("-i", "--input", required=True, help="Parquet directory to send")
    parser.add_argument("-t", "--topic",
                        help="topic to send to (default: each row's topic column)")
    parser.add_argument("--write-id", metavar="NAME",
                        help="the exactly-once write id (default: from the input and topic; "
                        "give the same one to re-run a replay without duplicates)")
    parser.add_argument("--no-exactly-once", dest="exactly_once", action="store_false",
                        help="send without the brokers' dedup (a retried task may send "
                        "twice)")  # fmt: skip

    def job(args: argparse.Namespace) -> int:
        spark = session("boltmq-replay", args.master)
        count = replay(
            spark, namesrv_addr=args.namesrv_addr, input_path=args.input, topic=args.topic,
            exactly_once=args.exactly_once, write_id=args.write_id,
        )  # fmt: skip
        print(f"replay: {count} rows sent")
        return 0

    return job


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """``spark-submit pipeline/jobs/replay.py ...``."""
    return run_main(DESCRIPTION, EXAMPLE, setup, argv, prog)


if __name__ == "__main__":
    sys.exit(main())
