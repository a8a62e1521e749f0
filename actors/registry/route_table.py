"""The registry's five route tables and every change to them, with no I/O and no clock.

`RouteTable` is plain state: the registry actor is its only writer (registrations, expiry,
deletes arrive through the actor's mailbox), while route queries read it directly. Trio runs
one task at a time, so a read between two awaits always sees a consistent table. Encoded route
answers are cached per topic and dropped whenever that topic, one of its brokers or its order
configuration changes.

Times are whatever clock the caller passes (`trio.current_time()` in the registry), so expiry
is testable on a mock clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import attrs
import orjson

log = logging.getLogger("boltmq.registry")

MASTER_ID = 0
PERM_READ = 4
PERM_WRITE = 2
TOPIC_SYS_FLAG_UNIT = 0x1
TOPIC_SYS_FLAG_UNIT_SUB = 0x2


class TopicConfigLike(Protocol):
    """What registration needs from one topic of a broker's topic table."""

    @property
    def read_queue_nums(self) -> int: ...
    @property
    def write_queue_nums(self) -> int: ...
    @property
    def perm(self) -> int: ...
    @property
    def topic_sys_flag(self) -> int: ...


@attrs.define(slots=True)
class QueueData:
    """One broker's queues of one topic (Java QueueData)."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json_dict(self) -> dict[str, Any]:
        """Java's keys, sorted, with both the new and the pre-4.9 spelling of the sys flag."""
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSynFlag": self.topic_sys_flag,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }


@attrs.define(slots=True)
class BrokerData:
    """A broker name's cluster and addresses by broker id, 0 = master (Java BrokerData)."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = attrs.field(factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        """Java's keys, sorted; broker ids as quoted keys (standard JSON, see the wire sheet)."""
        return {
            "brokerAddrs": {str(k): v for k, v in sorted(self.broker_addrs.items())},
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }


@attrs.define(slots=True)
class BrokerLiveInfo:
    """When a broker address last registered, with what data version, over which connection."""

    last_update: float
    data_version: object
    connection: object | None
    ha_server_addr: str
    broker_name: str
    cluster: str
    #: ``ws://host:port/`` of the broker's websocket listener; None when it has none.
    websocket_addr: str | None = None


@attrs.frozen
class RegisterResult:
    """What a slave learns about its master; both empty for a master or an orphan slave."""

    master_addr: str | None = None
    ha_server_addr: str | None = None
    first_registration: bool = False


@attrs.frozen
class RouteTableStatistics:
    """Sizes of the tables at one moment."""

    topics: int
    broker_names: int
    clusters: int
    live_brokers: int
    cached_routes: int
    route_queries: int
    route_cache_hits: int


