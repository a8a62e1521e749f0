"""The `boltmq` command line: one table of sub-commands, logging set-up, clean Ctrl-C.

Each sub-command lives in a module of this package, one module per family of verbs, and is an
entry of `COMMANDS`: its one-line help, an example for its ``--help``, and a set-up function
that adds its arguments to its parser and returns the function that runs it::

    def setup(parser: argparse.ArgumentParser) -> Runner:
        parser.add_argument("-c", "--config", help="a namesrv.conf-style file")
        return lambda args: serve("registry", [...])

Nothing else imports this package: it is the top of the tree.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import attrs

from boltmq.cli import admin, bench, broker, controller, monitor, pipeline, proxy, registry, web
from boltmq.cli._run import (
    EXIT_USAGE,
    LOG_LEVELS,
    Runner,
    configure_logging,
    run_until_signalled,
    serve,
    version,
)
from protocol import codecs_status

__all__ = [
    "COMMANDS",
    "Command",
    "configure_logging",
    "main",
    "Runner",
    "run_until_signalled",
    "serve",
    "version",
]


@attrs.frozen
class Command:
    """A sub-command: its one-line help, an example for ``--help``, and its set-up."""

    help: str
    example: str
    setup: Callable[[argparse.ArgumentParser], Runner] = attrs.field(repr=False)


COMMANDS: dict[str, Command] = {
    "registry": Command(registry.HELP, registry.EXAMPLE, registry.setup),
    "controller": Command(controller.HELP, controller.EXAMPLE, controller.setup),
    "broker": Command(broker.BROKER_HELP, broker.BROKER_EXAMPLE, broker.setup_broker),
    "cluster": Command(broker.CLUSTER_HELP, broker.CLUSTER_EXAMPLE, broker.setup_cluster),
    "bench": Command(bench.HELP, bench.EXAMPLE, bench.command),
    "admin": Command(admin.HELP, admin.EXAMPLE, admin.setup),
    "web": Command(web.HELP, web.EXAMPLE, web.setup),
    "pipeline": Command(pipeline.HELP, pipeline.EXAMPLE, pipeline.setup),
    "monitor": Command(monitor.HELP, monitor.EXAMPLE, monitor.setup),
    "proxy": Command(proxy.HELP, proxy.EXAMPLE, proxy.setup),
}


def main(argv: list[str] | None = None) -> int:
    """Run the `boltmq` command line; returns the process exit code."""
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # argparse's --help, --version and usage errors
        return _exit_code(exc.code)


def parser() -> argparse.ArgumentParser:
    """The whole `boltmq` argument parser, every sub-command's arguments included."""
    top = argparse.ArgumentParser(
        prog="boltmq",
        description="BoltMQ: a RocketMQ-compatible message queue on trio.",
        epilog="example:\n  boltmq cluster          # a registry and a broker, data under ~/boltmq",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top.add_argument(
        "--version",
        action="version",
        version=f"boltmq {version()} (codecs: {codecs_status()})",
        help="show the version and whether the compiled codecs run, then exit",
    )
    _add_log_level(top, default=None)
    commands = top.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, command in COMMANDS.items():
        sub = commands.add_parser(
            name,
            help=command.help,
            description=command.help,
            epilog=command.example,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        # SUPPRESS: a --log-level given before the command name is not reset by the default.
        _add_log_level(sub, default=argparse.SUPPRESS)
        sub.set_defaults(run=command.setup(sub))
    return top


# -- internals ------------------------------------------------------------------------------


def _add_log_level(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument(
        "--log-level",
        type=str.lower,
        choices=LOG_LEVELS,
        default=default,
        help="log threshold (default: info)",
    )


def _main(argv: list[str]) -> int:
    top = parser()
    args = top.parse_args(argv)
    if args.command is None:
        top.print_help(sys.stderr)
        return EXIT_USAGE
    configure_logging(args.log_level or "info")
    run: Runner = args.run
    return run(args)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1
