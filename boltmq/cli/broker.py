"""``boltmq broker`` (one broker) and ``boltmq cluster`` (a registry and a broker in one process).

Both stop cleanly on Ctrl-C / SIGTERM: the broker unregisters, stops serving, writes its
tables and flushes its store.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

import attrs
import trio
from rich.console import Console
from rich.table import Table

from actors.broker.broker import Broker
from actors.broker.config import BrokerConfig, ConfigError, load_broker_config
from actors.registry import Registry, RegistryConfig
from boltmq.cli._run import EXIT_USAGE, Runner, run_until_signalled, serve
from boltmq.cli.registry import load_registry, tls_problem
from boltmq.launcher import (
    DEFAULT_HOME,
    STATE_FILE,
    ClusterClaim,
    LaunchRefused,
    RunningCluster,
    broker_child,
    claim,
    kill_left_over,
    launch,
    read_state,
)
from boltmq.launcher.proxy import ProxyHandle, proxy_child
from boltmq.spec import EXAMPLE_SPEC, LOOPBACK, ClusterSpec, SpecError, load_spec
from proxy import ProxyConfig
from supervisors.config import load_properties, property_key
from supervisors.supervisor import ChildSpec

BROKER_KEYS = [property_key(field) for field in attrs.fields(BrokerConfig)]

BROKER_HELP = "run a broker: stores and serves messages, registers with the registries"
BROKER_EXAMPLE = """example:
  boltmq broker -c broker.conf -n 127.0.0.1:9876 --listenPort 10911"""
CLUSTER_HELP = (
    "run a whole cluster from a spec file (-f), or a registry and a broker in one process"
)
CLUSTER_EXAMPLE = """examples:
  boltmq cluster                      # registry :9876 + broker :10911, data under ~/boltmq
  boltmq cluster --home /srv/boltmq --registryPort 9876 --listenPort 10911
  boltmq cluster --registryPort 0 --listenPort 0 --grpcServerPort 0   # ephemeral ports
  boltmq cluster --example > cluster.toml
  boltmq cluster -f cluster.toml --follow
  boltmq cluster -f cluster.toml --status     # from another terminal"""


