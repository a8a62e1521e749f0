"""``boltmq broker``, ``boltmq cluster`` and `embedded` (a registry + broker in-process).

    boltmq broker -c broker.conf -n 127.0.0.1:9876 --listenPort 10911
    boltmq cluster                      # registry :9876 + broker :10911, data under ~/boltmq

Both stop cleanly on Ctrl-C / SIGTERM: the broker unregisters, stops serving, writes its
tables and flushes its store.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio

from actors.broker.config import BrokerConfig, ConfigError, load_broker_config
from actors.broker.service import Broker
from actors.registry import Registry, RegistryConfig
from actors.registry.kv_config import KVConfigError
from supervisors.cli import configure_logging, run_until_signalled
from supervisors.config import property_key
from supervisors.supervisor import ChildSpec, Supervisor

log = logging.getLogger("boltmq.broker")

DEFAULT_HOME = Path("~/boltmq")
BROKER_KEYS = [property_key(field) for field in attrs.fields(BrokerConfig)]


def broker_main(argv: Sequence[str] | None = None) -> int:
    """Run a broker in the foreground until Ctrl-C / SIGTERM; the process exit status."""
    parser = argparse.ArgumentParser(
        prog="boltmq broker", description="Run a broker (stores and serves messages)."
    )
    _add_broker_arguments(parser)
    args = parser.parse_args(argv)
    config = _broker_config(parser, args)
    if config is None:
        return 2
    return run_until_signalled(_supervise, "broker", [_broker_child(Broker(config))])


def cluster_main(argv: Sequence[str] | None = None) -> int:
    """Run a registry and a broker in one process under one supervisor; the exit status."""
    parser = argparse.ArgumentParser(
        prog="boltmq cluster",
        description="Run a registry and a broker in one process, data under --home.",
    )
    parser.add_argument("--home", default=str(DEFAULT_HOME), help="data directory (~/boltmq)")
    parser.add_argument("--registryPort", type=int, default=9876, help="registry port (9876)")
    _add_broker_arguments(parser)
    args = parser.parse_args(argv)
    home = Path(args.home).expanduser()
    if args.storePathRootDir is None:
        args.storePathRootDir = str(home / "store")
    own_registry = args.namesrvAddr is None
    config = _broker_config(parser, args)
    if config is None:
        return 2
    registry = Registry(
        RegistryConfig(
            listen_port=args.registryPort,
            bind_address=config.bind_address,
            kv_config_path=str(home / "namesrv" / "kvConfig.json"),
        )
    )
    try:
        registry.load_blocking()
    except KVConfigError as exc:
        log.error("%s; not starting (the file is left as it is)", exc)
        return 1
    broker = Broker(config)
    if own_registry:
        # The registry child starts first; its bound port (maybe ephemeral) is known by then.
        broker.before_start = lambda: setattr(config, "namesrv_addr", registry.address)
    children = [ChildSpec.instance("registry", registry), _broker_child(broker)]
    return run_until_signalled(_supervise, "cluster", children)


@attrs.define
class EmbeddedCluster:
    """A registry and a broker running in this process (see `embedded`)."""

    registry: Registry
    broker: Broker
    home: Path

    @property
    def registry_address(self) -> str:
        """``host:port`` of the registry: give it to clients as the name server."""
        return self.registry.address

    @property
    def broker_address(self) -> str:
        """``host:port`` of the broker."""
        return self.broker.address


@asynccontextmanager
async def embedded(
    home: str | Path | None = None, **broker_settings: object
) -> AsyncIterator[EmbeddedCluster]:
    """A registry and a broker on ephemeral loopback ports for the duration of the block.

    Data goes under ``home`` (kept) or a temporary directory (removed at the end).
    ``broker_settings`` are `BrokerConfig` fields (``flush_disk_type=...``, ``broker_name=...``).
    """
    temporary = home is None
    root = Path(tempfile.mkdtemp(prefix="boltmq-")) if home is None else Path(home).expanduser()
    try:
        registry = Registry(
            RegistryConfig(
                listen_port=0,
                bind_address="127.0.0.1",
                kv_config_path=str(root / "namesrv" / "kvConfig.json"),
            )
        )
        await registry.load()
        async with trio.open_nursery() as nursery:
            await nursery.start(registry.run)
            settings: dict[str, object] = {
                "listen_port": 0,
                "bind_address": "127.0.0.1",
                "fast_port_enable": False,
                "store_path_root_dir": str(root / "store"),
                "namesrv_addr": registry.address,
            }
            settings.update(broker_settings)
            broker = Broker(BrokerConfig(**settings))  # type: ignore[arg-type]
            await nursery.start(broker.run)
            try:
                yield EmbeddedCluster(registry, broker, root)
            finally:
                assert broker.supervisor is not None
                with trio.CancelScope(shield=True):
                    await broker.supervisor.aclose()
                nursery.cancel_scope.cancel()
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)


# ----------------------------------------------------------------------------- internals


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
    if not logging.getLogger().handlers:
        configure_logging()  # run directly, not through `boltmq`
    overrides: dict[str, object] = {
        k: getattr(args, k) for k in BROKER_KEYS if getattr(args, k, None) is not None
    }
    try:
        return load_broker_config(args.config, overrides)
    except (ConfigError, OSError) as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return None


def _broker_child(broker: Broker) -> ChildSpec:
    async def stop() -> None:
        if broker.supervisor is not None:
            await broker.supervisor.aclose()

    return ChildSpec.function("broker", broker.run, aclose=stop, shutdown_timeout=15.0)


async def _supervise(name: str, children: list[ChildSpec]) -> None:
    supervisor = Supervisor(name, children)
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
