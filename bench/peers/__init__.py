"""The systems bench/compare.py sets side by side: for each, a server the tool starts on
loopback in a scratch directory and stops by its process group, and an asyncio client adapter.

- boltmq.py: BoltMQ's embedded cluster, and the adapter over BoltMQ's client (also used for
  Apache RocketMQ's broker, rocketmq.py).
- nats.py, rabbitmq.py, redis.py: NATS JetStream, RabbitMQ, Redis Streams.
- procs.py: ports, process groups, waits; cpu.py: CPU from /proc; install.py: what is missing.
"""

from __future__ import annotations

import importlib

from bench.peers.base import Client

#: System -> "module:class" of its client adapter (imported only when used: the peers'
#: libraries are the optional ``bench`` extra).
CLIENTS = {
    "boltmq": "bench.peers.boltmq:RemotingClientAdapter",
    "rocketmq": "bench.peers.boltmq:RemotingClientAdapter",
    "nats": "bench.peers.nats:NatsClient",
    "rabbitmq": "bench.peers.rabbitmq:RabbitMQClient",
    "redis": "bench.peers.redis:RedisClient",
}
SYSTEMS = tuple(CLIENTS)


def client_class(system: str) -> type[Client]:
    """The client adapter class of ``system``."""
    module, _, name = CLIENTS[system].partition(":")
    cls: type[Client] = getattr(importlib.import_module(module), name)
    return cls


def client_for(system: str, endpoint: dict[str, str]) -> Client:
    """A client adapter of ``system`` for the server at ``endpoint``."""
    return client_class(system)(endpoint)
