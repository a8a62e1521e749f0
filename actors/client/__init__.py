"""BoltMQ's Python client: a pure-Python RocketMQ 4.x client on anyio (trio or asyncio).

Layers, bottom up:

- `ClientInstance` (instance.py): the shared core: registries (round robin, failover), topic
  routes refreshed every 30 s and after errors, broker addresses, heartbeats every 30 s.
- `Producer` (producer.py): sync, oneway, batch and ordered sends, retries on another broker.
- `PullConsumer` (pull_consumer.py): lite-pull style assign/subscribe, poll, seek, commit.
- `Admin` (admin.py): topics, groups, routes, stats and lag, message lookups, offset resets.
- `BlockingProducer` / `BlockingPullConsumer` (blocking.py): the same from plain threads.

Each of the async classes opens its own `ClientInstance` unless given one to share.
"""

from actors.client.admin import Admin, GroupConsumeStats
from actors.client.blocking import BlockingProducer, BlockingPullConsumer
from actors.client.instance import ClientInstance
from actors.client.message import Message, MQClientError, SendResult, SendStatus
from actors.client.producer import MessageQueueSelector, Producer, select_by_hash
from actors.client.pull_consumer import PullConsumer, parse_tags

__all__ = [
    "Admin",
    "BlockingProducer",
    "BlockingPullConsumer",
    "ClientInstance",
    "GroupConsumeStats",
    "MQClientError",
    "Message",
    "MessageQueueSelector",
    "Producer",
    "PullConsumer",
    "SendResult",
    "SendStatus",
    "parse_tags",
    "select_by_hash",
]
