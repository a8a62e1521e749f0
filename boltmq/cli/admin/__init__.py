"""`boltmq admin VERB`: mqadmin's verbs against a BoltMQ or Apache RocketMQ 4.x cluster.

The layers, bottom up:

- ``_output``: `Column`, `Table` and `Result`. A table is defined once by its columns; a
  column's key is the camelCase ``--json`` key and its title the table heading, so both modes
  always agree.
- ``_verbs``: the verb table. A verb is one async function taking the open `client.Admin` and
  the parsed flags and returning a `Result`; `AdminError` is a failure a person can act on
  (one line, exit 1), `UsageError` flags that do not fit together (exit 2).
- ``_runner``: runs one verb under trio with a deadline and turns every failure into one line
  on stderr (the traceback only with ``--debug``).
- the verb modules, one family each: ``cluster`` (brokers, broker config, stats), ``namesrv``
  (registry config, KV config, write perm), ``topics``, ``groups`` (groups and connections),
  ``offsets`` (consume progress and resets), ``stats`` (statsAll), ``controller``
  (controller mode: getSyncStateSet, getBrokerEpoch, getControllerMetaData, electMaster).

Adding a verb module: create ``boltmq/cli/admin/NAME.py``, register each verb with the
decorator, and import the module below (importing it registers its verbs)::

    from boltmq.cli.admin._output import Column, Result, Table
    from boltmq.cli.admin._verbs import AdminError, arg, topic_arg, verb

    @verb("topicStatus", "queue offsets of a topic",
          "boltmq admin topicStatus -n 127.0.0.1:9876 -t Orders", [topic_arg()])
    async def topic_status(admin: Admin, args: argparse.Namespace) -> Result:
        ...
        return Result.of_table(Table(COLUMNS, rows))

Every verb gets -n/--namesrvAddr (default $NAMESRV_ADDR, then 127.0.0.1:9876), --json,
--timeout and --debug from the framework; do not declare them again.
"""

from __future__ import annotations

import argparse
import os
import sys

from boltmq.cli._argtypes import add_namesrv_argument, positive_seconds
from boltmq.cli._run import Runner

# Importing a verb module registers its verbs (the order here is the order of --help).
from boltmq.cli.admin import (
    cluster,
    controller,
    dlq,
    groups,
    messages,
    namesrv,
    offsets,
    stats,
    topics,
)
from boltmq.cli.admin._runner import run_verb
from boltmq.cli.admin._verbs import VERBS, Verb

__all__ = ["EXAMPLE", "HELP", "setup"]

HELP = "operate a cluster: mqadmin's verbs (clusterList, topicStatus, consumerProgress, ...)"
EXAMPLE = """examples:
  boltmq admin clusterList -n 127.0.0.1:9876
  boltmq admin topicStatus -t Orders --json
  boltmq admin consumerProgress -g OrderConsumers
  boltmq admin VERB --help        # a verb's own flags"""

DEFAULT_NAMESRV = "127.0.0.1:9876"

_VERB_MODULES = (cluster, dlq, groups, messages, namesrv, offsets, stats, topics, controller)


def setup(parser: argparse.ArgumentParser) -> Runner:
    """Add every verb as a sub-command of ``parser``; returns the runner."""
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", title="verbs")
    for verb in VERBS.values():
        sub = verbs.add_parser(
            verb.name,
            help=verb.help,
            description=verb.help,
            epilog=f"example:\n  {verb.example}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        for option in verb.args:
            sub.add_argument(*option.flags, **option.options)
        _add_common(sub)
        sub.set_defaults(admin_verb=verb)

    def run(args: argparse.Namespace) -> int:
        verb: Verb | None = getattr(args, "admin_verb", None)
        if verb is None:
            parser.print_help(sys.stderr)
            return 2
        return run_verb(verb, args)

    return run


def _add_common(parser: argparse.ArgumentParser) -> None:
    default = os.environ.get("NAMESRV_ADDR") or DEFAULT_NAMESRV
    common = parser.add_argument_group("common flags")
    add_namesrv_argument(
        common, dest="namesrv_addr", default=default, metavar="HOST:PORT[;HOST:PORT]",
        help=f"registry address(es) (default: $NAMESRV_ADDR or {DEFAULT_NAMESRV}; now {default})",
    )  # fmt: skip
    common.add_argument("--json", action="store_true", help="print a JSON document for scripts")
    common.add_argument(
        "--timeout", type=positive_seconds, default=10.0, help="seconds per request (default: 10)"
    )
    common.add_argument("--debug", action="store_true", help="show tracebacks and client logs")
    acl = parser.add_argument_group("ACL (a cluster with aclEnable=true; see docs/security.md)")
    acl.add_argument("--accessKey", dest="access_key", help="account of plain_acl.yml to sign with")
    acl.add_argument("--secretKey", dest="secret_key", help="that account's secret key")
    tls = parser.add_argument_group("TLS (listeners with tlsServerMode; see docs/security.md)")
    tls.add_argument("--tls", action="store_true", help="dial host:port addresses with TLS")
    tls.add_argument(
        "--tlsCaFile",
        dest="tls_ca_file",
        metavar="FILE",
        help="CAs (PEM) to verify with; implies --tls",
    )
    tls.add_argument(
        "--tlsCertFile",
        dest="tls_cert_file",
        metavar="FILE",
        default="",
        help="client certificate (PEM) for listeners with tlsServerNeedClientAuth; implies --tls",
    )
    tls.add_argument(
        "--tlsKeyFile",
        dest="tls_key_file",
        metavar="FILE",
        default="",
        help="the client certificate's private key (PEM), unless --tlsCertFile holds it",
    )