def setup_broker(parser: argparse.ArgumentParser) -> Runner:
    """Add the broker's flags (``-c FILE``, ``-n ADDR`` and one per broker.conf key)."""
    _add_broker_arguments(parser)

    def run(args: argparse.Namespace) -> int:
        config = _broker_config(parser, args)
        if config is None:
            return EXIT_USAGE
        config_file = Path(args.config) if args.config else None
        try:
            broker = Broker(config, config_file)
        except ConfigError as exc:  # a store's files naming another broker group, say
            print(f"{parser.prog}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        return serve("broker", [broker_child(broker)])

    return run


def setup_cluster(parser: argparse.ArgumentParser) -> Runner:
    """Add the cluster's flags: ``--home``, ``--registryPort`` and the broker's."""
    spec_options = parser.add_argument_group("a cluster from a spec file")
    spec_options.add_argument(
        "-f", "--file", metavar="SPEC", help="cluster spec (TOML): registries and broker groups"
    )
    spec_options.add_argument(
        "--follow", action="store_true", help="with -f: also show every node's log, prefixed"
    )
    spec_options.add_argument(
        "--status", action="store_true", help="with -f: print the running cluster's nodes"
    )
    spec_options.add_argument(
        "--example", action="store_true", help="print a commented example spec and exit"
    )
    parser.add_argument("--home", default=str(DEFAULT_HOME), help="data directory (~/boltmq)")
    parser.add_argument("--registryPort", type=int, default=9876, help="registry port (9876)")
    parser.add_argument(
        "--registryWebsocketPort", type=int, default=None, metavar="PORT",
        help="the registry's websocket port (9877 with the default ports, else off; 0 = off)",
    )  # fmt: skip
    parser.add_argument(
        "--grpcServerPort", type=int, default=None, metavar="PORT",
        help="the gRPC port for RocketMQ 5 clients (8081 with the default ports, else off; "
        "0 = an ephemeral port)",
    )  # fmt: skip
    parser.add_argument(
        "--no-grpc", dest="grpc", action="store_false", help="serve no gRPC (RocketMQ 5 clients)"
    )
    _add_broker_arguments(parser)

    def run(args: argparse.Namespace) -> int:
        if args.example:
            print(EXAMPLE_SPEC, end="")
            return 0
        if args.file is not None:
            return run_spec(parser, args)
        if args.follow or args.status:
            print(f"{parser.prog}: --follow and --status need a spec (-f SPEC)", file=sys.stderr)
            return EXIT_USAGE
        home = Path(args.home).expanduser()
        registry_ws, broker_ws = default_websocket_ports(args.registryPort, args.listenPort)
        if args.registryWebsocketPort is None:
            args.registryWebsocketPort = registry_ws
        if args.websocketListenPort is None and broker_ws:
            args.websocketListenPort = str(broker_ws)
        if args.storePathRootDir is None:
            args.storePathRootDir = str(home / "store")
        if args.bindAddress is None and not _sets(args.config, "bindAddress"):
            # The first command of a new user: reachable from this machine only, unless the
            # flag or the config file opens it (RocketMQ's own default is every address).
            args.bindAddress = LOOPBACK
        own_registry = args.namesrvAddr is None
        config = _broker_config(parser, args)
        if config is None:
            return EXIT_USAGE
        registry = Registry(
            RegistryConfig(
                listen_port=args.registryPort,
                websocket_listen_port=args.registryWebsocketPort,
                # One certificate for the process: the registry's wss:// listener uses it too.
                websocket_tls_cert_path=config.websocket_tls_cert_path,
                websocket_tls_key_path=config.websocket_tls_key_path,
                # and its TCP listener the same TLS mode as the broker's.
                tls_server_mode=config.tls_server_mode,
                tls_server_cert_path=config.tls_server_cert_path,
                tls_server_key_path=config.tls_server_key_path,
                tls_server_trust_cert_path=config.tls_server_trust_cert_path,
                tls_server_need_client_auth=config.tls_server_need_client_auth,
                bind_address=config.bind_address,
                kv_config_path=str(home / "namesrv" / "kvConfig.json"),
            )
        )
        if not load_registry(registry):
            return 1
        broker = Broker(config, Path(args.config) if args.config else None)
        if own_registry:
            # The registry child starts first; its bound port (maybe ephemeral) is known by then.
            broker.before_start = lambda: setattr(config, "namesrv_addr", registry.address)
        children = [ChildSpec.instance("registry", registry), broker_child(broker)]
        grpc_port = default_grpc_port(args.grpcServerPort, args.registryPort, args.listenPort)
        if args.grpc and grpc_port is not None:
            proxy = ProxyHandle(
                ProxyConfig(grpc_server_port=grpc_port, bind_address=config.bind_address),
                # Started after the broker: the broker's own registry list, as set by then.
                namesrv_addr=lambda: ";".join(config.namesrv_list),
            )
            children.append(proxy_child(proxy))
        return serve("cluster", children)

    return run


def _sets(config_file: str | None, key: str) -> bool:
    """Whether the broker.conf ``config_file`` sets ``key`` (an unreadable one is reported
    where it is loaded)."""
    if config_file is None:
        return False
    try:
        return key in load_properties(config_file)
    except (OSError, ValueError):
        return False


def default_websocket_ports(registry_port: int, listen_port: str | None) -> tuple[int, int]:
    """The embedded cluster's websocket ports (registry, broker) unless given: on with the
    default ports (9877 and 10913), so websocket clients work out of the box; off (0) when
    the TCP ports were chosen, which then choose their websocket ports too."""
    registry = 9877 if registry_port == 9876 else 0
    broker = 10913 if listen_port is None else 0
    return registry, broker


def default_grpc_port(given: int | None, registry_port: int, listen_port: str | None) -> int | None:
    """The embedded cluster's gRPC port unless given: 8081 (RocketMQ's proxy's) with the
    default ports, so the official 5.x clients work out of the box; off (None) when the TCP
    ports were chosen, as the websocket listeners are."""
    if given is not None:
        return given
    return 8081 if registry_port == 9876 and listen_port in (None, "10911") else None


def run_spec(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``boltmq cluster -f SPEC``: run the spec's cluster, or print its status."""
    try:
        spec = load_spec(args.file)
    except SpecError as exc:
        print(f"{parser.prog}: {exc}; nothing started", file=sys.stderr)
        return EXIT_USAGE
    if args.status:
        return print_status(spec)

    running: list[RunningCluster] = []

    async def run_cluster(claimed: ClusterClaim) -> None:
        async with launch(claimed, follow=args.follow) as cluster:
            running.append(cluster)
            await trio.sleep_forever()

    with contextlib.ExitStack() as held:
        try:
            claimed = held.enter_context(claim(spec))
        except LaunchRefused as exc:
            # Another launcher, or another program on a port: one line naming it, no trace.
            print(f"{parser.prog}: {exc}; nothing started", file=sys.stderr)
            return 1
        code = run_until_signalled(run_cluster, claimed)
        for cluster in running:
            # A second Ctrl-C cut the orderly stop short: no node outlives the launcher (nor
            # its hold on the data directory).
            killed = kill_left_over(cluster)
            if killed:
                print(f"{parser.prog}: killed nodes left running: {', '.join(killed)}",
                      file=sys.stderr)  # fmt: skip
    return code


def print_status(spec: ClusterSpec) -> int:
    """Print each node's role, address, pid, uptime and restarts from the state file."""
    try:
        state = read_state(spec)
    except FileNotFoundError:
        print(f"no cluster of {spec.path} has run (no {spec.data_dir / STATE_FILE})")
        return 1
    launcher_alive = _alive(state.get("pid"))
    table = Table(title=f"cluster {spec.path} (launcher pid {state.get('pid')}"
                  f"{'' if launcher_alive else ', not running'})")  # fmt: skip
    for column in ("node", "role", "address", "status", "pid", "uptime", "restarts"):
        table.add_column(column)
    now = time.time()
    for node in state.get("nodes", []):
        status = node["status"] if launcher_alive else f"{node['status']} (stale)"
        started = node.get("started_at")
        up = (
            _duration(now - started) if started and node["status"] == "running" else "-"
        )  # fmt: skip
        table.add_row(node["name"], node["role"], node["address"], status,
                      str(node.get("pid") or "-"), up, str(node.get("restarts", 0)))  # fmt: skip
    # Not a terminal (a script, a pipe): wide enough that addresses are not cut.
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    return 0


def _alive(pid: object) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


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
        config = load_broker_config(args.config, overrides)
    except (ConfigError, OSError) as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return None
    if (problem := tls_problem(config)) is not None:
        print(f"{parser.prog}: {problem}", file=sys.stderr)
        return None
    return config
