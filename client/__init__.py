"""BoltMQ's Python client: a pure-Python RocketMQ 4.x client on anyio (trio or asyncio).

Layers, bottom up:

- `Message`, `SendResult`, `MQClientError` (message.py): what producers send and get back.
- `ConnectionOptions` (options.py): TLS and the ACL account, one record every class takes.
- `ClientInstance` (instance.py): the shared core: registries (round robin, failover), topic
  routes refreshed every 30 s and after errors, broker addresses, heartbeats every 30 s.
- `Producer` (producer.py): sync, async, oneway, batch and ordered sends, retries on another
  broker, latency-based fault avoidance (fault.py).
- `TransactionProducer` (transaction.py): half message, local transaction, END_TRANSACTION,
  answers to the broker's CHECK_TRANSACTION_STATE.
- `PullConsumer` (pull_consumer.py): lite-pull style assign/subscribe, poll, seek, commit.
- `Subscription` (subscription.py): what both consumers' ``subscribe`` return: applied at
  once, and awaitable (the pull consumer's await takes the topic's queues).
- `MessageSelector` (selector.py): what both consumers may subscribe with besides a tag
  expression: ``MessageSelector.by_sql("a > 5")`` (filtered by the broker) or ``by_tag``.
- `PushConsumer` (push_consumer.py): RocketMQ's push consumer: settings, life and services
  over its parts: rebalance (rebalance.py), the listener run concurrently or orderly with
  retries (consume_service.py), long-polling pulls (pull_service.py) into each queue's
  `ProcessQueue` (process_queue.py); offsets on the broker or in a local file (offset_store.py).
- `PopClient` (pop.py) and `SimpleConsumer` (simple_consumer.py): RocketMQ 5's pop
  consumption: receive messages invisible for a while, ack each by its receipt handle.
- `Admin` (admin/, a module per family of calls): topics, groups, routes, stats and lag,
  message lookups, offset resets.
- `BlockingProducer` / `BlockingPullConsumer` / `BlockingPushConsumer` (blocking.py): the same
  from plain threads.

Each of the async classes opens its own `ClientInstance` unless given one to share.
"""

from client.admin import Admin, GroupConsumeStats
from client.blocking import BlockingProducer, BlockingPullConsumer, BlockingPushConsumer
from client.instance import ClientInstance
from client.message import Message, MQClientError, SendResult, SendStatus
from client.options import ConnectionOptions
from client.pop import (
    MessageQueueAssignment,
    PopClient,
    PoppedMessage,
    PopResult,
    PopStatus,
    ReceiptHandle,
)
from client.producer import (
    MessageQueueSelector,
    Producer,
    ProducerStatistics,
    SendHandle,
    select_by_hash,
)
from client.pull_consumer import PullConsumer, parse_tags
from client.push_consumer import (
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    PushConsumer,
)
from client.request_reply import RequestHandle, RequestTimeout, create_reply_message
from client.selector import MessageSelector
from client.simple_consumer import SimpleConsumer
from client.subscription import Subscription
from client.transaction import (
    LocalTransactionState,
    TransactionProducer,
    TransactionSendResult,
)

__all__ = [
    "Admin",
    "BlockingProducer",
    "BlockingPullConsumer",
    "BlockingPushConsumer",
    "ClientInstance",
    "ConsumeConcurrentlyStatus",
    "ConsumeOrderlyStatus",
    "ConnectionOptions",
    "GroupConsumeStats",
    "LocalTransactionState",
    "MQClientError",
    "Message",
    "MessageQueueAssignment",
    "MessageQueueSelector",
    "MessageSelector",
    "PopClient",
    "PopResult",
    "PopStatus",
    "PoppedMessage",
    "Producer",
    "ProducerStatistics",
    "PullConsumer",
    "PushConsumer",
    "ReceiptHandle",
    "RequestHandle",
    "RequestTimeout",
    "SendHandle",
    "SendResult",
    "SendStatus",
    "SimpleConsumer",
    "Subscription",
    "TransactionProducer",
    "TransactionSendResult",
    "create_reply_message",
    "parse_tags",
    "select_by_hash",
]
