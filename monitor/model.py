"""The monitor's model: successive `Sample`s in, a plain `Snapshot` out. No I/O, no clock.

Rates come from the difference of two samples over their own timestamps: a broker's in/out
from its runtime totals, a topic's in from its queues' max offsets, a group's consume rate
from its committed offsets. A group on a topic is *stalled* when it has lag and either no
consumer online or no progress for ``stall_refreshes`` refreshes; *slow* when its time to catch
up at the current net rate (consume rate minus the topic's in rate) exceeds
``catch_up_seconds``; *growing* when its lag rose at every one of those refreshes. Alerts
carry the wall-clock time their condition started and last while it holds; an election (a
controller-mode group's master epoch rose) is an alert for ``election_alert_seconds``.
"""

from __future__ import annotations

import math
from collections import deque

import attrs

from monitor import rows as derive
from monitor.collector import Sample
from monitor.snapshot import (
    Alert,
    BrokerRow,
    ControllerGroupRow,
    GroupRow,
    Header,
    QueueRow,
    Snapshot,
    TopicRow,
    is_system_group,
    is_system_topic,
)
from protocol import names

#: Points of a broker's sparkline (one a refresh: a minute at the default interval).
SPARKLINE_POINTS = 60


@attrs.frozen
class Thresholds:
    """When a row turns red or yellow and an alert is raised."""

    stall_refreshes: int = 5
    catch_up_seconds: float = 600.0
    slave_lag_bytes: int = 64 << 20
    slave_lag_seconds: float = 30.0
    #: RocketMQ's diskSpaceWarningLevelRatio default.
    disk_ratio: float = 0.90
    #: How long an election (a group's master epoch changed) stays among the alerts.
    election_alert_seconds: float = 60.0


#: After a drill-down's client computed, not said by the client (it did not answer).
GUESS_MARK = "(guess)"


