"""argparse value types and flags shared by the sub-commands: one wording for every bad
number, one spelling of the registry flag."""

from __future__ import annotations

import argparse

#: The registry flag as mqadmin spells it; every sub-command that talks to a cluster takes it.
NAMESRV_FLAGS = ("-n", "--namesrvAddr")
#: Spellings some sub-commands took before: still parsed, so old command lines keep working,
#: but never shown in --help.
OLD_NAMESRV_FLAGS = ("--namesrv", "--namesrv-addr")


def add_namesrv_argument(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    *,
    dest: str,
    help: str,
    default: str | None = None,
    metavar: str = "ADDR[;ADDR]",
) -> None:
    """Add ``-n/--namesrvAddr`` to ``parser``, with the old spellings as hidden aliases."""
    parser.add_argument(*NAMESRV_FLAGS, dest=dest, default=default, metavar=metavar, help=help)
    # default=SUPPRESS: the alias must not put its own default over the visible flag's.
    parser.add_argument(
        *OLD_NAMESRV_FLAGS, dest=dest, default=argparse.SUPPRESS, metavar=metavar,
        help=argparse.SUPPRESS,
    )  # fmt: skip


def positive_int(text: str) -> int:
    """A whole number above 0 (counts, sizes, intervals in whole seconds)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be above 0")
    return value


def positive_seconds(text: str) -> float:
    """A number of seconds above 0 (timeouts, refresh intervals)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text} must be above 0")
    return value


def non_negative_seconds(text: str) -> float:
    """A number of seconds, 0 allowed (0 meaning "no wait" or "no limit" where the flag says)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} must be 0 or above")
    return value


def ratio(text: str) -> float:
    """A fraction above 0 and at most 1 (alert thresholds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a ratio such as 0.9") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text} must be above 0 and at most 1")
    return value
