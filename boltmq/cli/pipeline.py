"""`boltmq pipeline`: the Spark jobs of pipeline/jobs on a local session (or any master).

    boltmq pipeline stats -n 127.0.0.1:9876 -t Orders --from 2026-11-23T00:00 -o /tmp/stats
    boltmq pipeline export -n 127.0.0.1:9876 -t Orders -o /tmp/orders
    boltmq pipeline replay -n 127.0.0.1:9876 -i /tmp/orders -t OrdersReplay

Each job's arguments are its script's (``spark-submit pipeline/jobs/stats.py --help`` shows
the same): they are handed over as they are, and the job module (and Spark with it) is loaded
only when a job runs, so the rest of the command line starts without Spark.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from boltmq.cli._run import EXIT_USAGE, Runner

JOBS = {
    "stats": "counts, bytes and produce-to-store latency per topic, tag and hour -> Parquet",
    "export": "a topic range (store times or offsets) -> Parquet, one row per message",
    "replay": "Parquet rows back into a topic, exactly once",
}

HELP = "Spark jobs over topics: stats, export, replay (needs the pipeline extra)"
EXAMPLE = "jobs:\n" + "".join(f"  {name:<8}{text}\n" for name, text in JOBS.items()) + """
examples:
  boltmq pipeline stats -n 127.0.0.1:9876 -t Orders --from 2026-11-23T00:00 -o /tmp/stats
  boltmq pipeline export -n 127.0.0.1:9876 -t Orders -o /tmp/orders
  boltmq pipeline replay -n 127.0.0.1:9876 -i /tmp/orders -t OrdersReplay
  boltmq pipeline stats --help        # a job's own arguments"""


def setup(parser: argparse.ArgumentParser) -> Runner:
    """`boltmq pipeline JOB ARGS...`: the job name, then the job's own arguments."""
    parser.add_argument("job", choices=sorted(JOBS), metavar="JOB",
                        help=f"one of: {', '.join(JOBS)}")  # fmt: skip
    parser.add_argument("arguments", nargs=argparse.REMAINDER, metavar="ARGS",
                        help="the job's arguments (boltmq pipeline JOB --help lists them)")

    def run(args: argparse.Namespace) -> int:
        try:
            job = importlib.import_module(f"pipeline.jobs.{args.job}")
        except ImportError as exc:
            print(
                f"error: the Spark jobs need the pipeline extra ({exc}); install it with "
                "pip install 'boltmq[pipeline]'",
                file=sys.stderr,
            )
            return EXIT_USAGE
        code: int = job.main(args.arguments, prog=f"boltmq pipeline {args.job}")
        return code

    return run
