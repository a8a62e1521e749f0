"""The ``boltmq registry`` and ``boltmq cluster`` commands (entries of supervisors/cli.py).

    boltmq registry -c namesrv.conf --listenPort 9876 --websocketListenPort 9877
    boltmq cluster                  # registry (and, later, a broker) with data under ~/boltmq

Both stop cleanly on Ctrl-C or SIGTERM (exit status 0).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import trio

from actors.registry.config import KEYS, ConfigError, RegistryConfig
from actors.registry.kv_config import KVConfigError
from actors.registry.service import Registry
from supervisors.cli import configure_logging, run_until_signalled
from supervisors.config import load_config, load_properties
from supervisors.supervisor import ChildSpec, Supervisor

log = logging.getLogger("boltmq.registry")

DEFAULT_CLUSTER_HOME = Path("~/boltmq")


def registry_main(argv: Sequence[str] | None = None) -> int:
    """Run a registry in the foreground until Ctrl-C / SIGTERM; the process exit status."""
    parser = _parser("boltmq registry", "Run a registry (RocketMQ NameServer).")
    args = parser.parse_args(argv)
    config = _config(parser, args)
    if config is None:
        return 2
    registry = _loaded(Registry(config))
    if registry is None:
        return 1
    return run_until_signalled(_serve, "registry", [ChildSpec.instance("registry", registry)])


def cluster_main(argv: Sequence[str] | None = None) -> int:
    """Run the embedded cluster (a registry for now) under one supervisor; the exit status."""
    parser = _parser("boltmq cluster", "Run a registry (and broker) in one process.")
    parser.add_argument(
        "--home",
        default=str(DEFAULT_CLUSTER_HOME),
        help="data directory (default ~/boltmq); the registry keeps namesrv/kvConfig.json",
    )
    args = parser.parse_args(argv)
    config = _config(parser, args)
    if config is None:
        return 2
    if args.kvConfigPath is None and not (
        args.config and "kvConfigPath" in load_properties(args.config)
    ):
        config.kv_config_path = str(Path(args.home).expanduser() / "namesrv" / "kvConfig.json")
    registry = _loaded(Registry(config))
    if registry is None:
        return 1
    return run_until_signalled(_serve, "cluster", cluster_children(registry))


def cluster_children(registry: Registry) -> list[ChildSpec]:
    """The cluster supervisor's children, in start order (the broker joins as one more)."""
    return [ChildSpec.instance("registry", registry)]


# ----------------------------------------------------------------------------- internals


def _parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("-c", "--config", help="properties file with RocketMQ's key names")
    for key in KEYS:
        parser.add_argument(f"--{key}", dest=key, metavar="VALUE", help=f"set {key}")
    return parser


def _config(parser: argparse.ArgumentParser, args: argparse.Namespace) -> RegistryConfig | None:
    if not logging.getLogger().handlers:
        configure_logging()  # run directly, not through `boltmq`
    overrides = {k: getattr(args, k) for k in KEYS if getattr(args, k) is not None}
    try:
        return load_config(RegistryConfig, args.config, overrides)
    except (ConfigError, OSError) as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return None


def _loaded(registry: Registry) -> Registry | None:
    try:
        registry.load_blocking()
    except KVConfigError as exc:
        log.error("%s; not starting (the file is left as it is)", exc)
        return None
    return registry


async def _serve(name: str, children: list[ChildSpec]) -> None:
    supervisor = Supervisor(name, children)
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m actors.registry.cli registry|cluster [options]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    commands = {"registry": registry_main, "cluster": cluster_main}
    if not args or args[0] not in commands:
        print("usage: python -m actors.registry.cli {registry,cluster} [options]", file=sys.stderr)
        return 2
    return commands[args[0]](args[1:])


if __name__ == "__main__":
    sys.exit(main())
