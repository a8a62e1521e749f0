"""The verb table: each `boltmq admin` verb is one async function registered with `verb`.

A verb declares its own flags (`arg`), a one-line help and an example; the framework adds the
common flags (-n, --json, --timeout, --debug), opens the `Admin` client, and renders the
`Result` the verb returns.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs

from boltmq.cli.admin._output import Result
from client import Admin

#: What a verb is: given the open admin client and the parsed flags, the result to show.
VerbFunction = Callable[[Admin, argparse.Namespace], Awaitable[Result]]


class AdminError(Exception):
    """A failure a person can act on: the message says what failed and what to check (exit 1)."""


class UsageError(Exception):
    """Flags that do not fit together (exit 2), found after argparse's own checks."""


@attrs.frozen
class Arg:
    """One flag of a verb: ``add_argument``'s positional and keyword arguments."""

    flags: tuple[str, ...]
    options: dict[str, Any]


def arg(*flags: str, **options: Any) -> Arg:
    """A verb flag, spelled as for ``argparse.ArgumentParser.add_argument``."""
    return Arg(flags, options)


@attrs.frozen
class Verb:
    """A registered verb: its name (mqadmin's), help, example, flags and function."""

    name: str
    help: str
    example: str
    args: tuple[Arg, ...]
    function: VerbFunction = attrs.field(repr=False)


#: Every verb by name, in registration order (the order `boltmq admin --help` lists them).
VERBS: dict[str, Verb] = {}


def verb(
    name: str, help: str, example: str, args: Sequence[Arg] = ()
) -> Callable[[VerbFunction], VerbFunction]:
    """Register the decorated function as the verb ``name`` (mqadmin's spelling)."""

    def register(function: VerbFunction) -> VerbFunction:
        if name in VERBS:
            raise ValueError(f"admin verb {name} is registered twice")
        VERBS[name] = Verb(name, help, example, tuple(args), function)
        return function

    return register


def boolean(text: str) -> bool:
    """An argparse type: ``true`` or ``false``, as mqadmin's flags take them."""
    lowered = text.lower()
    if lowered not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{text!r} is not true or false")
    return lowered == "true"


# -- flags several verbs share, spelled as mqadmin spells them -------------------------------


def topic_arg(required: bool = True) -> Arg:
    """``-t/--topic``."""
    return arg("-t", "--topic", required=required, help="topic name")


def group_arg(required: bool = True) -> Arg:
    """``-g/--group``."""
    return arg("-g", "--group", required=required, help="consumer group name")


def broker_addr_arg(required: bool = False) -> Arg:
    """``-b/--brokerAddr``."""
    return arg("-b", "--brokerAddr", dest="broker_addr", required=required,
               help="broker address host:port")  # fmt: skip


def cluster_arg() -> Arg:
    """``-c/--clusterName``."""
    return arg("-c", "--clusterName", dest="cluster", help="cluster name")


async def target_brokers(admin: Admin, args: argparse.Namespace) -> list[str]:
    """The broker addresses ``-b`` or ``-c`` names; exactly one of them must be given."""
    broker_addr = getattr(args, "broker_addr", None)
    cluster = getattr(args, "cluster", None)
    if (broker_addr is None) == (cluster is None):
        raise UsageError("give either -b BROKER_ADDR or -c CLUSTER")
    if broker_addr is not None:
        return [broker_addr]
    masters = await admin.masters(cluster)
    if not masters:
        raise AdminError(f"cluster {cluster} has no master broker; check with clusterList")
    return list(masters.values())
