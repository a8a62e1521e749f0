"""`boltmq monitor`: the live terminal view of a cluster, or one snapshot for scripts.

Read-only: it sends admin queries and changes nothing in the cluster.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable

from boltmq.cli._argtypes import add_namesrv_argument, positive_int, positive_seconds, ratio
from boltmq.cli._run import run_until_signalled
from client.instance import parse_namesrv_addr
from monitor.app import Settings, print_snapshot, run_screen, take_snapshot
from monitor.collector import DETAIL_BUDGET
from monitor.model import Thresholds

HELP = "live terminal view of a cluster: brokers, topics, groups and lag, clients, alerts"
EXAMPLE = """\
examples:
  boltmq monitor -n 127.0.0.1:9876              # the live view (? for keys, q quits)
  boltmq monitor -n ws://127.0.0.1:9877/        # over websocket
  boltmq monitor -n 127.0.0.1:9876 --once       # one snapshot as tables, then exit
  boltmq monitor --json --fail-on-alert         # JSON for scripts; exit 1 on any alert
  boltmq monitor --controller 127.0.0.1:9878    # controller mode: masters, epochs, SyncStateSets
"""

EXIT_ALERT = 1

log = logging.getLogger("boltmq.monitor")


def setup(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """Add `boltmq monitor`'s arguments; returns its runner."""
    add_namesrv_argument(
        parser,
        dest="namesrv",
        default=os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"),
        help="the registries, host:port or ws://host:port/ (default $NAMESRV_ADDR or %(default)s)",
    )
    parser.add_argument(
        "--interval",
        type=positive_seconds,
        default=1.0,
        metavar="S",
        help="seconds between refreshes (default %(default)s)",
    )
    parser.add_argument(
        "--accessKey", dest="access_key", help="account of plain_acl.yml to sign with (ACL on)"
    )
    parser.add_argument("--secretKey", dest="secret_key", help="that account's secret key")
    parser.add_argument(
        "--controller",
        dest="controller_addr",
        metavar="HOST:PORT[;HOST:PORT]",
        help="controller mode: the controller(s) to ask for each broker group's master, epoch "
        "and SyncStateSet (default: the controller leader a controller-mode broker reports)",
    )
    parser.add_argument("--once", action="store_true", help="print one snapshot as tables and exit")
    parser.add_argument("--json", action="store_true", help="print one snapshot as JSON and exit")
    parser.add_argument(
        "--fail-on-alert",
        action="store_true",
        help="with --once or --json: exit 1 when an alert is active",
    )
    parser.add_argument(
        "--system",
        action="store_true",
        help="show RocketMQ's internal topics and groups (RMQ_SYS_*, SCHEDULE_TOPIC_XXXX, ...)",
    )
    parser.add_argument(
        "--detail-budget",
        type=positive_int,
        default=DETAIL_BUDGET,
        metavar="N",
        help="per-topic and per-group requests per refresh; a bigger cluster is swept over "
        "several refreshes (default %(default)s)",
    )
    defaults = Thresholds()
    parser.add_argument(
        "--stall-refreshes",
        type=positive_int,
        default=defaults.stall_refreshes,
        metavar="N",
        help="a group with lag and no progress for N refreshes is stalled; lag rising for N "
        "refreshes is growing (default %(default)s)",
    )
    parser.add_argument(
        "--catch-up-alert",
        type=positive_seconds,
        default=defaults.catch_up_seconds,
        metavar="S",
        help="a group whose time to catch up exceeds S seconds is marked red (default %(default)s)",
    )
    parser.add_argument(
        "--slave-lag-bytes",
        type=positive_int,
        default=defaults.slave_lag_bytes,
        metavar="BYTES",
        help="a slave further behind than this is alerted (default %(default)s)",
    )
    parser.add_argument(
        "--disk-ratio",
        type=ratio,
        default=defaults.disk_ratio,
        metavar="R",
        help="alert when a broker's commit log disk is fuller than R (default %(default)s)",
    )
    return _run


def _run(args: argparse.Namespace) -> int:
    try:
        registries = parse_namesrv_addr(args.namesrv)
    except ValueError as exc:
        raise SystemExit(f"boltmq monitor: {exc}") from None
    if args.fail_on_alert and not (args.once or args.json):
        raise SystemExit("boltmq monitor: --fail-on-alert needs --once or --json")
    if (args.access_key is None) != (args.secret_key is None):
        raise SystemExit("boltmq monitor: --accessKey and --secretKey go together")
    settings = Settings(
        namesrv_addr=registries,
        access_key=args.access_key,
        secret_key=args.secret_key,
        interval=args.interval,
        system=args.system,
        detail_budget=args.detail_budget,
        controller_addr=args.controller_addr,
        thresholds=Thresholds(
            stall_refreshes=args.stall_refreshes,
            catch_up_seconds=args.catch_up_alert,
            slave_lag_bytes=args.slave_lag_bytes,
            disk_ratio=args.disk_ratio,
        ),
    )
    if args.once or args.json:
        if getattr(args, "log_level", None) is None:
            # A script reads stdout; stderr keeps only what went wrong (and the alerts).
            logging.getLogger().setLevel(logging.WARNING)
        return _once(settings, as_json=args.json, fail_on_alert=args.fail_on_alert)
    if not sys.stdin.isatty() or not sys.stdout.isatty():
        raise SystemExit("boltmq monitor: the live view needs a terminal; use --once or --json")
    # Log lines would tear the full-screen view: the views show every failure instead.
    logging.getLogger().setLevel(logging.CRITICAL)
    return run_until_signalled(run_screen, settings)


def _once(settings: Settings, *, as_json: bool, fail_on_alert: bool) -> int:
    snapshots = []

    async def take() -> None:
        snapshots.append(await take_snapshot(settings))

    code = run_until_signalled(take)
    if code != 0 or not snapshots:
        return code or 1
    snapshot = snapshots[0]
    print_snapshot(snapshot, as_json=as_json)
    if fail_on_alert and snapshot.alerts:
        for alert in snapshot.alerts:
            log.error("alert: %s %s: %s", alert.kind, alert.subject, alert.message)
        return EXIT_ALERT
    return 0
