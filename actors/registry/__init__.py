"""The registry (RocketMQ's NameServer): route tables, broker liveness and KV config.

Layers, bottom up: `route_table` and `kv_config` are plain state; `actor` is their only writer
(commands through a mailbox) and runs the liveness scanner; `handlers` serve the remoting
request codes (queries read the tables directly); `service` puts it all behind listeners:

    async with open_registry(RegistryConfig(listen_port=0, kv_config_path=None)) as registry:
        print(registry.address)
"""

from actors.registry.actor import RegistryActor, RegistryStatistics
from actors.registry.config import ConfigError, RegistryConfig
from actors.registry.kv_config import ORDER_TOPIC_CONFIG, KVConfig, KVConfigError
from actors.registry.route_table import RouteTable
from actors.registry.service import Registry, open_registry

__all__ = [
    "ORDER_TOPIC_CONFIG",
    "ConfigError",
    "KVConfig",
    "KVConfigError",
    "Registry",
    "RegistryActor",
    "RegistryConfig",
    "RegistryStatistics",
    "RouteTable",
    "open_registry",
]
