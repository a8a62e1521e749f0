"""The registry's Prometheus metrics: request latency and the route table's sizes.

`RegistryMetricsCollector` reads, at scrape time, the request-latency histograms the registry's
dispatcher keeps (`protocol.rpc_metrics`) and the registry actor's statistics record (it is
handed those two and the address, not the registry, so it knows nothing else of it); the
scrape runs in the trio thread (`supervisors.metrics_http`), so it reads them as any inline
query does. Every series carries ``node_type="nameserver"`` (RocketMQ 5's value for a
NameServer) and ``node_id``, the registry's address; a registry serves many clusters, so it
has no ``cluster`` label. The rocketmq_namesrv_* names are BoltMQ's (RocketMQ's NameServer
exports none); docs/operations.md lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from actors.registry.actor import RegistryStatistics
from protocol.rpc_metrics import RpcLatency, rpc_latency_family

__all__ = ["RegistryMetricsCollector"]


class RegistryMetricsCollector(Collector):
    """Reads the registry's records into metric families at each scrape."""

    def __init__(
        self, address: str, rpc_latency: RpcLatency, statistics: Callable[[], RegistryStatistics]
    ) -> None:
        #: The registry's ``host:port``, the ``node_id`` label.
        self.address = address
        self.rpc_latency = rpc_latency
        #: The registry actor's `statistics`, called once per scrape.
        self.statistics = statistics

    def collect(self) -> Iterator[Metric]:
        """rocketmq_rpc_latency, then the route table's gauges and counters."""
        base = {"node_type": "nameserver", "node_id": self.address}
        yield rpc_latency_family(self.rpc_latency, base)
        stats = self.statistics()
        routes = stats.routes
        for name, text, value in (
            ("rocketmq_namesrv_topics", "Topics with a route", routes.topics),
            ("rocketmq_namesrv_clusters", "Clusters with a registered broker", routes.clusters),
            ("rocketmq_namesrv_broker_names", "Broker groups (brokerName) registered",
             routes.broker_names),
            ("rocketmq_namesrv_live_brokers", "Broker nodes whose heartbeat is current",
             routes.live_brokers),
            ("rocketmq_namesrv_kv_config_entries", "Entries of the KV config", stats.kv_entries),
        ):  # fmt: skip
            gauge = GaugeMetricFamily(name, text, labels=list(base))
            gauge.add_metric(list(base.values()), value)
            yield gauge
        for name, text, count in (
            ("rocketmq_namesrv_route_queries", "GET_ROUTEINFO_BY_TOPIC answers",
             routes.route_queries),
            ("rocketmq_namesrv_brokers_dropped", "Brokers dropped (heartbeat expired or "
             "connection closed)", stats.brokers_dropped),
        ):  # fmt: skip
            counter = CounterMetricFamily(name, text, labels=list(base))
            counter.add_metric(list(base.values()), count)
            yield counter
