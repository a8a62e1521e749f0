"""Running one verb: open the client, call the verb under a deadline, render, map failures.

Every failure a person can act on ends as one line on stderr and exit 1 (2 for flags that do
not fit together); ``--debug`` adds the traceback and the client's log lines.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import traceback

import trio

from boltmq.cli.admin._output import Result, render
from boltmq.cli.admin._verbs import AdminError, UsageError, Verb
from client import Admin
from protocol.bodies import BodyError
from protocol.codes import ResponseCode
from protocol.command import ConnectionClosedError, RemotingError, RemotingTimeoutError

EXIT_FAILED = 1
EXIT_USAGE = 2

#: A verb makes several requests; the whole of it gets this many request timeouts.
_VERB_DEADLINE_FACTOR = 6


def run_verb(verb: Verb, args: argparse.Namespace) -> int:
    """Run ``verb`` with the parsed ``args``; the process exit code."""
    if args.debug:
        logging.getLogger().setLevel(logging.DEBUG)
    elif getattr(args, "log_level", None) is None:
        # The client logs each failed connect; the one error line below says it for people.
        logging.getLogger().setLevel(logging.CRITICAL)
    try:
        result = trio.run(_call, verb, args)
    except UsageError as exc:
        print(f"boltmq admin {verb.name}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (AdminError, RemotingError, BodyError, trio.TooSlowError, OSError, ValueError) as exc:
        if args.debug:
            traceback.print_exc()
        print(f"boltmq admin {verb.name}: {describe(exc, args)}", file=sys.stderr)
        return EXIT_FAILED
    render(result, args.json)
    return 0


def round_deadline(args: argparse.Namespace) -> float:
    """Seconds one verb run (or one round of a verb repeating with -i) may take."""
    return float(args.timeout * _VERB_DEADLINE_FACTOR)


async def _call(verb: Verb, args: argparse.Namespace) -> Result:
    # A verb repeating every -i seconds runs until interrupted: it bounds each round itself.
    repeating = getattr(args, "interval", None) is not None
    with trio.fail_after(math.inf if repeating else round_deadline(args)):
        async with Admin(
            namesrv_addr=args.namesrv_addr,
            timeout=args.timeout,
            access_key=getattr(args, "access_key", None),
            secret_key=getattr(args, "secret_key", None),
            tls_ca_file=getattr(args, "tls_ca_file", None),
            tls=True if getattr(args, "tls", False) else None,
            tls_cert_file=getattr(args, "tls_cert_file", ""),
            tls_key_file=getattr(args, "tls_key_file", ""),
        ) as admin:
            return await verb.function(admin, args)


def describe(exc: BaseException, args: argparse.Namespace) -> str:
    """One line: what failed and what to check."""
    text = " ".join(str(exc).split())
    namesrv = args.namesrv_addr
    if isinstance(exc, AdminError):
        return text
    if isinstance(exc, trio.TooSlowError):
        limit = round_deadline(args)
        return f"no answer within {limit:g} s; check the cluster's load or raise --timeout"
    if isinstance(exc, RemotingError):
        remark = " ".join(exc.remark.split())
        if remark.startswith("no registry answered"):
            cert = getattr(args, "tls_cert_file", "")
            tls = getattr(args, "tls", False) or getattr(args, "tls_ca_file", None) or cert
            if "closed" in remark and tls and not cert:
                # A listener requiring a client certificate closes the connection after the
                # handshake.
                return (
                    f"{remark}; check that a registry runs at {namesrv} (-n or $NAMESRV_ADDR) "
                    "and, if it requires a client certificate (tlsServerNeedClientAuth), add "
                    "--tlsCertFile and --tlsKeyFile"
                )
            if "closed" in remark and not tls:
                # An enforcing TLS listener closes a plaintext connection at its first bytes.
                return (
                    f"{remark}; check that a registry runs at {namesrv} (-n or $NAMESRV_ADDR) "
                    "and, if it requires TLS (tlsServerMode=enforcing), add --tls or --tlsCaFile"
                )
            return f"{remark}; check that a registry runs at {namesrv} (-n or $NAMESRV_ADDR)"
        if isinstance(exc, ConnectionClosedError | RemotingTimeoutError):
            return (
                f"a broker did not answer ({remark}); check that it runs "
                "(clusterList shows the addresses the registry knows)"
            )
        if exc.code == ResponseCode.TOPIC_NOT_EXIST:
            return f"{remark}; check the topic name (topicList shows every topic)"
        if exc.code == ResponseCode.CONSUMER_NOT_ONLINE or "is not online" in remark:
            return f"{remark}; check the group name and that its clients run"
        if exc.code == ResponseCode.NO_PERMISSION:
            if "accessKey" in remark or "signature" in remark:
                return f"refused: {remark} (--accessKey/--secretKey)"
            return f"refused: {remark}"
        return f"{remark} ({_response_name(exc.code)})"
    if isinstance(exc, BodyError):
        return f"an answer did not decode ({text}); is the cluster RocketMQ-compatible?"
    return text


def _response_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return f"code {code}"
