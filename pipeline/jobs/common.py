"""What the jobs share: parsing times, a local SparkSession, shuffles sized to the read, and
progress lines.

Times on the command line are ISO-8601 (``2026-11-24T09:00``, UTC unless it names a zone) or
milliseconds since the epoch, the unit of the read options startingTimestamp / endingTimestamp.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import trio
from pyspark.sql import SparkSession

import pipeline
from pipeline.options import read_options
from pipeline.planning import plan_ranges

log = logging.getLogger("boltmq.pipeline.jobs")

DEFAULT_MASTER = "local[2]"


class JobError(ValueError):
    """A job's argument it cannot use; the message says which and what to give instead."""


def epoch_ms(text: str, what: str) -> int:
    """``text`` (ISO-8601, UTC unless it says otherwise, or ms since the epoch) in ms."""
    value = text.strip()
    if value.isdigit():
        return int(value)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise JobError(
            f"{what} {text!r} is neither an ISO-8601 time (2026-11-24T09:00, UTC unless a zone "
            "is given) nor milliseconds since the epoch"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """-n / --namesrvAddr (mqadmin's spelling), and --master for the session a job builds."""
    metavar = "HOST:PORT[;HOST:PORT]"
    parser.add_argument("-n", "--namesrvAddr", dest="namesrv_addr", metavar=metavar,
                        help="the registries (RocketMQ NameServers; required)")  # fmt: skip
    # The spellings jobs took before, kept so old command lines work, hidden from --help; the
    # flag is checked by check_cluster_arguments, as required=True would refuse these.
    parser.add_argument(
        "--namesrv-addr", "--namesrv", dest="namesrv_addr", metavar=metavar,
        default=argparse.SUPPRESS, help=argparse.SUPPRESS,
    )  # fmt: skip
    parser.add_argument(
        "--master", default=None,
        help=f"Spark master of the session the job builds (default {DEFAULT_MASTER}; under "
        "spark-submit, the one spark-submit was given)",
    )  # fmt: skip


def check_cluster_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit with argparse's usage error when a job that takes -n was not given it."""
    if getattr(args, "namesrv_addr", "") is None:
        parser.error("the following arguments are required: -n/--namesrvAddr")


def add_time_arguments(parser: argparse.ArgumentParser) -> None:
    """--from / --to: the store-time range to read."""
    parser.add_argument(
        "--from", dest="start", metavar="TIME",
        help="first store time read: ISO-8601 (UTC unless a zone is given) or ms since the "
        "epoch (default: the oldest message)",
    )  # fmt: skip
    parser.add_argument(
        "--to", dest="end", metavar="TIME",
        help="store time not read any more, same forms (default: the newest message)",
    )  # fmt: skip


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """``-o/--output`` and ``--mode``: where a job writes Parquet, and what if it exists."""
    parser.add_argument("-o", "--output", required=True, help="Parquet directory to write")
    parser.add_argument(
        "--mode", default="errorifexists", choices=("errorifexists", "overwrite", "append"),
        help="when the output exists: fail (default), replace it, or add to it",
    )  # fmt: skip


def topic_list(text: str) -> list[str]:
    """``--topics a,b`` as a list, blanks dropped."""
    return [topic.strip() for topic in text.split(",") if topic.strip()]


def time_options(start: str | None, end: str | None) -> dict[str, str]:
    """startingTimestamp / endingTimestamp read options of --from / --to."""
    options = {}
    if start is not None:
        options["startingTimestamp"] = str(epoch_ms(start, "--from"))
    if end is not None:
        options["endingTimestamp"] = str(epoch_ms(end, "--to"))
    if len(options) == 2 and int(options["startingTimestamp"]) > int(options["endingTimestamp"]):
        raise JobError(f"--from {start} is after --to {end}")
    return options


SHUFFLE_PARTITIONS_CONF = "spark.sql.shuffle.partitions"


def read_partitions(options: Mapping[str, str]) -> int:
    """How many partitions a boltmq read with ``options`` has: one per queue range, planned
    here as the data source plans it (the route and the queues' offsets), at least one.

    Asking Spark instead (``df.rdd.getNumPartitions()``) starts a Python worker to plan the
    read once more, which took seconds on a loaded machine.
    """
    # In a thread of its own: the caller may run in an event loop already (a notebook).
    with ThreadPoolExecutor(1) as pool:
        ranges = pool.submit(trio.run, plan_ranges, read_options(options)).result()
    return max(1, len(ranges))


def shuffle_partitions(spark: SparkSession, read_partitions: int) -> int:
    """How many partitions a job's shuffle of a read with ``read_partitions`` partitions gets:
    as many, at most ``spark.sql.shuffle.partitions``.

    Spark's default of 200 makes a job over a few queues run 200 nearly empty tasks in every
    stage after a shuffle, which is most of its time on a small topic.
    """
    configured = int(spark.conf.get(SHUFFLE_PARTITIONS_CONF) or 200)
    return max(1, min(read_partitions, configured))


def session(app: str, master: str | None) -> SparkSession:
    """The job's session, with the boltmq format registered: on ``master`` when given, else
    on spark-submit's master when spark-submit runs the script, else local[2]."""
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started the JVM already
    if master is None and not submitted:
        master = DEFAULT_MASTER
    if master is not None and master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    pipeline.use_current_python()
    builder = SparkSession.builder.appName(app).config("spark.ui.showConsoleProgress", "true")
    if master is not None:
        builder = builder.master(master)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    pipeline.register(spark)
    return spark


def run_main(
    description: str,
    example: str,
    setup: Callable[[argparse.ArgumentParser], Callable[[argparse.Namespace], int]],
    argv: Sequence[str] | None = None,
    prog: str | None = None,
) -> int:
    """A job script's entry: arguments, logging, the job; one error line and exit 2 on a bad
    argument or option."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description, epilog=example,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    job = setup(parser)
    args = parser.parse_args(argv)
    check_cluster_arguments(parser, args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    return guarded(job, args)


def guarded(job: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run ``job``; a JobError or a refused option becomes one line on stderr and exit 2."""
    try:
        return job(args)
    except (JobError, pipeline.OptionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        cause = _option_error(exc)
        if cause is None:
            raise
        print(f"error: {cause}", file=sys.stderr)
        return 2


def _option_error(exc: BaseException) -> str | None:
    """The OptionError line inside a Spark error (Spark wraps the data source's exceptions)."""
    for line in str(exc).splitlines():
        marker = "OptionError: "
        if marker in line:
            return line.split(marker, 1)[1].strip()
    return None
