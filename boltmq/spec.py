"""A whole cluster in one TOML file: the spec `boltmq cluster -f` and `boltmq.launch` run.

    dataDir = "data"                  # node data under here (relative to the spec file)
    logDir = "logs"                   # one log file per node
    [defaults]                        # broker.conf keys every broker node shares
    flushDiskType = "ASYNC_FLUSH"
    [[registry]]
    listenPort = 9876
    [broker.broker-a]                 # a broker group: its brokerName
    [[broker.broker-a.node]]
    brokerId = 0
    brokerRole = "SYNC_MASTER"
    listenPort = 10911

Every key inside ``[defaults]``, ``[[registry]]`` and the nodes is RocketMQ's namesrv.conf or
broker.conf name; inside ``[[proxy]]`` (a gRPC front for RocketMQ 5 clients) its rmq-proxy.json
name, inside ``[[controller]]`` controller.conf's (and ``raftPort``). A broker group with
``controllerMode = true`` is in RocketMQ 5's controller mode: its nodes get no brokerId nor
master/slave role, the launcher sets enableControllerMode and controllerAddr (the spec's
controllers, else the registries with enableControllerInNamesrv), and the controller elects
the master. Several [[controller]] nodes agree through Raft: the launcher gives them their
controllerDLegerPeers (their ``raftPort``s) and SelfIds. Controllers start first, then the
registries, the brokers and the proxies. A spec is checked whole before anything starts
(`load_spec` raises `SpecError` naming the file, the key and why): unknown keys, bad values,
ports used twice, broker ids used twice in a group, a slave without a master, a group with two
masters, a controller-mode group without a controller.
`EXAMPLE_SPEC` is the commented example `boltmq cluster --example` prints.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from actors.broker.config import BrokerConfig
from actors.controller.config import KEYS as CONTROLLER_CONFIG_KEYS
from actors.controller.config import ControllerConfig
from actors.registry.config import KEYS as REGISTRY_KEYS
from actors.registry.config import RegistryConfig
from proxy.config import KEYS as PROXY_CONFIG_KEYS
from proxy.config import ConfigError as ProxyConfigError
from proxy.config import load_config as load_proxy_config
from storage import BrokerRole
from supervisors.config import ConfigError, build_config, property_key
from supervisors.metrics_http import MetricsExporterType

BROKER_KEYS = frozenset(property_key(field) for field in attrs.fields(BrokerConfig))
#: A [[proxy]] node's keys: rmq-proxy.json's that the proxy uses.
PROXY_KEYS = frozenset(PROXY_CONFIG_KEYS)
#: Keys of the spec itself, at its top level.
SPEC_KEYS = frozenset(
    {"dataDir", "logDir", "inProcess", "defaults", "registry", "broker", "proxy", "controller"}
)
#: A [[controller]] node's keys: controller.conf's, and its Raft port (several controllers).
CONTROLLER_KEYS = frozenset(CONTROLLER_CONFIG_KEYS) | {"raftPort"}
#: Keys the launcher sets on controllers (from the spec's list of them) and on controller-mode
#: brokers (from the spec's controllers).
CONTROLLER_SET_KEYS = frozenset({"controllerDLegerPeers", "controllerDLegerSelfId"})
BROKER_CONTROLLER_SET_KEYS = frozenset({"enableControllerMode", "controllerAddr"})
#: A broker group's own keys (``[broker.<name>]``).
GROUP_KEYS = frozenset({"node", "controllerMode"})
#: Keys of a node besides namesrv.conf / broker.conf's.
NODE_KEYS = frozenset({"inProcess"})
#: Keys the launcher sets on every node itself.
LAUNCHER_SET_KEYS = frozenset({"namesrvAddr", "brokerName"})
#: Per-node paths: a node may set its own (relative to the spec file), never [defaults].
NODE_PATH_KEYS = frozenset({"storePathRootDir", "kvConfigPath"})

_BROKER_NAME = re.compile(r"[A-Za-z0-9_-]{1,127}")

REGISTRY = "registry"
BROKER = "broker"
PROXY = "proxy"
CONTROLLER = "controller"
#: Where a launched cluster's listeners bind unless told otherwise (bindAddress).
LOOPBACK = "127.0.0.1"


class SpecError(ValueError):
    """A cluster spec that cannot run: names the file, the key and why."""


@attrs.frozen
class NodeSpec:
    """One registry or broker of the cluster, with every setting it starts with."""

    #: ``registry-1``, ``controller-1``, ``proxy-1``, ... ``<brokerName>-<brokerId>`` for
    #: brokers, ``<brokerName>-n<position>`` for controller-mode brokers (the controller
    #: assigns their ids).
    name: str
    kind: str  # REGISTRY, CONTROLLER, BROKER or PROXY
    #: Its settings under RocketMQ's key names (the node's namesrv.conf / broker.conf).
    properties: Mapping[str, str]
    #: The port it answers on once started (listenPort).
    port: int
    #: ``registry``, ``controller``, ``proxy``, or the broker's role (ASYNC_MASTER,
    #: SYNC_MASTER, SLAVE; ``controller mode`` when the controller decides it).
    role: str
    #: Start order: controllers -1, registries 0, masters 1, slaves and controller-mode
    #: brokers 2, proxies 3 (stopped in reverse).
    rank: int
    data_dir: Path
    log_file: Path
    in_process: bool = False
    #: Every port the node binds, with the key that sets it: ``(("listenPort", 10911), ...)``.
    listeners: tuple[tuple[str, int], ...] = ()
    #: The address its listeners bind (bindAddress).
    bind_address: str = "127.0.0.1"

    @property
    def broker_name(self) -> str:
        """The broker group's name ("" for a registry)."""
        return self.properties.get("brokerName", "")


