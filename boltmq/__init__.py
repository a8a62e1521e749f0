"""BoltMQ's public API: a RocketMQ-compatible registry and broker you can run in-process.

    import boltmq

    async with boltmq.embedded() as cluster:   # registry + broker on ephemeral loopback ports
        print(cluster.registry_address)         # give it to any RocketMQ client as namesrv

`open_registry` and `open_broker` run one server each; `RegistryConfig` and `BrokerConfig`
take RocketMQ's setting names in snake case. The client (trio or asyncio, see docs/client.md):

    async with boltmq.Producer("my-group", namesrv_addr=cluster.registry_address) as producer:
        result = await producer.send(boltmq.Message("Orders", b"hello", tags="created"))
"""

from actors.broker.broker import Broker, open_broker
from actors.broker.config import BrokerConfig
from actors.registry import Registry, RegistryConfig, open_registry
from boltmq.launcher import (
    EmbeddedCluster,
    LaunchRefused,
    RestartRules,
    RunningCluster,
    embedded,
    launch,
)
from boltmq.spec import ClusterSpec, SpecError, load_spec, parse_spec
from client import (
    Admin,
    BlockingProducer,
    BlockingPullConsumer,
    BlockingPushConsumer,
    ClientInstance,
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    GroupConsumeStats,
    LocalTransactionState,
    Message,
    MessageQueueSelector,
    MessageSelector,
    MQClientError,
    PopClient,
    PoppedMessage,
    PopResult,
    PopStatus,
    Producer,
    ProducerStatistics,
    PullConsumer,
    PushConsumer,
    RequestTimeout,
    SendHandle,
    SendResult,
    SendStatus,
    SimpleConsumer,
    TransactionProducer,
    TransactionSendResult,
    create_reply_message,
    parse_tags,
    select_by_hash,
)
from client.fault import MQFaultStrategy
from protocol.bodies import ConsumeFromWhere, MessageModel, MessageQueue
from protocol.message import MessageExt
from storage import BrokerRole, FlushDiskType

__all__ = [
    "Admin",
    "BlockingProducer",
    "BlockingPullConsumer",
    "BlockingPushConsumer",
    "Broker",
    "BrokerConfig",
    "BrokerRole",
    "ClientInstance",
    "ClusterSpec",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyStatus",
    "EmbeddedCluster",
    "FlushDiskType",
    "GroupConsumeStats",
    "LaunchRefused",
    "LocalTransactionState",
    "MQClientError",
    "MQFaultStrategy",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
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
    "RequestTimeout",
    "Registry",
    "RegistryConfig",
    "RestartRules",
    "RunningCluster",
    "SendHandle",
    "SendResult",
    "SendStatus",
    "SimpleConsumer",
    "SpecError",
    "TransactionProducer",
    "TransactionSendResult",
    "create_reply_message",
    "embedded",
    "launch",
    "load_spec",
    "open_broker",
    "open_registry",
    "parse_spec",
    "parse_tags",
    "select_by_hash",
]
