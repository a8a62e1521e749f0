"""RocketMQ's reserved names: system topics, system groups and the retry/dead-letter prefixes.

One home for the names RocketMQ's brokers, clients and tools agree on (its ``TopicValidator``
and ``MixAll`` constants), so every package spells them alike and an operator finds them by the
names RocketMQ's own docs use. Name checks that belong to one party (which topics a producer
may not send to, say) stay with that party and are built from these.
"""

from __future__ import annotations

# -- topics -------------------------------------------------------------------------------------

#: The template an unknown topic is created from on first send (autoCreateTopicEnable).
AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
#: Delayed messages wait here, queue = delay level - 1.
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: RocketMQ 5's timer topic (its consume-queue tags code is the delivery time).
TIMER_TOPIC = "rmq_sys_wheel_timer"
BENCHMARK_TOPIC = "BenchmarkTest"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
#: Transactional half messages, and the ops that resolve them.
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"

#: ``%RETRY%<group>``: a consumer group's retry topic.
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
#: ``%DLQ%<group>``: a consumer group's dead-letter topic.
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
#: Topics of RocketMQ's own that a user never names: ``rmq_sys_*``.
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
#: ``<cluster>_REPLY_TOPIC``: request-reply's replies (RocketMQ 4.6+).
REPLY_TOPIC_SUFFIX = "_REPLY_TOPIC"

#: The topics every broker keeps for itself by name (besides its broker and cluster names).
SYSTEM_TOPICS = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY_TOPIC,
        BENCHMARK_TOPIC,
        OFFSET_MOVED_EVENT,
        SCHEDULE_TOPIC,
        SELF_TEST_TOPIC,
        TRACE_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
    }
)
#: Prefixes of topics that are not a user's own topic.
SYSTEM_TOPIC_PREFIXES = (
    "RMQ_SYS_",
    SYSTEM_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    DLQ_GROUP_TOPIC_PREFIX,
)

# -- groups ---------------------------------------------------------------------------------------

TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
FILTERSRV_CONSUMER_GROUP = "FILTERSRV_CONSUMER"
MONITOR_CONSUMER_GROUP = "__MONITOR_CONSUMER"
CLIENT_INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
SELF_TEST_PRODUCER_GROUP = "SELF_TEST_P_GROUP"
SELF_TEST_CONSUMER_GROUP = "SELF_TEST_C_GROUP"
ONS_HTTP_PROXY_GROUP = "CID_ONS-HTTP-PROXY"
CID_ONSAPI_PERMISSION_GROUP = "CID_ONSAPI_PERMISSION"
CID_ONSAPI_OWNER_GROUP = "CID_ONSAPI_OWNER"
CID_ONSAPI_PULL_GROUP = "CID_ONSAPI_PULL"
DEFAULT_PRODUCER_GROUP = "DEFAULT_PRODUCER"
DEFAULT_CONSUMER_GROUP = "DEFAULT_CONSUMER"
#: The group a broker's transaction check-back produces as.
CID_RMQ_SYS_TRANS = "CID_RMQ_SYS_TRANS"
#: Groups with this prefix are the brokers' own.
CID_RMQ_SYS_PREFIX = "CID_RMQ_SYS_"

#: The subscription groups RocketMQ creates in every broker's table (sheet 8.4), in its order.
BROKER_SYSTEM_GROUPS = (
    TOOLS_CONSUMER_GROUP,
    FILTERSRV_CONSUMER_GROUP,
    SELF_TEST_CONSUMER_GROUP,
    ONS_HTTP_PROXY_GROUP,
    CID_ONSAPI_PULL_GROUP,
    CID_ONSAPI_PERMISSION_GROUP,
    CID_ONSAPI_OWNER_GROUP,
)
#: Every group name of RocketMQ's own, producers' and consumers' (besides `CID_RMQ_SYS_PREFIX`).
SYSTEM_GROUPS = frozenset(
    {
        *BROKER_SYSTEM_GROUPS,
        MONITOR_CONSUMER_GROUP,
        CLIENT_INNER_PRODUCER_GROUP,
        SELF_TEST_PRODUCER_GROUP,
        DEFAULT_CONSUMER_GROUP,
        CID_RMQ_SYS_TRANS,
    }
)


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``: where a 4.x consumer group's failed messages come back."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``: where a group's messages go after its max reconsume times."""
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_retry_or_dlq_topic(topic: str) -> bool:
    """Whether ``topic`` is a group's retry or dead-letter topic."""
    return topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))


def is_system_topic(topic: str) -> bool:
    """A topic of RocketMQ's own, by name (a broker also keeps its broker and cluster names)."""
    return (
        topic in SYSTEM_TOPICS
        or topic.startswith(SYSTEM_TOPIC_PREFIXES)
        or topic.endswith(REPLY_TOPIC_SUFFIX)
    )


def is_system_group(group: str) -> bool:
    """A producer or consumer group of RocketMQ's own or its tools'."""
    return group in SYSTEM_GROUPS or group.startswith(CID_RMQ_SYS_PREFIX)


#: Pop checkpoints and acks are stored in the cluster's revive topic (``rmq_sys_REVIVE_LOG_``
#: + the cluster name), which the revive service reads back.
REVIVE_TOPIC_PREFIX = SYSTEM_TOPIC_PREFIX + "REVIVE_LOG_"
#: The group whose offset on the revive topic says how far the revive log has been settled.
REVIVE_GROUP = CID_RMQ_SYS_PREFIX + "REVIVE_GROUP"


def revive_topic(cluster: str) -> str:
    """``rmq_sys_REVIVE_LOG_<cluster>``: a cluster's pop checkpoints and acks."""
    return REVIVE_TOPIC_PREFIX + cluster


def pop_retry_topic(group: str, topic: str) -> str:
    """``%RETRY%<group>_<topic>``: where popped messages of ``group`` on ``topic`` come back
    when not acked in time (RocketMQ's pop retry topic, its default first form)."""
    return f"{RETRY_GROUP_TOPIC_PREFIX}{group}_{topic}"


def pop_retry_topic_v2(group: str, topic: str) -> str:
    """``%RETRY%<group>+<topic>``: RocketMQ's second form of the pop retry topic (a receipt
    handle's retry field 2 names it)."""
    return f"{RETRY_GROUP_TOPIC_PREFIX}{group}+{topic}"
