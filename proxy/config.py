"""`ProxyConfig`: the proxy's settings, under the key names of RocketMQ's rmq-proxy.json.

Loaded from a JSON file (``boltmq proxy -pc rmq-proxy.json``, as RocketMQ's proxy takes it),
then overridden by command-line flags. Keys this proxy does not use (remotingListenPort, say)
are accepted and ignored, so a RocketMQ operator's file works unchanged; a value of the wrong
type is refused with the key named.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

__all__ = ["KEYS", "ConfigError", "ProxyConfig", "load_config"]

# The registry port RocketMQ's proxy defaults to, and the gRPC port of its cluster mode.
DEFAULT_NAMESRV = "127.0.0.1:9876"
DEFAULT_GRPC_PORT = 8081


class ConfigError(ValueError):
    """A proxy config file or value that cannot be used; the message names the key."""


@attrs.frozen
class ProxyConfig:
    """The proxy's settings; field names are the rmq-proxy.json keys in snake case."""

    #: Registries, ``host:port`` separated by ``;`` (rmq-proxy.json ``namesrvAddr``).
    namesrv_addr: str = DEFAULT_NAMESRV
    #: The gRPC listen port; 0 binds an ephemeral port (``grpcServerPort``).
    grpc_server_port: int = DEFAULT_GRPC_PORT
    #: Only "cluster" (a stateless front of separate brokers) is served (``proxyMode``).
    proxy_mode: str = "cluster"
    #: The address the gRPC server binds; loopback unless the operator opens it (``bindAddress``).
    bind_address: str = "127.0.0.1"
    #: ``host:port`` given to clients as the brokers' endpoints in routes when their own access
    #: point is not in the request; empty: the bound address (``advertisedAddress``).
    advertised_address: str = ""
    #: The largest message body accepted, in bytes (``maxMessageSize``).
    max_message_size: int = 4 * 1024 * 1024
    #: How long a call waits for a broker or registry, in seconds (``requestTimeout``, ms in file).
    request_timeout: float = 3.0
    #: "PROM" serves Prometheus metrics, "DISABLE" does not (``metricsExporterType``).
    metrics_exporter_type: str = "DISABLE"
    #: The metrics listen port; 0 binds an ephemeral one (``metricsPromExporterPort``).
    metrics_prom_exporter_port: int = 5557
    #: The metrics listen address; empty: bindAddress (``metricsPromExporterHost``).
    metrics_prom_exporter_host: str = ""
    #: Check the signature and permissions of every call (``aclEnable``).
    acl_enable: bool = False
    #: The plain_acl.yml holding the accounts; empty: ``$ROCKETMQ_HOME/conf/plain_acl.yml``
    #: as a broker finds it (``plainAclFile``).
    plain_acl_file: str = ""
    #: The credentials the proxy signs its own remoting calls with when the brokers check ACL
    #: (``accessKey`` / ``secretKey``); empty: unsigned.
    access_key: str = ""
    secret_key: str = ""

    def __attrs_post_init__(self) -> None:
        if self.proxy_mode.lower() != "cluster":
            raise ConfigError(
                f"proxyMode {self.proxy_mode!r} is not supported: only 'cluster' (a stateless "
                "front of brokers run apart) is"
            )
        if not 0 <= self.grpc_server_port <= 65535:
            raise ConfigError(f"grpcServerPort {self.grpc_server_port} is not a port (0-65535)")
        if not 0 <= self.metrics_prom_exporter_port <= 65535:
            raise ConfigError(
                f"metricsPromExporterPort {self.metrics_prom_exporter_port} is not a port (0-65535)"
            )
        if self.metrics_exporter_type.upper() not in ("DISABLE", "PROM"):
            raise ConfigError(
                f"metricsExporterType {self.metrics_exporter_type!r} must be DISABLE or PROM"
            )
        if self.max_message_size <= 0:
            raise ConfigError(f"maxMessageSize must be positive, not {self.max_message_size}")


# rmq-proxy.json key -> (field, type); requestTimeout is given in milliseconds there.
KEYS: dict[str, tuple[str, type]] = {
    "namesrvAddr": ("namesrv_addr", str),
    "grpcServerPort": ("grpc_server_port", int),
    "proxyMode": ("proxy_mode", str),
    "bindAddress": ("bind_address", str),
    "advertisedAddress": ("advertised_address", str),
    "maxMessageSize": ("max_message_size", int),
    "requestTimeout": ("request_timeout", float),
    "metricsExporterType": ("metrics_exporter_type", str),
    "metricsPromExporterPort": ("metrics_prom_exporter_port", int),
    "metricsPromExporterHost": ("metrics_prom_exporter_host", str),
    "aclEnable": ("acl_enable", bool),
    "plainAclFile": ("plain_acl_file", str),
    "accessKey": ("access_key", str),
    "secretKey": ("secret_key", str),
}


def load_config(
    path: str | Path | None = None, keyed: Mapping[str, object] | None = None, **overrides: Any
) -> ProxyConfig:
    """The config from an rmq-proxy.json file (when given), then ``keyed`` (rmq-proxy.json
    keys, values as in the file or as command-line strings), then ``overrides`` (field names).
    """
    values: dict[str, Any] = {}
    if path is not None:
        try:
            raw = json.loads(Path(path).read_text())
        except OSError as exc:
            raise ConfigError(f"proxy config {path}: {exc.strerror or exc}") from exc
        except json.JSONDecodeError as exc:
            raise ConfigError(f"proxy config {path} is not JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise ConfigError(f"proxy config {path} must hold a JSON object")
        for key, value in raw.items():
            if key not in KEYS:
                continue  # a RocketMQ key this proxy has no use for
            field, kind = KEYS[key]
            values[field] = _convert(f"proxy config {path}", key, value, kind)
    for key, value in (keyed or {}).items():
        if key not in KEYS:
            raise ConfigError(f"{key} is not a proxy setting; the settings: {', '.join(KEYS)}")
        field, kind = KEYS[key]
        values[field] = _convert("the command line", key, value, kind)
    if "request_timeout" in values:
        values["request_timeout"] = values["request_timeout"] / 1000.0
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return ProxyConfig(**values)
    except TypeError as exc:  # a value of the wrong type given in code, not from the file
        raise ConfigError(str(exc)) from exc


def _convert(where: str, key: str, value: Any, kind: type) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
    elif kind in (int, float):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return kind(value)
        if isinstance(value, str):
            try:
                return kind(value)
            except ValueError:
                pass
    elif isinstance(value, str):
        return value
    raise ConfigError(f"{where}: {key} must be a {kind.__name__}, not {value!r}")
