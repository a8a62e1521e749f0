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

from proxy.config import ConfigError, ProxyConfig, load_config
from proxy.server import ProxyServer, serve

__all__ = ["ConfigError", "ProxyConfig", "ProxyServer", "load_config", "serve"]
