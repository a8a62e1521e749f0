"""``boltmq controller``: one controller (RocketMQ 5's controller mode) in the foreground.

It prints a start line naming its address, its Raft peers and leader and its store, a line
when leadership changes, and one per election (which broker, epoch, offsets, what an ASYNC
master may have lost). It stops cleanly on Ctrl-C or SIGTERM (exit status 0).
"""

from __future__ import annotations

import argparse
import logging
import sys

import trio

from actors.controller import Controller, ControllerConfig
from actors.controller.config import KEYS, ConfigError
from boltmq.cli._run import EXIT_USAGE, Runner, serve
from supervisors.config import load_config
from supervisors.config_file import ConfigFileError
from supervisors.supervisor import ChildSpec

log = logging.getLogger("boltmq.controller")

HELP = "run a controller: elects a broker group's new master when its master dies"
EXAMPLE = """example:
  boltmq controller -c controller.conf --listenPort 9878

  controller.conf for one of three controllers (Raft ports 9880-9882):
    listenPort=9878
    controllerDLegerGroup=group1
    controllerDLegerPeers=n0-127.0.0.1:9880;n1-127.0.0.1:9881;n2-127.0.0.1:9882
    controllerDLegerSelfId=n0
    controllerStorePath=/var/boltmq/controller-n0
  brokers then set enableControllerMode=true and
    controllerAddr=127.0.0.1:9878;127.0.0.1:9888;127.0.0.1:9898"""


def setup(parser: argparse.ArgumentParser) -> Runner:
    """Add the controller's flags (``-c FILE`` and one ``--key VALUE`` per controller key)."""
    parser.add_argument("-c", "--config", help="properties file with RocketMQ's key names")
    for key in KEYS:
        parser.add_argument(f"--{key}", dest=key, metavar="VALUE", help=f"set {key}")

    def run(args: argparse.Namespace) -> int:
        overrides = {k: getattr(args, k) for k in KEYS if getattr(args, k) is not None}
        try:
            config = load_config(ControllerConfig, args.config, overrides)
            controller = Controller(config)
        except (ConfigError, OSError) as exc:
            print(f"{parser.prog}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        try:
            # Before serving: a state file that does not parse stops the start, untouched.
            trio.run(controller.journal.load)
        except ConfigFileError as exc:
            log.error("%s; not starting (the files are left as they are)", exc)
            return 1
        return serve("controller", [ChildSpec.instance("controller", controller)])

    return run
