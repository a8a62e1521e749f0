"""What every `boltmq` sub-command shares: logging, the version, and running until a signal.

`serve` is the one serve loop: a supervisor over the command's children, in the foreground,
until Ctrl-C or SIGTERM cancels it (the supervisor then stops the children in reverse order).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

from storage import StoreError
from supervisors.supervisor import ChildSpec, Supervisor, SupervisorEscalation

log = logging.getLogger("boltmq")

#: What a sub-command's set-up returns: the function that runs it on the parsed arguments.
Runner = Callable[[argparse.Namespace], int]

EXIT_USAGE = 2

LOG_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)-7s %(name)s: %(message)s"
LOG_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
LOG_LEVELS = ("debug", "info", "warning", "error")


def version() -> str:
    """The installed boltmq version."""
    try:
        return importlib.metadata.version("boltmq")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


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
        root = _root_cause(error)
        if isinstance(root, StoreError):
            # The store's own refusal (corruption, a locked directory) already says what is
            # wrong and what to do; a traceback would only bury that line.
            log.critical("failed: %s", root)
            return 1
        log.critical("failed: %s", error, exc_info=error)
        return 1
    log.info("stopped")
    return 0


def _root_cause(error: BaseException) -> BaseException:
    """The failure under supervisor escalations, single-exception groups and causes."""
    seen: set[int] = set()
    while id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, SupervisorEscalation):
            error = error.cause
        elif isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
            error = error.exceptions[0]
        elif error.__cause__ is not None:
            error = error.__cause__
        else:
            break
    return error


def serve(name: str, children: Sequence[ChildSpec]) -> int:
    """Run ``children`` under one supervisor until a signal; the process exit code."""
    return run_until_signalled(_supervise, name, list(children))


async def _supervise(name: str, children: list[ChildSpec]) -> None:
    supervisor = Supervisor(name, children)
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)


async def _cancel_on_signal(scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("received %s; stopping", signal.Signals(signum).name)
            scope.cancel()
            return
