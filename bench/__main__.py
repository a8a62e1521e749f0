"""``python -m bench [name ...] [--quick]``: run benchmarks and print their figures.

Names: remoting, codec, client-cpu, store, registry, broker, broker-cpu, group-commit, stats,
ha, pipeline-write, pipeline-read, monitor, metrics, filter (default: these, in that order),
and fuzz, soak, scale, compare (BoltMQ beside Apache RocketMQ, NATS, RabbitMQ and Redis),
celery (Celery tasks/s on BoltMQ beside Redis), proxy (the official RocketMQ 5 client through
the gRPC proxy) and failover (masters killed in controller mode), which run only when named.
Arguments after a single name go to that benchmark: ``python -m bench fuzz --inputs 1000000``,
``python -m bench soak --duration 600``.
Each benchmark module has ``main(argv)``; with ``--quick`` each gets the arguments for a short
run (its own ``--quick`` where it has one, else a short ``--seconds``). Modules are imported
only when their benchmark runs, so one that is missing or fails costs only its own entry.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from collections.abc import Callable
from typing import cast

BENCHMARKS = {
    "remoting": "bench.bench_remoting:main",
    "codec": "bench.bench_codec:main",
    "client-cpu": "bench.bench_client_cpu:main",
    "store": "bench.bench_store:main",
    "registry": "bench.bench_registry:main",
    "broker": "bench.bench_produce_consume:main",
    "broker-cpu": "bench.bench_broker_cpu:main",
    "group-commit": "bench.bench_group_commit:main",
    "stats": "bench.bench_stats:main",
    "ha": "bench.bench_ha:main",
    "pipeline-write": "bench.bench_pipeline_write:main",
    "pipeline-read": "bench.bench_pipeline_read:main",
    "monitor": "bench.bench_monitor:main",
    "metrics": "bench.bench_metrics:main",
    "filter": "bench.bench_filter:main",
    "proxy": "bench.bench_proxy:main",
    "fuzz": "bench.fuzz:main",
    "soak": "bench.soak:main",
    "scale": "bench.scale:main",
    "compare": "bench.compare:main",
    "celery": "bench.celery:main",
    "failover": "bench.bench_failover:main",
}
#: Run only when named: long by design (a million inputs, a ten-minute soak, 10 GiB written,
#: every peer), or needing peers and extras (celery: Celery and redis-server; proxy: the
#: official RocketMQ 5 client's environment).
ON_REQUEST = frozenset({"fuzz", "soak", "scale", "compare", "celery", "proxy", "failover"})
# remoting and registry take only --seconds; the others have --quick of their own.
QUICK_ARGS = {
    "remoting": ["--seconds", "0.5"],
    "codec": ["--quick"],
    "client-cpu": ["--quick"],
    "store": ["--quick"],
    "registry": ["--seconds", "0.5"],
    "broker": ["--quick"],
    "broker-cpu": ["--quick"],
    "group-commit": ["--quick"],
    "stats": ["--quick"],
    "ha": ["--quick"],
    "pipeline-write": ["--quick"],
    "pipeline-read": ["--quick"],
    "monitor": ["--quick"],
    "metrics": ["--quick"],
    "filter": ["--quick"],
    "proxy": ["--quick"],
    "fuzz": ["--quick"],
    "soak": ["--quick"],
    "scale": ["--quick"],
    "compare": ["--quick"],
    "celery": ["--quick"],
    "failover": ["--quick"],
}


class BenchmarkUnavailable(Exception):
    """A benchmark's module or entry function cannot be loaded."""


def load(name: str) -> Callable[[list[str]], None]:
    """The ``main`` function of benchmark ``name``, imported now."""
    module_name, _, function_name = BENCHMARKS[name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise  # the module exists but one of its own imports is missing
        raise BenchmarkUnavailable(f"module {module_name} not found") from exc
    function = getattr(module, function_name, None)
    if not callable(function):
        raise BenchmarkUnavailable(f"{module_name} has no function {function_name}()")
    return cast(Callable[[list[str]], None], function)


def run(name: str, quick: bool, extra: list[str] | None = None) -> bool:
    """Run one benchmark, printing its figures or why it failed; True when it succeeded."""
    try:
        main = load(name)
        main((QUICK_ARGS[name] if quick else []) + (extra or []))
    except BenchmarkUnavailable as exc:
        print(f"{name}: skipped: {exc}", file=sys.stderr)
        return False
    except SystemExit as exc:  # argparse in the module refused its arguments
        if exc.code in (0, None):
            return True
        print(f"{name}: failed: exited with status {exc.code}", file=sys.stderr)
        return False
    except Exception:
        traceback.print_exc()
        print(f"{name}: failed", file=sys.stderr)
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Run the named benchmarks (default: all); the exit status, 1 if any failed."""
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
    )
    parser.add_argument("names", nargs="*", metavar="name", help=", ".join(BENCHMARKS))
    parser.add_argument("--quick", action="store_true", help="short runs")
    # `python -m bench NAME --help` is that benchmark's help, so -h is handled here.
    parser.add_argument("-h", "--help", action="store_true", help="show this help and exit")
    args, extra = parser.parse_known_args(argv)
    unknown = [name for name in args.names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark {unknown[0]!r}; choose from {', '.join(BENCHMARKS)}")
    if args.help:
        if len(args.names) != 1:
            parser.print_help()
            return 0
        extra = ["--help", *extra]
    if extra and len(args.names) != 1:
        parser.error(f"arguments {' '.join(extra)!r} need exactly one benchmark name before them")
    failed: list[str] = []
    for name in args.names or [name for name in BENCHMARKS if name not in ON_REQUEST]:
        print(f"== {name} ==", flush=True)
        start = time.perf_counter()
        if not run(name, args.quick, extra):
            failed.append(name)
        sys.stderr.flush()
        print(f"({time.perf_counter() - start:.1f} s)\n", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
