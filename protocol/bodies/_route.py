"""Route data and the registry's answers and kvConfig.json (sheet 4.1-4.3); perm bits."""

from __future__ import annotations

from typing import Any

import attrs

from protocol.bodies._codec import Body, converter, structure_factory, unstructure_factory

PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1


def perm_to_string(perm: int) -> str:
    """``RWX``-style text of a perm value, as mqadmin prints it (``RW-``)."""
    return (
        ("R" if perm & PERM_READ else "-")
        + ("W" if perm & PERM_WRITE else "-")
        + ("X" if perm & PERM_INHERIT else "-")
    )


@attrs.frozen(kw_only=True)
class QueueData(Body):
    """A topic's queues on one broker; written with both ``topicSysFlag`` and ``topicSynFlag``."""

    broker_name: str
    read_queue_nums: int = 0
    write_queue_nums: int = 0
    perm: int = PERM_READ | PERM_WRITE
    topic_sys_flag: int = 0


@attrs.frozen(kw_only=True)
class BrokerData(Body):
    """A broker group's addresses by broker id (0 is the master)."""

    cluster: str = ""
    broker_name: str
    broker_addrs: dict[int, str] = attrs.Factory(dict)


@attrs.frozen(kw_only=True)
class TopicRouteData(Body):
    """GET_ROUTEINFO_BY_TOPIC body."""

    order_topic_conf: str | None = None
    queue_datas: list[QueueData] = attrs.Factory(list)
    broker_datas: list[BrokerData] = attrs.Factory(list)
    filter_server_table: dict[str, list[str]] = attrs.Factory(dict)


@attrs.frozen(kw_only=True)
class ClusterInfo(Body):
    """GET_BROKER_CLUSTER_INFO body."""

    broker_addr_table: dict[str, BrokerData] = attrs.Factory(dict)
    cluster_addr_table: dict[str, list[str]] = attrs.Factory(dict)


@attrs.frozen(kw_only=True)
class TopicList(Body):
    """A list of topic names, with the answering broker's address in some replies."""

    topic_list: list[str] = attrs.Factory(list)
    broker_addr: str | None = None


@attrs.frozen(kw_only=True)
class KVTable(Body):
    """A string-to-string table (KV namespaces, broker runtime info)."""

    table: dict[str, str] = attrs.Factory(dict)


@attrs.frozen(kw_only=True)
class GroupList(Body):
    """A list of consumer group names."""

    group_list: list[str] = attrs.Factory(list)


@attrs.frozen(kw_only=True)
class KVConfigSerializeWrapper(Body):
    """The registry's ``kvConfig.json``: namespace -> key -> value."""

    config_table: dict[str, dict[str, str]] = attrs.Factory(dict)


_structure_queue_data = structure_factory(QueueData)
_unstructure_queue_data = unstructure_factory(QueueData)


def _queue_data_from(value: Any, _: Any) -> QueueData:
    # Brokers up to 4.8 (and the Go client) spell the flag topicSynFlag.
    if isinstance(value, dict) and "topicSysFlag" not in value and "topicSynFlag" in value:
        value = {**value, "topicSysFlag": value["topicSynFlag"]}
    return _structure_queue_data(value, QueueData)  # type: ignore[no-any-return]


def _queue_data_to(queue_data: QueueData) -> dict[str, Any]:
    obj: dict[str, Any] = _unstructure_queue_data(queue_data)
    obj["topicSynFlag"] = obj["topicSysFlag"]
    return obj


converter.register_structure_hook(QueueData, _queue_data_from)
converter.register_unstructure_hook(QueueData, _queue_data_to)