class RouteTable:
    """topicQueueTable, brokerAddrTable, clusterAddrTable, brokerLiveTable, filterServerTable."""

    def __init__(self, order_topic_conf: Callable[[str], str | None] | None = None) -> None:
        #: topic -> brokerName -> QueueData (insertion order = registration order).
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}
        self.filter_server_table: dict[str, list[str]] = {}
        #: Looks up a topic's ORDER_TOPIC_CONFIG value (None = not included in routes).
        self.order_topic_conf = order_topic_conf
        self._route_cache: dict[str, bytes] = {}
        self.route_queries = 0
        self.route_cache_hits = 0

    # ----------------------------------------------------------------- queries (direct reads)

    def route_json(self, topic: str) -> bytes | None:
        """The encoded TopicRouteData of ``topic``, or None when no broker serves it."""
        self.route_queries += 1
        cached = self._route_cache.get(topic)
        if cached is not None:
            self.route_cache_hits += 1
            return cached
        encoded = self._encode_route(topic)
        if encoded is not None:
            self._route_cache[topic] = encoded
        return encoded

    def route(self, topic: str) -> dict[str, Any] | None:
        """The TopicRouteData of ``topic`` as a JSON-ready dict, or None when unknown."""
        queues = self.topic_queue_table.get(topic)
        if not queues:
            return None
        broker_datas = []
        filter_servers: dict[str, list[str]] = {}
        for broker_name in queues:
            broker = self.broker_addr_table.get(broker_name)
            if broker is None:
                continue
            broker_datas.append(broker.to_json_dict())
            for addr in broker.broker_addrs.values():
                servers = self.filter_server_table.get(addr)
                if servers is not None:
                    filter_servers[addr] = list(servers)
        if not broker_datas:
            # Java answers TOPIC_NOT_EXIST when no broker of the topic has an address.
            return None
        route: dict[str, Any] = {
            "brokerDatas": broker_datas,
            "filterServerTable": filter_servers,
        }
        if self.order_topic_conf is not None:
            order = self.order_topic_conf(topic)
            if order is not None:
                route["orderTopicConf"] = order
        route["queueDatas"] = [qd.to_json_dict() for qd in queues.values()]
        return route

    def cluster_info(self) -> dict[str, Any]:
        """The ClusterInfo body: every broker's addresses and every cluster's broker names."""
        return {
            "brokerAddrTable": {
                name: data.to_json_dict() for name, data in self.broker_addr_table.items()
            },
            "clusterAddrTable": {
                cluster: sorted(names) for cluster, names in self.cluster_addr_table.items()
            },
        }

    def all_topics(self) -> list[str]:
        """Every topic some broker serves."""
        return list(self.topic_queue_table)

    def topics_by_cluster(self, cluster: str) -> list[str]:
        """Topics with queues on at least one broker of ``cluster``."""
        names = self.cluster_addr_table.get(cluster)
        if not names:
            return []
        return [t for t, queues in self.topic_queue_table.items() if not names.isdisjoint(queues)]

    def system_topics(self) -> tuple[list[str], str | None]:
        """Cluster names and broker names (each is a system topic), plus one broker address."""
        topics: list[str] = []
        for cluster, names in self.cluster_addr_table.items():
            topics.append(cluster)
            topics.extend(sorted(names))
        broker_addr = None
        for data in self.broker_addr_table.values():
            if data.broker_addrs:
                broker_addr = next(iter(data.broker_addrs.values()))
                break
        return topics, broker_addr

    def topics_with_sys_flag(self, want_unit: bool | None, want_unit_sub: bool | None) -> list[str]:
        """Topics whose first QueueData's sys flag matches (None = either), as Java filters."""
        found = []
        for topic, queues in self.topic_queue_table.items():
            if not queues:
                continue
            flag = next(iter(queues.values())).topic_sys_flag
            if want_unit is not None and bool(flag & TOPIC_SYS_FLAG_UNIT) != want_unit:
                continue
            if want_unit_sub is not None and bool(flag & TOPIC_SYS_FLAG_UNIT_SUB) != want_unit_sub:
                continue
            found.append(topic)
        return found

    def data_version_of(self, broker_addr: str) -> object | None:
        """The data version a broker address last registered with."""
        live = self.broker_live_table.get(broker_addr)
        return None if live is None else live.data_version

    def master_of(self, broker_name: str) -> tuple[str | None, str | None]:
        """(master address, master HA address) of a broker name, when the master is live."""
        broker = self.broker_addr_table.get(broker_name)
        if broker is None:
            return None, None
        master = broker.broker_addrs.get(MASTER_ID)
        if master is None:
            return None, None
        live = self.broker_live_table.get(master)
        if live is None:
            return None, None
        return master, live.ha_server_addr

    def statistics(self) -> RouteTableStatistics:
        """Table sizes and route-query counters."""
        return RouteTableStatistics(
            topics=len(self.topic_queue_table),
            broker_names=len(self.broker_addr_table),
            clusters=len(self.cluster_addr_table),
            live_brokers=len(self.broker_live_table),
            cached_routes=len(self._route_cache),
            route_queries=self.route_queries,
            route_cache_hits=self.route_cache_hits,
        )

    # ----------------------------------------------------------------- changes (actor only)

    def register_broker(
        self,
        *,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        data_version: object | None,
        topic_config_table: Mapping[str, TopicConfigLike] | None,
        filter_server_list: Iterable[str] = (),
        connection: object | None = None,
        websocket_addr: str | None = None,
        now: float,
    ) -> RegisterResult:
        """Apply one REGISTER_BROKER (the logic of sheet 4.4)."""
        names = self.cluster_addr_table.setdefault(cluster, set())
        names.add(broker_name)

        broker = self.broker_addr_table.get(broker_name)
        first = broker is None
        if broker is None:
            broker = BrokerData(cluster, broker_name)
            self.broker_addr_table[broker_name] = broker
        addrs = broker.broker_addrs
        addrs_before = dict(addrs)
        # A slave promoted to master keeps its address but changes id: drop the old entry.
        for other_id in [i for i, a in addrs.items() if a == broker_addr and i != broker_id]:
            del addrs[other_id]
        old_addr = addrs.get(broker_id)
        addrs[broker_id] = broker_addr
        first = first or old_addr is None
        if broker.cluster != cluster:
            broker.cluster = cluster
            addrs_before = {}  # force a cache drop below
        if addrs != addrs_before:
            self._invalidate_broker(broker_name)

        if (
            topic_config_table is not None
            and broker_id == MASTER_ID
            and (first or self._data_version_changed(broker_addr, data_version))
        ):
            for topic, config in topic_config_table.items():
                self._put_queue_data(topic, broker_name, config)

        previous = self.broker_live_table.get(broker_addr)
        self.broker_live_table[broker_addr] = BrokerLiveInfo(
            last_update=now,
            data_version=data_version,
            connection=connection,
            ha_server_addr=ha_server_addr,
            broker_name=broker_name,
            cluster=cluster,
            websocket_addr=websocket_addr,
        )
        if previous is None:
            log.info(
                "registry: new broker %s (%s id %d, cluster %s, HA %s)",
                broker_addr,
                broker_name,
                broker_id,
                cluster,
                ha_server_addr,
            )

        servers = list(filter_server_list)
        if servers != self.filter_server_table.get(broker_addr, []):
            self._invalidate_broker(broker_name)
        if servers:
            self.filter_server_table[broker_addr] = servers
        else:
            self.filter_server_table.pop(broker_addr, None)

        if broker_id != MASTER_ID:
            master, ha = self.master_of(broker_name)
            return RegisterResult(master, ha, first)
        return RegisterResult(first_registration=first)

    def refresh(self, broker_addr: str, now: float) -> bool:
        """Count a keep-alive for a live broker address; False when it is not registered."""
        live = self.broker_live_table.get(broker_addr)
        if live is None:
            return False
        live.last_update = now
        return True

    def data_version_changed(self, broker_addr: str, data_version: object) -> bool:
        """True unless ``broker_addr`` is registered with exactly this data version."""
        return self._data_version_changed(broker_addr, data_version)

    def unregister_broker(
        self, *, cluster: str, broker_addr: str, broker_name: str, broker_id: int
    ) -> None:
        """Apply one UNREGISTER_BROKER: the address goes; the broker name's queues go with its
        last address, and the cluster with its last broker name."""
        if self.broker_live_table.pop(broker_addr, None) is not None:
            log.info("registry: broker %s (%s) unregistered", broker_addr, broker_name)
        self.filter_server_table.pop(broker_addr, None)
        broker = self.broker_addr_table.get(broker_name)
        removed_name = False
        if broker is not None:
            if broker.broker_addrs.pop(broker_id, None) is not None:
                self._invalidate_broker(broker_name)
            if not broker.broker_addrs:
                del self.broker_addr_table[broker_name]
                removed_name = True
        if removed_name:
            self._remove_from_clusters(broker_name)
            self._remove_topics_of(broker_name)

    def drop_broker(self, broker_addr: str, reason: str) -> bool:
        """Forget a broker address (expired or its connection closed); False if unknown."""
        live = self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        removed_names: list[str] = []
        found = live is not None
        for name, broker in list(self.broker_addr_table.items()):
            ids = [i for i, a in broker.broker_addrs.items() if a == broker_addr]
            if not ids:
                continue
            found = True
            for i in ids:
                del broker.broker_addrs[i]
            self._invalidate_broker(name)
            if not broker.broker_addrs:
                del self.broker_addr_table[name]
                removed_names.append(name)
        for name in removed_names:
            self._remove_from_clusters(name)
            self._remove_topics_of(name)
        if found:
            log.info(
                "registry: dropped broker %s (%s): %s",
                broker_addr,
                live.broker_name if live else "no live entry",
                reason,
            )
        return found

    def expired(self, now: float, expiry: float) -> list[str]:
        """Broker addresses whose last registration is older than ``expiry`` seconds."""
        return [a for a, live in self.broker_live_table.items() if live.last_update + expiry < now]

    def addresses_of_connection(self, connection: object) -> list[str]:
        """Broker addresses that registered over ``connection``."""
        return [a for a, live in self.broker_live_table.items() if live.connection is connection]

    def delete_topic(self, topic: str, cluster: str | None = None) -> bool:
        """Forget a topic (only its queues on ``cluster``'s brokers when one is named)."""
        queues = self.topic_queue_table.get(topic)
        if queues is None:
            return False
        if cluster:
            names = self.cluster_addr_table.get(cluster, set())
            for name in [n for n in queues if n in names]:
                del queues[name]
            if queues:
                self._route_cache.pop(topic, None)
                return True
        del self.topic_queue_table[topic]
        self._route_cache.pop(topic, None)
        return True

    def set_write_perm(self, broker_name: str, writable: bool) -> int:
        """Wipe (or restore as read+write) the write permission of a broker's queues; count."""
        count = 0
        for topic, queues in self.topic_queue_table.items():
            qd = queues.get(broker_name)
            if qd is None:
                continue
            qd.perm = (PERM_READ | PERM_WRITE) if writable else (qd.perm & ~PERM_WRITE)
            self._route_cache.pop(topic, None)
            count += 1
        return count

    def invalidate_topic(self, topic: str) -> None:
        """Drop a topic's cached route (its order configuration changed)."""
        self._route_cache.pop(topic, None)

    def invalidate_all(self) -> None:
        """Drop every cached route (a setting that shapes every route changed)."""
        self._route_cache.clear()

    # ----------------------------------------------------------------- helpers

    def _encode_route(self, topic: str) -> bytes | None:
        route = self.route(topic)
        return None if route is None else orjson.dumps(route)

    def _data_version_changed(self, broker_addr: str, data_version: object) -> bool:
        live = self.broker_live_table.get(broker_addr)
        return live is None or live.data_version != data_version

    def _put_queue_data(self, topic: str, broker_name: str, config: TopicConfigLike) -> None:
        new = QueueData(
            broker_name,
            config.read_queue_nums,
            config.write_queue_nums,
            config.perm,
            config.topic_sys_flag,
        )
        queues = self.topic_queue_table.get(topic)
        if queues is None:
            self.topic_queue_table[topic] = {broker_name: new}
            log.info("registry: new topic %s on %s", topic, broker_name)
        elif queues.get(broker_name) != new:
            queues[broker_name] = new
        else:
            return
        self._route_cache.pop(topic, None)

    def _remove_from_clusters(self, broker_name: str) -> None:
        for cluster in [c for c, names in self.cluster_addr_table.items() if broker_name in names]:
            names = self.cluster_addr_table[cluster]
            names.discard(broker_name)
            if not names:
                del self.cluster_addr_table[cluster]
                log.info("registry: cluster %s has no broker left and was removed", cluster)

    def _remove_topics_of(self, broker_name: str) -> None:
        for topic in [t for t, q in self.topic_queue_table.items() if broker_name in q]:
            queues = self.topic_queue_table[topic]
            del queues[broker_name]
            self._route_cache.pop(topic, None)
            if not queues:
                del self.topic_queue_table[topic]
                log.info("registry: topic %s has no broker left and was removed", topic)

    def _invalidate_broker(self, broker_name: str) -> None:
        cache = self._route_cache
        if not cache:
            return
        for topic, queues in self.topic_queue_table.items():
            if broker_name in queues:
                cache.pop(topic, None)