@attrs.frozen
class ClusterSpec:
    """A checked cluster spec; `nodes` are in start order."""

    path: Path | None
    data_dir: Path
    log_dir: Path
    nodes: tuple[NodeSpec, ...]

    @property
    def namesrv_addr(self) -> str:
        """Every registry, ``;``-separated, as brokers and clients take it."""
        return ";".join(f"127.0.0.1:{node.port}" for node in self.registries)

    @property
    def registries(self) -> tuple[NodeSpec, ...]:
        """The registry nodes."""
        return tuple(node for node in self.nodes if node.kind == REGISTRY)

    @property
    def controllers(self) -> tuple[NodeSpec, ...]:
        """The standalone controller nodes ([[controller]])."""
        return tuple(node for node in self.nodes if node.kind == CONTROLLER)

    @property
    def controller_addr(self) -> str:
        """The controllers controller-mode brokers are given (controllerAddr): the
        [[controller]] nodes, else the registries that embed one; "" when there is none."""
        if self.controllers:
            return ";".join(f"127.0.0.1:{node.port}" for node in self.controllers)
        return ";".join(
            f"127.0.0.1:{node.port}"
            for node in self.registries
            if node.properties.get("enableControllerInNamesrv") == "true"
        )

    @property
    def proxies(self) -> tuple[NodeSpec, ...]:
        """The gRPC proxy nodes (RocketMQ 5 clients' endpoints)."""
        return tuple(node for node in self.nodes if node.kind == PROXY)

    @property
    def brokers(self) -> tuple[NodeSpec, ...]:
        """The broker nodes, masters before slaves."""
        return tuple(node for node in self.nodes if node.kind == BROKER)

    def node(self, name: str) -> NodeSpec:
        """The node called ``name``; KeyError naming the known ones otherwise."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node {name!r} in the spec (nodes: {', '.join(self.names())})")

    def names(self) -> list[str]:
        """Node names in start order."""
        return [node.name for node in self.nodes]


def load_spec(path: str | Path) -> ClusterSpec:
    """Read and check the spec file at ``path``; raises `SpecError`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the cluster spec: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: the cluster spec is not UTF-8 text: {exc}") from None
    return parse_spec(text, path=path)


def parse_spec(text: str, *, path: Path | None = None, base_dir: Path | None = None) -> ClusterSpec:
    """Check the spec ``text`` (from ``path``, whose directory relative paths start from,
    else ``base_dir``, else the current directory); raises `SpecError`."""
    where = str(path) if path is not None else "<spec>"
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{where}: not valid TOML: {exc}") from None
    return _Checker(where, document, _base(path, base_dir)).check()


# ----------------------------------------------------------------------------- internals


def _base(path: Path | None, base_dir: Path | None) -> Path:
    if path is not None:
        return path.resolve().parent
    return (base_dir or Path.cwd()).resolve()


