"""The controller's Prometheus metrics, read from its statistics record at scrape time.

Every series carries ``node_type="controller"`` and ``node_id`` (the controller's remoting
address). rocketmq_controller_elections_total counts elections this controller committed, by
cluster, brokerName and trigger (``scan``: the master went silent; ``broker``: a broker
asked; ``admin``: an operator designated one); the other series are gauges. The names are
BoltMQ's; docs/controller.md lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from actors.controller.service import ControllerStatistics

__all__ = ["ControllerMetricsCollector"]


class ControllerMetricsCollector(Collector):
    """Reads the controller's statistics into metric families at each scrape."""

    def __init__(
        self,
        address: str,
        statistics: Callable[[], ControllerStatistics],
        host: Collector | None = None,
    ) -> None:
        #: The controller's ``host:port``, the ``node_id`` label.
        self.address = address
        #: The controller's `statistics`, called once per scrape.
        self.statistics = statistics
        #: The embedding registry's collector, whose families come first on one /metrics.
        self.host = host

    def collect(self) -> Iterator[Metric]:
        """The host's families (embedded), then leadership, live brokers, SyncStateSet sizes
        and elections."""
        if self.host is not None:
            yield from self.host.collect()
        base = {"node_type": "controller", "node_id": self.address}
        labels, values = list(base), list(base.values())
        stats = self.statistics()
        leader = GaugeMetricFamily(
            "rocketmq_controller_is_leader",
            "1 when this controller is the Raft leader (it writes, scans and elects)",
            labels=labels,
        )
        leader.add_metric(values, 1 if stats.is_leader else 0)
        yield leader
        alive = GaugeMetricFamily(
            "rocketmq_controller_alive_brokers",
            "Brokers whose heartbeat to this controller is current",
            labels=labels,
        )
        alive.add_metric(values, stats.alive_brokers)
        yield alive
        groups = GaugeMetricFamily(
            "rocketmq_controller_broker_groups",
            "Broker groups (brokerName) the controller holds",
            labels=labels,
        )
        groups.add_metric(values, stats.broker_groups)
        yield groups
        sizes = GaugeMetricFamily(
            "rocketmq_controller_sync_state_set_size",
            "Brokers in a group's SyncStateSet (the master included)",
            labels=[*labels, "broker_name"],
        )
        for name, size in sorted(stats.sync_state_set_sizes.items()):
            sizes.add_metric([*values, name], size)
        yield sizes
        elections = CounterMetricFamily(
            "rocketmq_controller_elections",
            "Elections committed by this controller",
            labels=[*labels, "cluster", "broker_name", "trigger"],
        )
        for (cluster, name, trigger), count in sorted(stats.elections.items()):
            elections.add_metric([*values, cluster, name, trigger], count)
        yield elections
