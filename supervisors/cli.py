"""The `boltmq` command line: sub-commands from a table, logging set-up, clean Ctrl-C.

Each sub-command is a ``"module:function"`` in `COMMANDS`. The function is imported only when
its sub-command runs; it receives the sub-command's `argparse.ArgumentParser`, adds its
arguments, and returns the function that runs it::

    def command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
        parser.add_argument("-c", "--config-file", help="a namesrv.conf-style file")
        return lambda args: run_until_signalled(serve, args)

An entry with ``argv=True`` names a ``function(argv: list[str]) -> int`` that parses its own
arguments instead (the global ``--log-level`` is taken out of them first).

So a module plugs in by existing; `boltmq --help` lists every name in the table even when its
module is not part of this build, and running such a name explains that and exits with 2.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import logging
import signal
import sys
import typing
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

log = logging.getLogger("boltmq")

CommandRunner = Callable[[argparse.Namespace], int]
CommandSetup = Callable[[argparse.ArgumentParser], CommandRunner]
ArgvCommand = Callable[[list[str]], int]

EXIT_UNAVAILABLE = 2

LOG_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)-7s %(name)s: %(message)s"
LOG_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
LOG_LEVELS = ("debug", "info", "warning", "error")


@attrs.frozen
class CommandEntry:
    """A sub-command: its one-line help and the ``module:function`` that sets it up
    (or, with ``argv``, the function that takes the remaining arguments and runs)."""

    help: str
    target: str
    argv: bool = False


COMMANDS: dict[str, CommandEntry] = {
    "registry": CommandEntry(
        "run a registry (RocketMQ's NameServer): the route table brokers register with",
        "actors.registry.cli:registry_main",
        argv=True,
    ),
    "broker": CommandEntry(
        "run a broker: stores and serves messages, registers with the registries",
        "actors.broker.launcher:broker_main",
        argv=True,
    ),
    "cluster": CommandEntry(
        "run a registry and a broker in one process (the embedded default)",
        "actors.broker.launcher:cluster_main",
        argv=True,
    ),
    "bench": CommandEntry(
        "load tool: produce or consume as fast as allowed, with msgs/s, MB/s and latency",
        "actors.client.bench_tool:command",
    ),
}


def register_command(name: str, help: str, target: str, *, argv: bool = False) -> None:
    """Add (or replace) a sub-command; ``target`` is ``"module:function"``."""
    COMMANDS[name] = CommandEntry(help, target, argv)


def version() -> str:
    """The installed boltmq version."""
    try:
        return importlib.metadata.version("boltmq")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def main(argv: list[str] | None = None) -> int:
    """Run the `boltmq` command line; returns the process exit code."""
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # argparse's --help, --version and usage errors
        return _exit_code(exc.code)


def configure_logging(level: str = "info") -> None:
    """Log human-readable lines (time, level, logger, message) to stderr at ``level``."""
    root = logging.getLogger()
    # Replace only our own handler, so that handlers others installed keep working.
    for handler in list(root.handlers):
        if getattr(handler, "_boltmq", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT, LOG_DATE_FORMAT))
    handler._boltmq = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.upper())


def run_until_signalled(main: Callable[..., Awaitable[object]], *args: Any) -> int:
    """Run ``main(*args)`` under trio until it returns or SIGINT/SIGTERM arrives.

    A signal cancels ``main`` (supervisors then stop their children in reverse order) and the
    process exits 0 after logging "stopped". An exception from ``main`` is logged and gives 1.
    """

    async def guarded() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_on_signal, nursery.cancel_scope)
            await main(*args)
            nursery.cancel_scope.cancel()

    try:
        trio.run(guarded)
    except KeyboardInterrupt:
        # A second Ctrl-C while shutting down: stop at once.
        log.warning("interrupted during shutdown")
        return 130
    except BaseException as exc:
        error = exc
        # One failure from a nursery arrives wrapped: log the failure itself.
        while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
            error = error.exceptions[0]
        if not isinstance(error, Exception):
            raise
        log.critical("failed: %s", error, exc_info=error)
        return 1
    log.info("stopped")
    return 0


# -- internals ------------------------------------------------------------------------------


def _main(argv: list[str]) -> int:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--log-level",
        type=str.lower,
        choices=LOG_LEVELS,
        default=None,
        help="log threshold (default: info)",
    )
    parser = argparse.ArgumentParser(
        prog="boltmq",
        description="BoltMQ: a RocketMQ-compatible message queue on trio.",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"boltmq {version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, entry in COMMANDS.items():
        # add_help=False: the sub-command's own parser (built after its import) answers -h.
        commands.add_parser(name, help=entry.help, add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_UNAVAILABLE
    entry = COMMANDS[args.command]
    function = _load(args.command, entry)
    if function is None:
        return EXIT_UNAVAILABLE
    if entry.argv:
        own, rest = common.parse_known_args(rest)
        configure_logging(own.log_level or args.log_level or "info")
        return typing.cast(ArgvCommand, function)(rest)
    setup = typing.cast(CommandSetup, function)
    command_parser = argparse.ArgumentParser(
        prog=f"boltmq {args.command}", description=entry.help, parents=[common]
    )
    runner = setup(command_parser)
    command_args = command_parser.parse_args(rest)
    configure_logging(command_args.log_level or args.log_level or "info")
    return runner(command_args)


def _load(name: str, entry: CommandEntry) -> Callable[..., Any] | None:
    module_name, _, function_name = entry.target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # Only the command's own module (or its package) missing means "not in this build";
        # a missing import inside it is a bug and should show as one.
        if exc.name is None or not (module_name + ".").startswith(exc.name + "."):
            raise
        _unavailable(name, f"module {module_name} is not installed")
        return None
    function = getattr(module, function_name or "command", None)
    if not callable(function):
        _unavailable(name, f"{entry.target} does not exist")
        return None
    return typing.cast(Callable[..., Any], function)


def _unavailable(name: str, why: str) -> None:
    print(f"boltmq: the '{name}' command is not available in this build ({why})", file=sys.stderr)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


async def _cancel_on_signal(scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("received %s; stopping", signal.Signals(signum).name)
            scope.cancel()
            return


if __name__ == "__main__":
    sys.exit(main())
