"""The admin client (RocketMQ's MQAdminExt): topics, groups, routes, stats, lookups, resets.

    async with Admin(namesrv_addr="127.0.0.1:9876") as admin:
        await admin.create_topic("Orders", cluster="DefaultCluster", queue_nums=8)
        stats = await admin.consume_stats("cg", "Orders")
        print(stats.lag)

Cluster-wide calls find the cluster's masters with GET_BROKER_CLUSTER_INFO and ask each one;
route, cluster and topic deletion go to a registry (round robin, failover).

`Admin` is one class joined from a class per family of calls, each over `AdminCore` (core.py:
the client instance, masters and routes, checked requests): topics.py, groups.py (consumer and
producer groups, progress and lag), offsets.py (clone and reset), brokers.py (one broker's
info, config and tables), registries.py (settings, KV config, write permission),
messages.py (lookups by id or key, direct consumption) and controllers.py (controller mode:
SyncStateSets, elections, epochs).
"""

from __future__ import annotations

from client.admin.brokers import BrokerCalls
from client.admin.controllers import ControllerCalls
from client.admin.core import AdminCore
from client.admin.groups import (
    SYSTEM_CONSUMER_GROUP_PREFIX,
    SYSTEM_CONSUMER_GROUPS,
    GroupCalls,
    GroupConsumeStats,
    is_system_group,
)
from client.admin.messages import MessageCalls
from client.admin.offsets import OffsetCalls
from client.admin.registries import RegistryCalls
from client.admin.topics import TopicCalls

__all__ = [
    "SYSTEM_CONSUMER_GROUPS",
    "SYSTEM_CONSUMER_GROUP_PREFIX",
    "Admin",
    "AdminCore",
    "GroupConsumeStats",
    "is_system_group",
]


class Admin(
    TopicCalls, GroupCalls, BrokerCalls, OffsetCalls, RegistryCalls, MessageCalls, ControllerCalls
):
    """Operator calls against a BoltMQ or RocketMQ 4.x cluster; ``async with Admin(...)``."""
