"""``boltmq registry``: one registry (RocketMQ's NameServer) in the foreground.

It stops cleanly on Ctrl-C or SIGTERM (exit status 0).
"""

from __future__ import annotations

import argparse
import logging
import sys

from actors.broker.config import BrokerConfig
from actors.controller import ControllerConfig
from actors.registry.config import KEYS, ConfigError, RegistryConfig
from actors.registry.kv_config import KVConfigError
from actors.registry.service import Registry, embedded_controller_store
from boltmq.cli._run import EXIT_USAGE, Runner, serve
from protocol.tls import TlsConfigError, tcp_server_ssl_context
from supervisors.config import load_config, load_properties
from supervisors.supervisor import ChildSpec

log = logging.getLogger("boltmq.registry")

HELP = "run a registry (RocketMQ's NameServer): the route table brokers register with"
EXAMPLE = """example:
  boltmq registry -c namesrv.conf --listenPort 9876 --websocketListenPort 9877"""


def setup(parser: argparse.ArgumentParser) -> Runner:
    """Add the registry's flags (``-c FILE`` and one ``--key VALUE`` per namesrv.conf key)."""
    parser.add_argument("-c", "--config", help="properties file with RocketMQ's key names")
    for key in KEYS:
        parser.add_argument(f"--{key}", dest=key, metavar="VALUE", help=f"set {key}")

    def run(args: argparse.Namespace) -> int:
        overrides = {k: getattr(args, k) for k in KEYS if getattr(args, k) is not None}
        try:
            config = load_config(RegistryConfig, args.config, overrides)
        except (ConfigError, OSError) as exc:
            print(f"{parser.prog}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if (problem := tls_problem(config)) is not None:
            print(f"{parser.prog}: {problem}", file=sys.stderr)
            return EXIT_USAGE
        controller_config = None
        if config.enable_controller_in_namesrv:
            # The embedded controller reads its keys (controllerDLegerPeers, ...) from the
            # same file, as RocketMQ's NameServer does.
            try:
                properties = load_properties(args.config) if args.config else {}
                properties.setdefault("controllerStorePath", embedded_controller_store(config))
                controller_config = ControllerConfig.from_properties(properties)
            except (ConfigError, OSError) as exc:
                print(f"{parser.prog}: {exc}", file=sys.stderr)
                return EXIT_USAGE
        registry = Registry(config, controller_config)
        if not load_registry(registry):
            return 1
        return serve("registry", [ChildSpec.instance("registry", registry)])

    return run


def tls_problem(config: RegistryConfig | BrokerConfig) -> str | None:
    """Why the TLS settings cannot work (a bad tlsServerMode file, say), or None: checked
    before starting so the start stops with one line naming the key."""
    try:
        tcp_server_ssl_context(
            config.tls_server_mode,
            config.tls_server_cert_path,
            config.tls_server_key_path,
            config.tls_server_trust_cert_path,
            config.tls_server_need_client_auth,
        )
    except TlsConfigError as exc:
        return str(exc)
    return None


def load_registry(registry: Registry) -> bool:
    """Read the registry's KV config file; False (logged) when it does not parse."""
    try:
        registry.load_blocking()
    except KVConfigError as exc:
        log.error("%s; not starting (the file is left as it is)", exc)
        return False
    return True