class Model:
    """Keeps the history the rates, stall detection and alerts need."""

    def __init__(self, thresholds: Thresholds | None = None, *, system: bool = False) -> None:
        self.thresholds = thresholds or Thresholds()
        self.system = system
        self.previous: Sample | None = None
        self.latest: Sample | None = None
        self.current: Snapshot | None = None
        self._broker_history: dict[tuple[str, int], deque[float]] = {}
        self._broker_rates: dict[tuple[str, int], tuple[float, float]] = {}
        self._topic_rates: dict[tuple[str, str], float] = {}
        self._group_rates: dict[tuple[str, str], float] = {}
        self._lag_history: dict[tuple[str, str], deque[int]] = {}
        self._offset_history: dict[tuple[str, str], deque[int]] = {}
        self._seen_brokers: dict[tuple[str, int], str] = {}
        self._dlq_baseline: dict[str, int] = {}
        self._alert_since: dict[tuple[str, str], int] = {}
        #: Controller mode: broker name -> master epoch last seen; and the elections seen,
        #: broker name -> (wall ms it was seen, the line saying it).
        self._master_epochs: dict[str, int] = {}
        self._elections: dict[str, tuple[int, str]] = {}

    def update(self, sample: Sample) -> Snapshot:
        """Take in one refresh and return the snapshot it gives."""
        self.previous, self.latest = self.latest, sample
        self._update_broker_rates(sample)
        self._update_topic_rates(sample)
        self._update_group_rates(sample)
        self.current = self._build(sample)
        return self.current

    def snapshot(self) -> Snapshot:
        """The snapshot of the latest sample."""
        if self.current is None:
            raise RuntimeError("no sample yet: call update() first")
        return self.current

    def _build(self, sample: Sample) -> Snapshot:
        brokers = self._broker_rows(sample)
        topics = self._topic_rows(sample)
        groups = self._group_rows(sample, topics)
        clients = derive.client_rows(sample)
        controller_groups = self._controller_rows(sample)
        alerts = self._alerts(sample, brokers, groups)
        visible_topics = [t for t in topics if self.system or not t.system]
        visible_groups = [g for g in groups if self.system or not is_system_group(g.group)]
        clusters = sorted(sample.cluster_info.cluster_addr_table) if sample.cluster_info else []
        header = Header(
            registries=sample.registries,
            clusters=clusters,
            brokers=len([b for b in brokers if b.error is None]),
            brokers_down=len([b for b in brokers if b.error is not None]),
            in_tps=sum(b.in_tps or 0.0 for b in brokers if b.broker_id == 0),
            out_tps=sum(b.out_tps or 0.0 for b in brokers),
            alerts=len(alerts),
            requests=sample.requests,
            refresh_seconds=sample.seconds,
            wall_ms=sample.wall_ms,
        )
        return Snapshot(
            header, brokers, visible_topics, visible_groups, clients, alerts, controller_groups
        )

    def _controller_rows(self, sample: Sample) -> list[ControllerGroupRow]:
        """Each group's row, and an election noted when a group's master epoch rose."""
        controller = sample.controller
        if controller is None:
            return []
        if controller.error is not None:
            return [ControllerGroupRow(broker_name="-", error=controller.error)]
        rows = []
        for name, info in sorted(controller.groups.items()):
            seen = self._master_epochs.get(name)
            if seen is not None and info.master_epoch > seen:
                where = f" ({info.master_address})" if info.master_address else ""
                master = info.master_broker_id if info.master_broker_id is not None else "none"
                self._elections[name] = (
                    sample.wall_ms,
                    f"master now {master}{where}, epoch {info.master_epoch}",
                )
            self._master_epochs[name] = info.master_epoch
            rows.append(ControllerGroupRow(
                broker_name=name, master_broker_id=info.master_broker_id,
                master_address=info.master_address, master_epoch=info.master_epoch,
                sync_state_set=sorted(r.broker_id for r in info.in_sync_replicas),
                sync_state_set_epoch=info.sync_state_set_epoch,
                not_in_sync=sorted(r.broker_id for r in info.not_in_sync_replicas),
                controller_leader=controller.leader,
            ))  # fmt: skip
        return rows

    # -- drill-downs --------------------------------------------------------------------------

    def group_queues(self, group: str, topic: str | None = None) -> list[QueueRow]:
        """Per-queue progress of ``group``: broker and consumer offsets, diff, and the client
        holding the queue (as it said, or computed and marked `GUESS_MARK`)."""
        sample = self.latest
        if sample is None:
            return []
        detail = sample.group_details.get(group)
        clients = (
            sorted(c.client_id for c in detail.connection.connection_set)
            if (detail is not None and detail.connection is not None)
            else []
        )
        rows: list[QueueRow] = []
        for broker in derive.masters(sample):
            for key, committed in sorted(broker.consumer_offsets.items()):
                queue_topic, _, key_group = key.partition("@")
                if key_group != group or (topic is not None and queue_topic != topic):
                    continue
                stats = sample.topic_queues.get((broker.broker_name, queue_topic))
                queue_ids = sorted(set(committed) | set(stats.queues if stats else ()))
                for queue_id in queue_ids:
                    offset = stats.queues.get(queue_id) if stats else None
                    consumer_offset = committed.get(queue_id)
                    broker_offset = offset.max_offset if offset else None
                    diff = (
                        None
                        if broker_offset is None
                        else max(0, broker_offset - (consumer_offset or 0))
                    )
                    rows.append(
                        QueueRow(
                            queue_topic,
                            broker.broker_name,
                            queue_id,
                            broker_offset,
                            consumer_offset,
                            diff,
                            None,
                        )
                    )
        # Which client holds a queue: what the members said (GET_CONSUMER_RUNNING_INFO) when
        # every one answered; else, for a queue none claimed, the default
        # AllocateMessageQueueAveragely over the members, marked as a guess.
        said = sample.queue_owners.get(group)
        everyone_said = said is not None and not said.unanswered
        by_topic: dict[str, list[QueueRow]] = {}
        for row in rows:
            by_topic.setdefault(row.topic, []).append(row)
        result: list[QueueRow] = []
        for queue_rows in by_topic.values():
            ordered = sorted(queue_rows, key=lambda r: (r.broker_name, r.queue_id))
            for index, row in enumerate(ordered):
                queue = (row.topic, row.broker_name, row.queue_id)
                owner = said.owners.get(queue) if said is not None else None
                if owner is None and not everyone_said and clients:
                    guess = derive.averagely(index, len(ordered), clients)
                    owner = f"{guess} {GUESS_MARK}" if guess else None
                result.append(attrs.evolve(row, client=owner))
        return result

    def topic_queues(self, topic: str) -> list[QueueRow]:
        """Per-queue min/max offsets and last store time of ``topic`` on every broker."""
        sample = self.latest
        if sample is None:
            return []
        rows = []
        for (broker_name, name), stats in sorted(sample.topic_queues.items()):
            if name != topic:
                continue
            for queue_id, offset in sorted(stats.queues.items()):
                rows.append(
                    QueueRow(
                        topic,
                        broker_name,
                        queue_id,
                        offset.max_offset,
                        None,
                        offset.max_offset - offset.min_offset,
                        None,
                        min_offset=offset.min_offset,
                        last_update_ms=offset.last_update_timestamp,
                    )
                )
        return rows

    # -- rates --------------------------------------------------------------------------------

    def _update_broker_rates(self, sample: Sample) -> None:
        before = (
            {(b.broker_name, b.broker_id): b for b in self.previous.brokers}
            if (self.previous is not None)
            else {}
        )
        for broker in sample.brokers:
            key = (broker.broker_name, broker.broker_id)
            old = before.get(key)
            if broker.error is not None or old is None or old.error is not None:
                continue
            seconds = sample.monotonic - self.previous.monotonic if self.previous else 0.0
            if seconds <= 0:
                continue
            put, get = (
                derive.runtime_int(broker.runtime, name) - derive.runtime_int(old.runtime, name)
                for name in ("msgPutTotalTodayNow", "msgGetTotalTodayNow")
            )
            rates = (max(put, 0) / seconds, max(get, 0) / seconds)
            self._broker_rates[key] = rates
            history = self._broker_history.setdefault(key, deque(maxlen=SPARKLINE_POINTS))
            history.append(rates[0])

    def _update_topic_rates(self, sample: Sample) -> None:
        if self.previous is None:
            return
        for key, now in sample.topic_queues.items():
            old = self.previous.topic_queues.get(key)
            if old is None or now.fetched <= old.fetched:
                continue
            grown = derive.max_total(now.queues) - derive.max_total(old.queues)
            self._topic_rates[key] = max(grown, 0) / (now.fetched - old.fetched)

    def _update_group_rates(self, sample: Sample) -> None:
        totals = derive.group_offsets(sample)
        before = derive.group_offsets(self.previous) if self.previous is not None else {}
        for key, total in totals.items():
            history = self._offset_history.setdefault(
                key, deque(maxlen=self.thresholds.stall_refreshes + 1)
            )
            history.append(total)
            if key in before and self.previous is not None:
                seconds = sample.monotonic - self.previous.monotonic
                if seconds > 0:
                    self._group_rates[key] = max(total - before[key], 0) / seconds

    # -- rows ---------------------------------------------------------------------------------

    def _broker_rows(self, sample: Sample) -> list[BrokerRow]:
        rows = []
        present = set()
        masters = {b.broker_name: b for b in sample.brokers if b.is_master}
        before = {
            (b.broker_name, b.broker_id): b
            for b in (self.previous.brokers if self.previous is not None else [])
            if b.error is None
        }
        for broker in sample.brokers:
            key = (broker.broker_name, broker.broker_id)
            present.add(key)
            self._seen_brokers[key] = broker.address
            rows.append(
                derive.broker_row(
                    broker,
                    masters.get(broker.broker_name),
                    sample.wall_ms,
                    self._broker_rates.get(key),
                    list(self._broker_history.get(key, ())),
                    before.get(key),
                )
            )
        if sample.cluster_info is not None:
            for key, address in sorted(self._seen_brokers.items()):
                if key not in present:
                    rows.append(
                        BrokerRow(
                            broker_name=key[0],
                            broker_id=key[1],
                            address=address,
                            role="MASTER" if key[1] == 0 else "SLAVE",
                            error="left the route",
                        )
                    )
        return rows

    def _topic_rows(self, sample: Sample) -> list[TopicRow]:
        consume: dict[str, float] = {}
        for (_group, topic), group_rate in self._group_rates.items():
            consume[topic] = consume.get(topic, 0.0) + group_rate
        owner_names = {b.broker_name for b in sample.brokers} | (
            set(sample.cluster_info.cluster_addr_table) if sample.cluster_info else set()
        )
        found: dict[str, TopicRow] = {}
        for broker in derive.masters(sample):
            for topic, config in broker.topics.items():
                row = found.get(topic) or TopicRow(
                    topic=topic, system=is_system_topic(topic, owner_names)
                )
                stats = sample.topic_queues.get((broker.broker_name, topic))
                rate = self._topic_rates.get((broker.broker_name, topic))
                row = attrs.evolve(
                    row,
                    queues=row.queues + config.write_queue_nums,
                    brokers=[*row.brokers, broker.broker_name],
                    in_tps=row.in_tps if rate is None else (row.in_tps or 0.0) + rate,
                    out_tps=consume.get(topic),
                    max_offset=row.max_offset + (derive.max_total(stats.queues) if stats else 0),
                    messages=row.messages + (derive.count(stats.queues) if stats else 0),
                    known=row.known and stats is not None,
                )
                found[topic] = row
        return [found[t] for t in sorted(found)]

    def _group_rows(self, sample: Sample, topics: list[TopicRow]) -> list[GroupRow]:
        t = self.thresholds
        topic_by_name = {row.topic: row for row in topics}
        lags = derive.group_lags(sample)
        rows = []
        keys = set(derive.group_offsets(sample))
        for name, online in sample.group_details.items():
            if online.connection is not None and online.connection.connection_set:
                # A group online that has committed nothing yet still gets its rows.
                keys.update((name, topic) for topic in online.connection.subscription_table)
        for key in sorted(keys):
            group, topic = key
            if names.is_retry_or_dlq_topic(topic):
                continue
            detail = sample.group_details.get(group)
            members = (
                len(detail.connection.connection_set)
                if detail and detail.connection
                else 0
                if detail
                else None
            )
            lag = lags.get(key)
            # A pop group's retries wait in its pop retry topic of this topic.
            pop = detail.pop.get(topic) if detail is not None else None
            lag_history = self._lag_history.setdefault(key, deque(maxlen=t.stall_refreshes + 1))
            if lag is not None:
                lag_history.append(lag)
            rate = self._group_rates.get(key)
            topic_row = topic_by_name.get(topic)
            in_rate = topic_row.in_tps if topic_row else None
            net = (rate or 0.0) - (in_rate or 0.0)
            catch_up = None if not lag else lag / net if net > 0 else math.inf
            history = self._offset_history.get(key, deque())
            still = len(history) > t.stall_refreshes and len(set(history)) == 1
            stalled = bool(lag) and (members == 0 or still)
            growing = len(lag_history) > t.stall_refreshes and all(
                b > a for a, b in zip(lag_history, list(lag_history)[1:], strict=False)
            )
            # Lag that only grows never catches up: that is "growing", not "slow".
            slow = (
                catch_up is not None and math.isfinite(catch_up) and catch_up > t.catch_up_seconds
            )
            status, reason = "ok", ""
            if stalled:
                status = "stalled"
                reason = (
                    "lag and no consumer online"
                    if members == 0
                    else f"lag and no progress for {t.stall_refreshes} refreshes"
                )
            elif slow:
                status, reason = "slow", f"catching up takes over {t.catch_up_seconds:g} s"
            elif growing:
                status, reason = "growing", f"lag grew for {t.stall_refreshes} refreshes"
            rows.append(
                GroupRow(
                    group=group,
                    topic=topic,
                    members=members,
                    consume_tps=rate,
                    lag=lag,
                    lag_latency_s=derive.lag_latency(
                        detail.progress if detail else {}, topic, sample.wall_ms
                    ),
                    catch_up_s=catch_up,
                    retry_depth=(
                        derive.backlog(detail.progress, names.pop_retry_topic(group, topic))
                        if detail is not None and pop is not None
                        else lags.get((group, names.retry_topic(group)))
                    ),
                    dlq_depth=derive.messages(topic_by_name.get(names.dlq_topic(group))),
                    status=status,
                    reason=reason,
                    in_flight=pop.in_flight if pop is not None else None,
                    acked=pop.ack_nums if pop is not None else None,
                )
            )
        return rows

    # -- alerts -------------------------------------------------------------------------------

    def _alerts(
        self, sample: Sample, brokers: list[BrokerRow], groups: list[GroupRow]
    ) -> list[Alert]:
        t = self.thresholds
        active: dict[tuple[str, str], str] = {}
        for address, error in sample.registries.items():
            if error is not None:
                active[("registry down", address)] = error
        for row in brokers:
            subject = f"{row.broker_name}/{row.broker_id} {row.address}"
            if row.error == "left the route":
                active[("broker left the route", subject)] = "no registry lists it any more"
            elif row.error is not None:
                active[("broker not answering", subject)] = row.error
            if (
                row.repl_lag_bytes is not None
                and row.broker_id != 0
                and (
                    row.repl_lag_bytes > t.slave_lag_bytes
                    or (row.repl_lag_seconds or 0.0) > t.slave_lag_seconds
                )
            ):
                active[("slave falling behind", subject)] = (
                    f"{row.repl_lag_bytes} bytes, {row.repl_lag_seconds or 0:.0f} s behind"
                )
            if row.disk_ratio is not None and row.disk_ratio > t.disk_ratio:
                active[("disk over its ratio", subject)] = (
                    f"{row.disk_ratio:.0%} used, threshold {t.disk_ratio:.0%}"
                )
        controller = sample.controller
        if controller is not None and controller.error is not None:
            active[("controller not answering", controller.address)] = controller.error
        horizon = sample.wall_ms - self.thresholds.election_alert_seconds * 1000
        for name, (seen_ms, line) in sorted(self._elections.items()):
            if seen_ms < horizon:
                del self._elections[name]
                continue
            active[("master elected", name)] = line
            # An election is an event, not a condition: it is shown from when it was seen.
            self._alert_since[("master elected", name)] = seen_ms
        for group in groups:
            subject = f"{group.group} on {group.topic}"
            if group.status in ("stalled", "growing", "slow"):
                active[(f"group {group.status}", subject)] = f"lag {group.lag}: {group.reason}"
        depths = {g.group: g.dlq_depth for g in groups}
        masters = derive.masters(sample)
        existing = {
            t for b in masters for t in b.topics if t.startswith(names.DLQ_GROUP_TOPIC_PREFIX)
        }
        for name, depth in sorted(depths.items()):
            if depth is None and masters and names.dlq_topic(name) not in existing:
                # No DLQ yet: its first dead letters are new ones (RocketMQ creates the topic
                # with the first), not a baseline.
                self._dlq_baseline.setdefault(name, 0)
            if depth is None:
                continue
            baseline = self._dlq_baseline.setdefault(name, depth)
            if depth > baseline:
                active[("DLQ got new messages", names.dlq_topic(name))] = (
                    f"{depth - baseline} new since the monitor started ({depth} in all)"
                )
        for key in list(self._alert_since):
            if key not in active:
                del self._alert_since[key]
        alerts = []
        for key, message in sorted(active.items()):
            since = self._alert_since.setdefault(key, sample.wall_ms)
            alerts.append(Alert(kind=key[0], subject=key[1], message=message, since_ms=since))
        return alerts
