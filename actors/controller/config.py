"""The controller's configuration, under RocketMQ 5's ControllerConfig key names.

One controller (no ``controllerDLegerPeers``) keeps its state in memory and needs no Raft.
Several controllers name each other in ``controllerDLegerPeers`` as ``id-host:port`` joined by
``;``: those are the Raft ports (`actors.controller.raft`), not the remoting ``listenPort``
brokers and operators dial; ``controllerDLegerSelfId`` says which entry is this controller.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import attrs

from protocol.tls import one_of
from supervisors.config import ConfigError, build_config, config_properties, property_key
from supervisors.metrics_http import MetricsExporterType

__all__ = ["KEYS", "RUNTIME_KEYS", "ConfigError", "ControllerConfig", "RaftPeer", "parse_peers"]

DEFAULT_STORE = Path("~/boltmq/controller")


def _between(low: int, high: int) -> Callable[[object, attrs.Attribute[int], int], None]:
    """A validator refusing an int outside [low, high] in one line naming the RocketMQ key."""

    def check(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
        if not low <= value <= high:
            raise ConfigError(f"{property_key(attribute)} is {value}; use {low}..{high}")

    return check


_port = _between(0, 65535)
_positive = _between(1, 2**31 - 1)


@attrs.frozen
class RaftPeer:
    """One entry of controllerDLegerPeers: a controller's id and its Raft ``host:port``."""

    peer_id: str
    address: str


def parse_peers(text: str, key: str = "controllerDLegerPeers") -> list[RaftPeer]:
    """``n0-127.0.0.1:9880;n1-127.0.0.1:9881`` as peers; raises `ConfigError` naming ``key``."""
    peers: list[RaftPeer] = []
    for raw in text.split(";"):
        item = raw.strip()
        if not item:
            continue
        peer_id, sep, address = item.partition("-")
        host, colon, port = address.rpartition(":")
        if not sep or not peer_id or not colon or not host or not port.isdigit():
            raise ConfigError(
                f"{key}: {item!r} is not id-host:port (e.g. n0-127.0.0.1:9880;n1-127.0.0.1:9881)"
            )
        if not 0 < int(port) < 65536:
            raise ConfigError(f"{key}: {item!r} has port {port}, outside 1-65535")
        if any(p.peer_id == peer_id for p in peers):
            raise ConfigError(f"{key}: the id {peer_id!r} is named twice")
        peers.append(RaftPeer(peer_id, address))
    return peers


def _check_peers(instance: ControllerConfig, _attribute: object, value: str) -> None:
    peers = parse_peers(value)
    if peers and instance.controller_dleger_self_id not in {p.peer_id for p in peers}:
        raise ConfigError(
            f"controllerDLegerSelfId is {instance.controller_dleger_self_id!r}, not one of the "
            f"ids in controllerDLegerPeers ({', '.join(p.peer_id for p in peers)})"
        )


@attrs.define(on_setattr=attrs.setters.validate)
class ControllerConfig:
    """Controller settings; each attribute has RocketMQ's key (see `KEYS`). Times in ms."""

    listen_port: int = attrs.field(default=9878, validator=_port)
    bind_address: str = "127.0.0.1"
    controller_dleger_group: str = attrs.field(
        default="DefaultControllerGroup", metadata={"key": "controllerDLegerGroup"}
    )
    controller_dleger_self_id: str = attrs.field(
        default="n0", metadata={"key": "controllerDLegerSelfId"}
    )
    # Empty: one controller, no Raft. Validated after controllerDLegerSelfId (field order).
    controller_dleger_peers: str = attrs.field(
        default="", validator=_check_peers, metadata={"key": "controllerDLegerPeers"}
    )
    # One controller: its state file; several: pysyncobj's journal and dump. Either way a
    # restarted controller keeps the state it had. Empty: memory only (one controller).
    controller_store_path: str = str(DEFAULT_STORE)
    # Raft implementation name RocketMQ accepts; both run on pysyncobj here.
    controller_type: str = attrs.field(
        default="DLedger", validator=one_of("controllerType", ("DLedger", "jRaft"))
    )
    scan_not_active_broker_interval: int = attrs.field(default=5000, validator=_positive)
    enable_elect_unclean_master: bool = False
    notify_broker_role_changed: bool = True
    # How long a write waits for the Raft log to commit it before answering an error.
    controller_commit_timeout: int = attrs.field(default=5000, validator=_positive)
    metrics_exporter_type: MetricsExporterType = MetricsExporterType.DISABLE
    metrics_prom_exporter_port: int = attrs.field(default=5559, validator=_port)
    metrics_prom_exporter_host: str = ""

    @property
    def peers(self) -> list[RaftPeer]:
        """The Raft peers (empty for a single controller)."""
        return parse_peers(self.controller_dleger_peers)

    @property
    def self_peer(self) -> RaftPeer | None:
        """This controller's Raft peer entry (None for a single controller)."""
        for peer in self.peers:
            if peer.peer_id == self.controller_dleger_self_id:
                return peer
        return None

    def to_properties(self) -> dict[str, str]:
        """Every key with its value as text (GET_CONTROLLER_CONFIG's body)."""
        return config_properties(self)

    def update(self, properties: Mapping[str, str]) -> list[str]:
        """Apply keys a running controller may change (`RUNTIME_KEYS`); returns them.

        Raises `ConfigError` naming the key, and changes nothing, on an unknown key, a key
        that needs a restart or a bad value."""
        for key in properties:
            if key not in KEYS:
                raise ConfigError(f"unknown controller config key {key!r}")
            if key not in RUNTIME_KEYS:
                raise ConfigError(
                    f"{key} cannot be changed while the controller runs "
                    f"(changeable: {', '.join(sorted(RUNTIME_KEYS))})"
                )
        updated = build_config(
            ControllerConfig,
            self.to_properties(),
            source="current config",
            overrides=dict(properties),
            overrides_source="UPDATE_CONTROLLER_CONFIG",
        )
        for key in properties:
            setattr(self, KEYS[key], getattr(updated, KEYS[key]))
        return list(properties)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> ControllerConfig:
        """A config from RocketMQ-named keys; keys it does not know are left out silently
        (a namesrv.conf holds the registry's keys too). Raises `ConfigError` naming the key."""
        known = {k: v for k, v in properties.items() if k in KEYS}
        return build_config(cls, known)


#: RocketMQ key -> attribute.
KEYS = {property_key(field): field.name for field in attrs.fields(ControllerConfig)}

#: Keys UPDATE_CONTROLLER_CONFIG may change (each controller's own; not replicated).
RUNTIME_KEYS = frozenset(
    {
        "scanNotActiveBrokerInterval",
        "enableElectUncleanMaster",
        "notifyBrokerRoleChanged",
        "controllerCommitTimeout",
    }
)
