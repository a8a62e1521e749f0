"""The ``boltmq registry`` command (an entry of supervisors/cli.py).

    boltmq registry -c namesrv.conf --listenPort 9876 --websocketListenPort 9877

It stops cleanly on Ctrl-C or SIGTERM (exit status 0). ``boltmq cluster`` (registry and broker
in one process) is in actors/broker/launcher.py.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import trio

from actors.registry.config import KEYS, ConfigError, RegistryConfig
from actors.registry.kv_config import KVConfigError
from actors.registry.service import Registry
from supervisors.cli import configure_logging, run_until_signalled
from supervisors.config import load_config
from supervisors.supervisor import ChildSpec, Supervisor

log = logging.getLogger("boltmq.registry")


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
    """``python -m actors.registry.cli [options]``: the registry."""
    return registry_main(list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
