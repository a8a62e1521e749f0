"""``boltmq broker`` (one broker) and ``boltmq cluster`` (a registry and a broker in one process).

Both stop cleanly on Ctrl-C / SIGTERM: the broker unregisters, stops serving, writes its
tables and flushes its store.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import attrs

from actors.broker.config import BrokerConfig, ConfigError, load_broker_config
from actors.broker.service import Broker
from actors.registry import Registry, RegistryConfig
from boltmq.cli._run import EXIT_USAGE, Runner, serve
from boltmq.cli.registry import load_registry
from boltmq.launcher import DEFAULT_HOME, broker_child
from supervisors.config import property_key
from supervisors.supervisor import ChildSpec

BROKER_KEYS = [property_key(field) for field in attrs.fields(BrokerConfig)]

BROKER_HELP = "run a broker: stores and serves messages, registers with the registries"
BROKER_EXAMPLE = """example:
  boltmq broker -c broker.conf -n 127.0.0.1:9876 --listenPort 10911"""
CLUSTER_HELP = "run a registry and a broker in one process (the embedded default)"
CLUSTER_EXAMPLE = """example:
  boltmq cluster                      # registry :9876 + broker :10911, data under ~/boltmq
  boltmq cluster --home /srv/boltmq --registryPort 9876 --listenPort 10911"""


def setup_broker(parser: argparse.ArgumentParser) -> Runner:
    """Add the broker's flags (``-c FILE``, ``-n ADDR`` and one per broker.conf key)."""
    _add_broker_arguments(parser)

    def run(args: argparse.Namespace) -> int:
        config = _broker_config(parser, args)
        if config is None:
            return EXIT_USAGE
        return serve("broker", [broker_child(Broker(config))])

    return run


def setup_cluster(parser: argparse.ArgumentParser) -> Runner:
    """Add the cluster's flags: ``--home``, ``--registryPort`` and the broker's."""
    parser.add_argument("--home", default=str(DEFAULT_HOME), help="data directory (~/boltmq)")
    parser.add_argument("--registryPort", type=int, default=9876, help="registry port (9876)")
    _add_broker_arguments(parser)

    def run(args: argparse.Namespace) -> int:
        home = Path(args.home).expanduser()
        if args.storePathRootDir is None:
            args.storePathRootDir = str(home / "store")
        own_registry = args.namesrvAddr is None
        config = _broker_config(parser, args)
        if config is None:
            return EXIT_USAGE
        registry = Registry(
            RegistryConfig(
                listen_port=args.registryPort,
                bind_address=config.bind_address,
                kv_config_path=str(home / "namesrv" / "kvConfig.json"),
            )
        )
        if not load_registry(registry):
            return 1
        broker = Broker(config)
        if own_registry:
            # The registry child starts first; its bound port (maybe ephemeral) is known by then.
            broker.before_start = lambda: setattr(config, "namesrv_addr", registry.address)
        return serve("cluster", [ChildSpec.instance("registry", registry), broker_child(broker)])

    return run


def _add_broker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", help="broker.conf: a properties file, RocketMQ names")
    parser.add_argument(
        "-n", "--namesrvAddr", dest="namesrvAddr", help="registries, ';'-separated host:port"
    )
    for key in BROKER_KEYS:
        if key != "namesrvAddr":
            parser.add_argument(f"--{key}", dest=key, metavar="VALUE", help=f"set {key}")


def _broker_config(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> BrokerConfig | None:
    overrides: dict[str, object] = {
        k: getattr(args, k) for k in BROKER_KEYS if getattr(args, k, None) is not None
    }
    try:
        return load_broker_config(args.config, overrides)
    except (ConfigError, OSError) as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return None
