"""JSON bodies of the remoting protocol and the broker's and registry's JSON config files.

Each body is an attrs class with ``from_json(data)`` and ``to_json()``. Decoding is lenient,
as fastjson is: keys in any order, unknown keys ignored, missing collections empty, numbers
given as strings coerced, enums given by NAME or by ordinal (the C++ client sends ordinals),
map keys quoted or bare, `MessageQueue` map keys as objects. Encoding is compact with keys
sorted, enums by name, None-valued optional fields omitted, and map keys in the form the
Java side writes (sheet 4.10):

- standard JSON (quoted keys) for route data, cluster info and everything else, except
- fastjson's own form for ``consumerOffset.json`` and ``delayOffset.json`` (bare int keys)
  and for the MessageQueue-keyed ConsumeStats, TopicStatsTable and ResetOffsetBody.

A bad body raises `BodyError` (a ValueError) naming the body class and the place.

By family: ``_codec`` (the base class, the converter, `MessageQueue`), ``_route`` (route data,
registry answers, perm bits), ``_broker`` (topic config, REGISTER_BROKER, the broker's JSON
files), ``_attributes`` (RocketMQ 5's topic attributes and their change strings), ``_client``
(heartbeat, locks, connections, a push consumer's answers), ``_controller`` (RocketMQ 5's
controller mode: SyncStateSet, elections, epoch caches) and ``_admin`` (stats, offset
resets, time spans). Import every name from this package.
"""

from protocol.bodies._admin import (
    BrokerStatsData,
    BrokerStatsItem,
    ConsumeStats,
    OffsetWrapper,
    PopConsumeStats,
    QueryConsumeTimeSpanBody,
    QueueTimeSpan,
    ResetOffsetBody,
    TopicOffset,
    TopicStatsTable,
)
from protocol.bodies._attributes import (
    MESSAGE_TYPE,
    MESSAGE_TYPES,
    TOPIC_ATTRIBUTES,
    TopicAttributeError,
    alter_attributes,
    format_attribute_changes,
    parse_attribute_changes,
)
from protocol.bodies._broker import (
    ConsumerOffsetSerializeWrapper,
    DataVersion,
    DelayOffsetSerializeWrapper,
    RegisterBrokerBody,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicFilterType,
)
from protocol.bodies._client import (
    CheckClientRequestBody,
    Connection,
    ConsumeFromWhere,
    ConsumeMessageDirectlyResult,
    ConsumerConnection,
    ConsumerData,
    ConsumerRunningInfo,
    ConsumeStatus,
    ConsumeType,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageModel,
    ProcessQueueInfo,
    ProducerConnection,
    ProducerData,
    ProducerInfo,
    ProducerTableInfo,
    SubscriptionData,
    UnlockBatchRequestBody,
)
from protocol.bodies._codec import BodyError, MessageQueue
from protocol.bodies._controller import (
    OPEN_END_OFFSET,
    BrokerMemberGroup,
    BrokerReplicasInfo,
    ElectMasterResponseBody,
    EpochEntry,
    EpochEntryCache,
    ReplicaIdentity,
    ReplicasInfo,
    SyncStateSet,
)
from protocol.bodies._route import (
    PERM_INHERIT,
    PERM_PRIORITY,
    PERM_READ,
    PERM_WRITE,
    BrokerData,
    ClusterInfo,
    GroupList,
    KVConfigSerializeWrapper,
    KVTable,
    QueueData,
    TopicList,
    TopicRouteData,
    perm_to_string,
)

__all__ = [
    "OPEN_END_OFFSET",
    "BrokerMemberGroup",
    "BrokerReplicasInfo",
    "ElectMasterResponseBody",
    "EpochEntry",
    "EpochEntryCache",
    "ReplicaIdentity",
    "ReplicasInfo",
    "SyncStateSet",
    "PERM_INHERIT",
    "PERM_PRIORITY",
    "PERM_READ",
    "PERM_WRITE",
    "BodyError",
    "BrokerData",
    "BrokerStatsData",
    "BrokerStatsItem",
    "ClusterInfo",
    "Connection",
    "ConsumeFromWhere",
    "ConsumeMessageDirectlyResult",
    "ConsumeStats",
    "ConsumeStatus",
    "ConsumeType",
    "ConsumerConnection",
    "ConsumerData",
    "ConsumerOffsetSerializeWrapper",
    "ConsumerRunningInfo",
    "DataVersion",
    "DelayOffsetSerializeWrapper",
    "GetConsumerListByGroupResponseBody",
    "GroupList",
    "HeartbeatData",
    "CheckClientRequestBody",
    "KVConfigSerializeWrapper",
    "KVTable",
    "LockBatchRequestBody",
    "LockBatchResponseBody",
    "MessageModel",
    "MessageQueue",
    "OffsetWrapper",
    "PopConsumeStats",
    "ProcessQueueInfo",
    "ProducerConnection",
    "ProducerData",
    "ProducerInfo",
    "ProducerTableInfo",
    "QueryConsumeTimeSpanBody",
    "QueueData",
    "QueueTimeSpan",
    "RegisterBrokerBody",
    "ResetOffsetBody",
    "SubscriptionData",
    "SubscriptionGroupConfig",
    "SubscriptionGroupWrapper",
    "MESSAGE_TYPE",
    "MESSAGE_TYPES",
    "TOPIC_ATTRIBUTES",
    "TopicAttributeError",
    "TopicConfig",
    "TopicConfigSerializeWrapper",
    "alter_attributes",
    "format_attribute_changes",
    "parse_attribute_changes",
    "TopicFilterType",
    "TopicList",
    "TopicOffset",
    "TopicRouteData",
    "TopicStatsTable",
    "UnlockBatchRequestBody",
    "perm_to_string",
]
