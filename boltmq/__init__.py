"""BoltMQ's public API: a RocketMQ-compatible registry and broker you can run in-process.

    import boltmq

    async with boltmq.embedded() as cluster:   # registry + broker on ephemeral loopback ports
        print(cluster.registry_address)         # give it to any RocketMQ client as namesrv

`open_registry` and `open_broker` run one server each; `RegistryConfig` and `BrokerConfig`
take RocketMQ's setting names in snake case.
"""

from actors.broker.config import BrokerConfig
from actors.broker.launcher import EmbeddedCluster, embedded
from actors.broker.service import Broker, open_broker
from actors.registry import Registry, RegistryConfig, open_registry
from storage import BrokerRole, FlushDiskType

__all__ = [
    "Broker",
    "BrokerConfig",
    "BrokerRole",
    "EmbeddedCluster",
    "FlushDiskType",
    "Registry",
    "RegistryConfig",
    "embedded",
    "open_broker",
    "open_registry",
]