class _Checker:
    def __init__(self, where: str, document: dict[str, Any], base: Path) -> None:
        self.where = where
        self.document = document
        self.base = base
        self.ports: dict[int, str] = {}
        self.stores: dict[Path, str] = {}
        #: The current node's (key, port) pairs, gathered by `_claim` for its NodeSpec.
        self.listeners: list[tuple[str, int]] = []

    def fail(self, key: str, why: str) -> SpecError:
        return SpecError(f"{self.where}: {key}: {why}")

    def check(self) -> ClusterSpec:
        doc = self.document
        _alias(doc)
        self._known(doc, SPEC_KEYS, "")
        data_dir = self._dir(doc.get("dataDir", "data"), "dataDir")
        log_dir = self._dir(doc.get("logDir", "logs"), "logDir")
        in_process = self._bool(doc.get("inProcess", False), "inProcess")
        defaults = self._table(doc.get("defaults", {}), "defaults")
        if "storePathRootDir" in defaults:
            raise self.fail(
                "defaults.storePathRootDir", "would give every broker one store; set it per node"
            )
        self._known(defaults, (BROKER_KEYS | {"enableControllerMode"}) - LAUNCHER_SET_KEYS,
                    "defaults.")  # fmt: skip
        # enableControllerMode in [defaults] makes every group a controller-mode one; the
        # launcher then sets it with controllerAddr on each node (checked there).
        self._valid(BrokerConfig, self._strings(defaults, {"enableControllerMode"}, "defaults."),
                    "defaults")  # fmt: skip
        registries = self._registries(doc.get("registry", []), data_dir, log_dir, in_process)
        if not registries:
            raise self.fail("registry", "the cluster needs at least one [[registry]]")
        namesrv = ";".join(f"127.0.0.1:{node.port}" for node in registries)
        controllers = self._controllers(doc.get("controller", []), data_dir, log_dir, in_process)
        controller_addr = ";".join(f"127.0.0.1:{node.port}" for node in controllers) or ";".join(
            f"127.0.0.1:{node.port}"
            for node in registries
            if node.properties.get("enableControllerInNamesrv") == "true"
        )
        brokers = self._brokers(
            self._table(doc.get("broker", {}), "broker"),
            defaults, namesrv, controller_addr, data_dir, log_dir, in_process,
        )  # fmt: skip
        proxies = self._proxies(doc.get("proxy", []), namesrv, data_dir, log_dir, in_process)
        nodes = sorted([*controllers, *registries, *brokers, *proxies], key=lambda node: node.rank)
        return ClusterSpec(None if self.where == "<spec>" else Path(self.where),
                           data_dir, log_dir, tuple(nodes))  # fmt: skip

    # -- registries ---------------------------------------------------------------------

    def _registries(
        self, entries: object, data_dir: Path, log_dir: Path, in_process: bool
    ) -> list[NodeSpec]:
        if not isinstance(entries, list):
            raise self.fail("registry", "must be an array of tables ([[registry]])")
        nodes = []
        for index, entry in enumerate(entries, 1):
            key = f"registry[{index}]"
            table = self._table(entry, key)
            _alias(table)
            # A registry that embeds a controller (enableControllerInNamesrv) reads the
            # controller's keys from its own namesrv.conf, as RocketMQ's NameServer does.
            allowed = REGISTRY_KEYS.keys() | NODE_KEYS | CONTROLLER_CONFIG_KEYS.keys()
            self._known(table, allowed - LAUNCHER_SET_KEYS, key + ".")
            name = f"registry-{index}"
            node_dir = data_dir / name
            properties = self._strings(table, NODE_KEYS, key + ".")
            embeds = properties.get("enableControllerInNamesrv", "false").lower() == "true"
            controller_only = sorted(
                k for k in properties if k in CONTROLLER_CONFIG_KEYS and k not in REGISTRY_KEYS
            )
            if controller_only and not embeds:
                raise self.fail(
                    f"{key}.{controller_only[0]}",
                    "is a controller key: set enableControllerInNamesrv = true to embed one",
                )
            if embeds:
                # Its state under dataDir, not the default under the home directory.
                properties["controllerStorePath"] = str(
                    self._path(properties.get("controllerStorePath"), node_dir / "controller")
                )
                self._valid(
                    ControllerConfig,
                    {k: v for k, v in properties.items() if k in CONTROLLER_CONFIG_KEYS},
                    key,
                )
            properties.setdefault("listenPort", str(9876 + 10 * (index - 1)))
            # A spec's cluster is reached on loopback (its namesrvAddr is 127.0.0.1): its
            # listeners stay there unless the spec opens them.
            properties.setdefault("bindAddress", LOOPBACK)
            properties["kvConfigPath"] = str(
                self._path(properties.get("kvConfigPath"), node_dir / "kvConfig.json")
            )
            registry_config = self._valid(
                RegistryConfig, {k: v for k, v in properties.items() if k in REGISTRY_KEYS}, key
            )
            port = int(properties["listenPort"])
            self._claim(port, key, "listenPort")
            self._claim_optional(properties.get("websocketListenPort"), key, "websocketListenPort")
            self._claim_metrics(registry_config, key)
            nodes.append(NodeSpec(
                name=name, kind=REGISTRY, properties=properties, port=port, role=REGISTRY,
                rank=0, data_dir=node_dir, log_file=log_dir / f"{name}.log",
                in_process=self._bool(table.get("inProcess", in_process), key + ".inProcess"),
                listeners=self._take_listeners(), bind_address=registry_config.bind_address,
            ))  # fmt: skip
        return nodes

    # -- controllers --------------------------------------------------------------------

    def _controllers(
        self, entries: object, data_dir: Path, log_dir: Path, in_process: bool
    ) -> list[NodeSpec]:
        """[[controller]] nodes; two or more agree through Raft: each gets the same
        controllerDLegerPeers (``n0-127.0.0.1:<raftPort>;...``) and its own SelfId."""
        if not isinstance(entries, list):
            raise self.fail("controller", "must be an array of tables ([[controller]])")
        tables = []
        for index, entry in enumerate(entries, 1):
            key = f"controller[{index}]"
            table = self._table(entry, key)
            _alias(table)
            for launcher_key in CONTROLLER_SET_KEYS:
                if launcher_key in table:
                    raise self.fail(
                        f"{key}.{launcher_key}",
                        "is set by the launcher from the list of [[controller]] nodes",
                    )
            self._known(table, (CONTROLLER_KEYS | NODE_KEYS) - LAUNCHER_SET_KEYS, key + ".")
            properties = self._strings(table, NODE_KEYS | {"raftPort"}, key + ".")
            properties.setdefault("listenPort", str(9878 + 10 * (index - 1)))
            properties.setdefault("bindAddress", LOOPBACK)
            raft_port = table.get("raftPort", int(properties["listenPort"]) + 1)
            if isinstance(raft_port, bool) or not isinstance(raft_port, int):
                raise self.fail(f"{key}.raftPort", f"must be a port number, not {raft_port!r}")
            tables.append((key, table, properties, raft_port))
        raft = len(tables) > 1
        peers = ";".join(
            f"n{index}-127.0.0.1:{raft_port}" for index, (*_, raft_port) in enumerate(tables)
        )
        nodes = []
        for index, (key, table, properties, raft_port) in enumerate(tables):
            name = f"controller-{index + 1}"
            node_dir = data_dir / name
            properties["controllerStorePath"] = str(
                self._path(properties.get("controllerStorePath"), node_dir / "store")
            )
            if raft:
                properties["controllerDLegerPeers"] = peers
                properties["controllerDLegerSelfId"] = f"n{index}"
            config = self._valid(ControllerConfig, properties, key)
            self._claim(config.listen_port, key, "listenPort")
            if raft:
                self._claim(raft_port, key, "raftPort")
            if config.metrics_exporter_type == MetricsExporterType.PROM:
                self._claim_optional(
                    str(config.metrics_prom_exporter_port), key, "metricsPromExporterPort"
                )
            nodes.append(NodeSpec(
                name=name, kind=CONTROLLER, properties=properties, port=config.listen_port,
                role=CONTROLLER, rank=-1, data_dir=node_dir, log_file=log_dir / f"{name}.log",
                in_process=self._bool(table.get("inProcess", in_process), key + ".inProcess"),
                listeners=self._take_listeners(), bind_address=config.bind_address,
            ))  # fmt: skip
        return nodes

    # -- proxies ------------------------------------------------------------------------

    def _proxies(
        self, entries: object, namesrv: str, data_dir: Path, log_dir: Path, in_process: bool
    ) -> list[NodeSpec]:
        if not isinstance(entries, list):
            raise self.fail("proxy", "must be an array of tables ([[proxy]])")
        nodes = []
        for index, entry in enumerate(entries, 1):
            key = f"proxy[{index}]"
            table = self._table(entry, key)
            _alias(table)
            self._known(table, (PROXY_KEYS | NODE_KEYS) - LAUNCHER_SET_KEYS, key + ".")
            name = f"proxy-{index}"
            properties = self._strings(table, NODE_KEYS, key + ".")
            properties.setdefault("grpcServerPort", str(8081 + 10 * (index - 1)))
            properties.setdefault("bindAddress", LOOPBACK)
            properties["namesrvAddr"] = namesrv
            try:
                config = load_proxy_config(None, keyed=properties)
            except ProxyConfigError as exc:
                raise SpecError(f"{self.where}: {key}: {exc}") from None
            self._claim(config.grpc_server_port, key, "grpcServerPort")
            self._claim_optional(properties.get("metricsPort"), key, "metricsPort")
            nodes.append(NodeSpec(
                name=name, kind=PROXY, properties=properties, port=config.grpc_server_port,
                role=PROXY, rank=3, data_dir=data_dir / name, log_file=log_dir / f"{name}.log",
                in_process=self._bool(table.get("inProcess", in_process), key + ".inProcess"),
                listeners=self._take_listeners(), bind_address=config.bind_address,
            ))  # fmt: skip
        return nodes

    # -- brokers ------------------------------------------------------------------------

    def _brokers(
        self, groups: dict[str, Any], defaults: dict[str, Any], namesrv: str,
        controller_addr: str, data_dir: Path, log_dir: Path, in_process: bool,
    ) -> list[NodeSpec]:  # fmt: skip
        nodes = []
        for broker_name, group in groups.items():
            prefix = f"broker.{broker_name}"
            if not _BROKER_NAME.fullmatch(broker_name):
                raise self.fail(
                    prefix, "a broker group's name (its brokerName) is letters, digits, - and _"
                )
            group_table = self._table(group, prefix)
            self._known(group_table, GROUP_KEYS, prefix + ".")
            entries = group_table.get("node", [])
            if not isinstance(entries, list) or not entries:
                raise self.fail(prefix + ".node", "a broker group needs at least one [[...node]]")
            controller_mode = self._controller_mode(group_table, defaults, entries, prefix)
            if controller_mode and not controller_addr:
                raise self.fail(
                    prefix + ".controllerMode",
                    "a controller-mode group needs a controller: add a [[controller]] node, or "
                    "enableControllerInNamesrv = true to a [[registry]]",
                )
            ids: dict[int, str] = {}
            masters = []
            group_nodes = []
            for index, entry in enumerate(entries, 1):
                key = f"{prefix}.node[{index}]"
                table = self._table(entry, key)
                _alias(table)
                allowed = BROKER_KEYS | NODE_KEYS | {"enableControllerMode"}
                self._known(table, allowed - LAUNCHER_SET_KEYS, key + ".")
                properties = {
                    **self._strings(defaults, set(), "defaults."),
                    **self._strings(table, NODE_KEYS, key + "."),
                }
                properties["brokerName"] = broker_name
                properties["namesrvAddr"] = namesrv
                properties.setdefault("bindAddress", LOOPBACK)
                if controller_mode:
                    if "totalReplicas" in BROKER_KEYS:
                        # The group's size, which only the spec knows: a broker refuses
                        # minInSyncReplicas above it at start.
                        properties.setdefault("totalReplicas", str(len(entries)))
                    group_nodes.append(
                        self._controller_mode_node(
                            key, table, properties, controller_addr, index, data_dir, log_dir,
                            in_process,
                        )
                    )  # fmt: skip
                    continue
                properties.pop("enableControllerMode", None)  # false: not controller mode
                config = self._valid(BrokerConfig, properties, key)
                if config.broker_role is BrokerRole.SLAVE:
                    if config.broker_id == 0:
                        raise self.fail(key + ".brokerId", "a SLAVE needs a brokerId above 0")
                elif config.broker_id != 0:
                    raise self.fail(
                        key + ".brokerId",
                        f"a master ({config.broker_role}) has brokerId 0 (RocketMQ's master "
                        f"id), not {config.broker_id}",
                    )
                else:
                    masters.append(key)
                if config.broker_id in ids:
                    taken = ids[config.broker_id]
                    raise self.fail(
                        key + ".brokerId",
                        f"a group has one master (brokerId 0), and {taken} is it already"
                        if config.broker_id == 0
                        else f"brokerId {config.broker_id} is {taken}'s already",
                    )
                ids[config.broker_id] = key
                name = f"{broker_name}-{config.broker_id}"
                node_dir = data_dir / name
                store = self._path(properties.get("storePathRootDir"), node_dir / "store")
                if store in self.stores:
                    raise self.fail(
                        key + ".storePathRootDir",
                        f"{store} is {self.stores[store]}'s already",
                    )
                self.stores[store] = key
                properties["storePathRootDir"] = str(store)
                properties.setdefault("listenPort", str(config.listen_port))
                self._claim(config.listen_port, key, "listenPort")
                if config.fast_port_enable:
                    self._claim(config.listen_port - 2, key, "listenPort - 2 (the fast port)")
                ha_port = config.ha_listen_port or config.listen_port + 1
                self._claim(ha_port, key, "haListenPort")
                self._claim_optional(
                    properties.get("websocketListenPort"), key, "websocketListenPort"
                )
                self._claim_metrics(config, key)
                group_nodes.append(NodeSpec(
                    name=name, kind=BROKER, properties=properties, port=config.listen_port,
                    role=str(config.broker_role),
                    rank=2 if config.broker_role is BrokerRole.SLAVE else 1,
                    data_dir=node_dir, log_file=log_dir / f"{name}.log",
                    in_process=self._bool(table.get("inProcess", in_process), key + ".inProcess"),
                    listeners=self._take_listeners(), bind_address=config.bind_address,
                ))  # fmt: skip
            if not masters and not controller_mode:
                raise self.fail(
                    prefix + ".node",
                    f"broker group {broker_name} has slaves but no master (brokerId 0)",
                )
            nodes.extend(group_nodes)
        return nodes

    def _controller_mode(
        self, group: dict[str, Any], defaults: dict[str, Any], entries: list[Any], prefix: str
    ) -> bool:
        """Whether a group runs in controller mode: ``controllerMode = true`` on the group, or
        ``enableControllerMode = true`` in [defaults] or on every node (not on some only)."""
        mode = self._bool(group.get("controllerMode", False), prefix + ".controllerMode")
        default = defaults.get("enableControllerMode", False)
        flags = []
        for index, entry in enumerate(entries, 1):
            key = f"{prefix}.node[{index}].enableControllerMode"
            value = entry.get("enableControllerMode", default) if isinstance(entry, dict) else False
            flags.append(self._bool(value, key))
        if any(flags) and not all(flags):
            raise self.fail(
                prefix + ".node",
                "some nodes set enableControllerMode and some do not: a group is in controller "
                "mode as a whole (controllerMode = true on the group)",
            )
        return mode or all(flags)

    def _controller_mode_node(
        self, key: str, table: dict[str, Any], properties: dict[str, str],
        controller_addr: str, index: int, data_dir: Path, log_dir: Path, in_process: bool,
    ) -> NodeSpec:  # fmt: skip
        """A broker whose role and id the controller decides: no brokerId in the spec; its
        brokerRole only says whether a master waits for replicas (SYNC) or not (ASYNC)."""
        if "brokerId" in table:
            raise self.fail(
                key + ".brokerId",
                "in controller mode the controller assigns broker ids (kept in the broker's "
                "brokerIdentity file): remove it",
            )
        if "controllerAddr" in properties:
            raise self.fail(
                key + ".controllerAddr", "is set by the launcher from the spec's controllers"
            )
        properties["enableControllerMode"] = "true"
        properties["controllerAddr"] = controller_addr
        config = self._valid(BrokerConfig, self._checked(properties), key)
        name = f"{properties['brokerName']}-n{index}"
        node_dir = data_dir / name
        store = self._path(properties.get("storePathRootDir"), node_dir / "store")
        if store in self.stores:
            raise self.fail(key + ".storePathRootDir", f"{store} is {self.stores[store]}'s already")
        self.stores[store] = key
        properties["storePathRootDir"] = str(store)
        properties.setdefault("listenPort", str(config.listen_port))
        self._claim(config.listen_port, key, "listenPort")
        if config.fast_port_enable:
            self._claim(config.listen_port - 2, key, "listenPort - 2 (the fast port)")
        self._claim(config.ha_listen_port or config.listen_port + 1, key, "haListenPort")
        self._claim_optional(properties.get("websocketListenPort"), key, "websocketListenPort")
        self._claim_metrics(config, key)
        return NodeSpec(
            name=name, kind=BROKER, properties=properties, port=config.listen_port,
            role="controller mode", rank=2, data_dir=node_dir, log_file=log_dir / f"{name}.log",
            in_process=self._bool(table.get("inProcess", in_process), key + ".inProcess"),
            listeners=self._take_listeners(), bind_address=config.bind_address,
        )  # fmt: skip

    # -- checks -------------------------------------------------------------------------

    def _checked(self, properties: dict[str, str]) -> dict[str, str]:
        """``properties`` without the controller-mode keys the launcher sets when the broker's
        config does not name them: a broker of a build without controller mode then refuses
        them at its own start, naming them."""
        return {
            k: v
            for k, v in properties.items()
            if k in BROKER_KEYS or k not in BROKER_CONTROLLER_SET_KEYS
        }

    def _known(self, table: Mapping[str, object], allowed: Iterable[str], prefix: str) -> None:
        allowed = set(allowed)
        for key in table:
            if key in LAUNCHER_SET_KEYS:
                raise self.fail(prefix + key, "is set by the launcher, not in the spec")
            if key not in allowed:
                hint = _near(key, allowed)
                raise self.fail(
                    prefix + key,
                    "unknown key" + (f" (did you mean {hint}?)" if hint else ""),
                )

    def _table(self, value: object, key: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(key, f"must be a table, not {type(value).__name__}")
        return value

    def _bool(self, value: object, key: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, not {value!r}")
        return value

    def _dir(self, value: object, key: str) -> Path:
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"must be a directory path, not {value!r}")
        path = Path(value).expanduser()
        return path if path.is_absolute() else self.base / path

    def _strings(
        self, table: Mapping[str, object], skip: Iterable[str], prefix: str = ""
    ) -> dict[str, str]:
        skip = set(skip)
        out = {}
        for key, value in table.items():
            if key in skip:
                continue
            if isinstance(value, bool):
                out[key] = "true" if value else "false"
            elif isinstance(value, str | int | float):
                out[key] = str(value)
            else:
                raise self.fail(prefix + key, f"must be a string, number or boolean, not {value!r}")
        return out

    def _valid(self, cls: type[Any], properties: dict[str, str], key: str) -> Any:
        source = f"{self.where}: {key}"
        try:
            return build_config(cls, properties, source=source)
        except ConfigError as exc:
            # The config class names a field by its Python name; the spec by RocketMQ's key.
            message = str(exc)
            for field in attrs.fields(cls):
                message = message.replace(f"'{field.name}'", property_key(field))
            prefixed = message if message.startswith(source) else f"{source}: {message}"
            raise SpecError(prefixed) from None

    def _path(self, value: str | None, default: Path) -> Path:
        if value is None:
            return default
        path = Path(value).expanduser()
        return path if path.is_absolute() else self.base / path

    def _claim(self, port: int, node_key: str, what: str) -> None:
        key = f"{node_key}.{what}"
        if port == 0:
            # Registries are named to brokers by address, and a node is up when it answers
            # on its port: both must be known before it starts.
            raise self.fail(key, "needs a fixed port (0 would pick one at random)")
        if port in self.ports:
            raise self.fail(key, f"port {port} is {self.ports[port]} already")
        self.ports[port] = key
        self.listeners.append((what, port))

    def _take_listeners(self) -> tuple[tuple[str, int], ...]:
        taken, self.listeners = tuple(self.listeners), []
        return taken

    def _claim_metrics(self, config: BrokerConfig | RegistryConfig, key: str) -> None:
        # metricsPromExporterPort has a default (5557 / 5558), so two nodes that turn metrics
        # on without a port of their own would collide: named here, before anything starts.
        if config.metrics_exporter_type == MetricsExporterType.PROM:
            self._claim_optional(
                str(config.metrics_prom_exporter_port), key, "metricsPromExporterPort"
            )

    def _claim_optional(self, value: str | None, node_key: str, what: str) -> None:
        if value is not None and value.isdigit() and int(value) != 0:  # 0: no listener
            self._claim(int(value), node_key, what)


def _alias(table: dict[str, Any]) -> None:
    """``in_process`` is taken for ``inProcess`` (the spelling of the rest of the file)."""
    if "in_process" in table:
        if "inProcess" in table:
            raise SpecError("in_process and inProcess are the same key: give it once")
        table["inProcess"] = table.pop("in_process")


def _near(key: str, allowed: set[str]) -> str | None:
    lowered = key.lower()
    for candidate in sorted(allowed):
        if candidate.lower() == lowered:
            return candidate
    close = difflib.get_close_matches(key, sorted(allowed), n=1)
    return close[0] if close else None


EXAMPLE_SPEC = """\
# A BoltMQ cluster: `boltmq cluster -f cluster.toml` starts it, Ctrl-C stops it.
# Every key below (except dataDir, logDir, inProcess, controllerMode and raftPort) is
# RocketMQ's namesrv.conf, broker.conf or controller.conf name. Relative paths start from
# this file's directory.

dataDir = "data"          # each node's data: data/registry-1, data/broker-a-0/store, ...
logDir = "logs"           # each node's log: logs/broker-a-0.log, ...
inProcess = false         # true: every node runs inside the launcher (tests, notebooks);
                          # a node may set it too (in_process is taken as well)

# broker.conf keys every broker node shares (a node's own keys win).
[defaults]
brokerClusterName = "DefaultCluster"
flushDiskType = "ASYNC_FLUSH"

# Registries (RocketMQ's NameServers); brokers register with all of them.
[[registry]]
listenPort = 9876
websocketListenPort = 9877

[[registry]]
listenPort = 9886

# Broker group "broker-a": a SYNC_MASTER and its slave. A group's name is its brokerName;
# brokerId 0 is the master, above 0 a slave.
[[broker.broker-a.node]]
brokerId = 0
brokerRole = "SYNC_MASTER"
flushDiskType = "SYNC_FLUSH"
# storePathRootDir = "/srv/boltmq/broker-a-0"   # a node's own store (default: under dataDir)
listenPort = 10911        # also takes listenPort - 2 (the fast port) unless fastPortEnable=false
haListenPort = 10912
websocketListenPort = 10913

[[broker.broker-a.node]]
brokerId = 1
brokerRole = "SLAVE"
listenPort = 10921
haListenPort = 10922

# Broker group "broker-b": one ASYNC_MASTER.
[[broker.broker-b.node]]
brokerId = 0
brokerRole = "ASYNC_MASTER"
listenPort = 10931
haListenPort = 10932

# Broker group "broker-c" in controller mode (RocketMQ 5's automatic failover): three brokers,
# no brokerId and no master/slave role here. The controllers below give each its id and elect
# the master; when the master dies they elect another. The launcher sets each node's
# enableControllerMode and controllerAddr. brokerRole only says whether a master waits for
# its replicas (SYNC_MASTER, SLAVE) or not (ASYNC_MASTER).
[broker.broker-c]
controllerMode = true

[[broker.broker-c.node]]
brokerRole = "SYNC_MASTER"
listenPort = 10941

[[broker.broker-c.node]]
brokerRole = "SYNC_MASTER"
listenPort = 10951

[[broker.broker-c.node]]
brokerRole = "SYNC_MASTER"
listenPort = 10961

# Three controllers (keys: controller.conf's), started before everything else. Two or more
# agree through Raft on their raftPort (default listenPort + 1): the launcher writes their
# controllerDLegerPeers and controllerDLegerSelfId; each keeps its Raft journal under dataDir.
# One controller needs no Raft; or, instead of [[controller]] nodes, a registry may embed one
# (enableControllerInNamesrv = true in a [[registry]]).
[[controller]]
listenPort = 9878
raftPort = 9879

[[controller]]
listenPort = 9888

[[controller]]
listenPort = 9898

# A gRPC proxy for RocketMQ 5 clients (keys: RocketMQ's rmq-proxy.json), started after the
# brokers; several may stand in front of one cluster.
[[proxy]]
grpcServerPort = 8081
"""
