"""`ProxyConfig`: the proxy's settings, under the key names of RocketMQ's rmq-proxy.json.

Loaded from a JSON file (``boltmq proxy -pc rmq-proxy.json``, as RocketMQ's proxy takes it),
then overridden by command-line flags. Keys this proxy does not use (remotingListenPort, say)
are accepted and ignored, so a RocketMQ operator's file works unchanged; a value of the wrong
type is refused with the key named.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

__all__ = ["ConfigError", "ProxyConfig", "load_config"]

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
    #: Prometheus metrics listen port; 0: none (``metricsPort``).
    metrics_port: int = 0
    #: Check the signature of every call against the ACL accounts (``aclEnable``).
    acl_enable: bool = False
    #: The plain_acl.yml holding the accounts when aclEnable is on (``aclFile``).
    acl_file: str = ""
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
        if not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"metricsPort {self.metrics_port} is not a port (0-65535)")
        if self.max_message_size <= 0:
            raise ConfigError(f"maxMessageSize must be positive, not {self.max_message_size}")


# rmq-proxy.json key -> (field, type); requestTimeout is given in milliseconds there.
_KEYS: dict[str, tuple[str, type]] = {
    "namesrvAddr": ("namesrv_addr", str),
    "grpcServerPort": ("grpc_server_port", int),
    "proxyMode": ("proxy_mode", str),
    "bindAddress": ("bind_address", str),
    "advertisedAddress": ("advertised_address", str),
    "maxMessageSize": ("max_message_size", int),
    "requestTimeout": ("request_timeout", float),
    "metricsPort": ("metrics_port", int),
    "aclEnable": ("acl_enable", bool),
    "aclFile": ("acl_file", str),
    "accessKey": ("access_key", str),
    "secretKey": ("secret_key", str),
}


def load_config(path: str | Path | None = None, **overrides: Any) -> ProxyConfig:
    """The config from an rmq-proxy.json file (when given), then ``overrides`` (field names)."""
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
            if key not in _KEYS:
                continue  # a RocketMQ key this proxy has no use for
            field, kind = _KEYS[key]
            values[field] = _convert(path, key, value, kind)
        if "request_timeout" in values:
            values["request_timeout"] = values["request_timeout"] / 1000.0
    values.update({k: v for k, v in overrides.items() if v is not None})
    return ProxyConfig(**values)


def _convert(path: str | Path, key: str, value: Any, kind: type) -> Any:
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
    raise ConfigError(f"proxy config {path}: {key} must be a {kind.__name__}, not {value!r}")
