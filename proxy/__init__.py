"""The RocketMQ 5 gRPC front, `boltmq proxy`: MessagingService over the brokers' remoting codes.

Official RocketMQ 5.x clients (Java, Go, Python, Node...) speak gRPC service
``apache.rocketmq.v2.MessagingService``. The proxy serves it on asyncio (grpc.aio) and turns
each call into remoting calls to the registry and brokers through BoltMQ's own client, holding
no durable state, as RocketMQ's proxy does in cluster mode.

Layers, bottom up: ``_pb`` (protobuf modules generated at build time from ``protos/``),
``status`` (v2 Codes), ``config``, ``runtime`` (the parts every RPC shares), then one module
per family of RPCs (``route``, ``send``, ``telemetry``, ``consume``), ``acl``, ``metrics``,
``service`` (the MessagingService table) and ``server`` (`serve`).
"""

from typing import TYPE_CHECKING, Any

from proxy.config import ConfigError, ProxyConfig, load_config

if TYPE_CHECKING:
    from proxy.server import ProxyServer, serve

__all__ = ["ConfigError", "ProxyConfig", "ProxyServer", "load_config", "serve"]


def __getattr__(name: str) -> Any:
    # The server (grpc, the generated modules, the client core) loads on first use, so that a
    # broker or registry process that reads proxy settings (a cluster spec) does not pay for it.
    if name in ("ProxyServer", "serve"):
        from proxy import server

        return getattr(server, name)
    raise AttributeError(f"module 'proxy' has no attribute {name!r}")
