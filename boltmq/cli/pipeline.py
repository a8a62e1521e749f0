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
import sys
from collections.abc import Callable, Sequence
from typing import Protocol

from boltmq.cli._run import EXIT_USAGE, Runner


class JobMain(Protocol):
    """A job script's ``main``: its own arguments in, an exit code out."""

    def __call__(self, argv: Sequence[str] | None = None, prog: str | None = None) -> int: ...


# Each job imports Spark, which takes seconds, so the table holds loaders that import the job
# when it runs, never the job modules themselves.
def _stats() -> JobMain:
    from pipeline.jobs import stats

    return stats.main


def _export() -> JobMain:
    from pipeline.jobs import export

    return export.main


def _replay() -> JobMain:
    from pipeline.jobs import replay

    return replay.main


#: Job name -> (what it does, the loader of its ``main``).
JOBS: dict[str, tuple[str, Callable[[], JobMain]]] = {
    "stats": (
        "counts, bytes and produce-to-store latency per topic, tag and hour -> Parquet",
        _stats,
    ),
    "export": ("a topic range (store times or offsets) -> Parquet, one row per message", _export),
    "replay": ("Parquet rows back into a topic, exactly once", _replay),
}

HELP = "Spark jobs over topics: stats, export, replay (needs the pipeline extra)"
EXAMPLE = (
    "jobs:\n"
    + "".join(f"  {name:<8}{text}\n" for name, (text, _) in JOBS.items())
    + """
examples:
  boltmq pipeline stats -n 127.0.0.1:9876 -t Orders --from 2026-11-23T00:00 -o /tmp/stats
  boltmq pipeline export -n 127.0.0.1:9876 -t Orders -o /tmp/orders
  boltmq pipeline replay -n 127.0.0.1:9876 -i /tmp/orders -t OrdersReplay
  boltmq pipeline stats --help        # a job's own arguments"""
)


def setup(parser: argparse.ArgumentParser) -> Runner:
    """`boltmq pipeline JOB ARGS...`: the job name, then the job's own arguments."""
    parser.add_argument("job", choices=sorted(JOBS), metavar="JOB",
                        help=f"one of: {', '.join(JOBS)}")  # fmt: skip
    parser.add_argument(
        "arguments",
        nargs=argparse.REMAINDER,
        metavar="ARGS",
        help="the job's arguments (boltmq pipeline JOB --help lists them)",
    )

    def run(args: argparse.Namespace) -> int:
        try:
            main = JOBS[args.job][1]()
        except ImportError as exc:
            print(
                f"error: the Spark jobs need the pipeline extra ({exc}); install it with "
                "pip install 'boltmq[pipeline]'",
                file=sys.stderr,
            )
            return EXIT_USAGE
        return main(args.arguments, prog=f"boltmq pipeline {args.job}")

    return run
