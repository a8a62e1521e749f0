"""``python -m bench [name ...] [--quick]``: run benchmarks and print their figures.

Names: remoting, codec, store, registry, broker (default: all, in that order). Each benchmark
module has ``main(argv)``; ``--quick`` is passed on for a short run.
"""

from __future__ import annotations

import argparse
import importlib
import sys

BENCHMARKS = {
    "remoting": "bench.bench_remoting:main",
    "codec": "bench.bench_codec:main",
    "store": "bench.bench_store:main",
    "registry": "bench.bench_registry:main",
    "broker": "bench.bench_produce_consume:main",
}
QUICK_ARGS = {
    "remoting": ["--seconds", "0.5"],
    "codec": ["--quick"],
    "store": ["--quick"],
    "registry": ["--seconds", "0.5"],
    "broker": ["--quick"],
}


def main(argv: list[str] | None = None) -> int:
    """Run the named benchmarks; the exit status."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="name", help=", ".join(BENCHMARKS))
    parser.add_argument("--quick", action="store_true", help="short runs")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark {unknown[0]!r}; choose from {', '.join(BENCHMARKS)}")
    for name in args.names or list(BENCHMARKS):
        module_name, _, function = BENCHMARKS[name].partition(":")
        print(f"== {name} ==", flush=True)
        module = importlib.import_module(module_name)
        getattr(module, function)(QUICK_ARGS[name] if args.quick else [])
        print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
