"""The snapshot collector: one refresh of the cluster in a bounded number of admin requests.

Per refresh it sends:

- GET_BROKER_CLUSTER_INFO to every registry (its liveness is part of the picture);
- GET_BROKER_RUNTIME_INFO to every broker, masters and slaves;
- GET_ALL_TOPIC_CONFIG, GET_ALL_SUBSCRIPTIONGROUP_CONFIG, GET_ALL_CONSUMER_OFFSET and
  GET_ALL_PRODUCER_INFO to every master;
- in controller mode, CONTROLLER_GET_METADATA_INFO and CONTROLLER_GET_SYNC_STATE_DATA (every
  broker group at once) to the controller;
- at most ``detail_budget`` per-topic or per-group requests (GET_TOPIC_STATS_INFO per topic and
  broker; GET_CONSUMER_CONNECTION_LIST and GET_CONSUME_STATS per group), the least recently
  fetched first, so a big cluster is swept over several refreshes while a small one is
  fetched whole every time. Brokers serve no request with every topic's offsets at once, so
  this budget is what keeps a refresh at 1,000 topics bounded.

Results of the budgeted requests are kept between refreshes with the time each was fetched,
so the model computes rates from each one's own timestamps. A broker that fails is recorded
with its error and the rest of the refresh goes on.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from functools import partial

import attrs
import trio

from client.admin_batch import BrokerReads
from client.instance import MASTER_ID, ClientInstance
from protocol.bodies import (
    BrokerData,
    ClusterInfo,
    ConsumerConnection,
    OffsetWrapper,
    PopConsumeStats,
    ProducerInfo,
    ReplicasInfo,
    TopicConfig,
    TopicOffset,
)

#: Per-topic and per-group requests per refresh by default.
DETAIL_BUDGET = 200
#: Requests in flight at once.
CONCURRENCY = 32
#: Consumers asked for their queues (GET_CONSUMER_RUNNING_INFO) per refresh, drill-down only.
RUNNING_INFO_BUDGET = 16


@attrs.frozen
class TopicQueues:
    """One topic's queues on one broker, as last fetched."""

    fetched: float  # monotonic seconds
    queues: dict[int, TopicOffset]


@attrs.frozen
class GroupDetail:
    """One group's members and per-queue progress, as last fetched."""

    fetched: float
    connection: ConsumerConnection | None
    #: (topic, broker name, queue id) -> offsets and the last consumed message's store time.
    progress: dict[tuple[str, str, int], OffsetWrapper]
    consume_tps: float
    #: A group that pops (RocketMQ 5): topic -> its pop figures summed over the masters.
    pop: dict[str, PopConsumeStats] = attrs.Factory(dict)


@attrs.frozen
class QueueOwners:
    """Which consumer holds each queue of a group, as the consumers themselves said."""

    fetched: float
    #: (topic, broker name, queue id) -> client id.
    owners: dict[tuple[str, str, int], str]
    #: Members that did not answer GET_CONSUMER_RUNNING_INFO (or were over the budget).
    unanswered: frozenset[str]


@attrs.frozen
class BrokerSample:
    """One broker (master or slave) at one refresh."""

    broker_name: str
    broker_id: int
    address: str
    cluster: str
    error: str | None = None
    runtime: dict[str, str] = attrs.Factory(dict)
    topics: dict[str, TopicConfig] = attrs.Factory(dict)
    groups: frozenset[str] = frozenset()
    #: ``topic@group`` -> queue id -> committed offset.
    consumer_offsets: dict[str, dict[int, int]] = attrs.Factory(dict)
    #: Producer group -> connections (GET_ALL_PRODUCER_INFO); None when not known, with why.
    producers: dict[str, list[ProducerInfo]] | None = None
    producers_unknown: str | None = None

    @property
    def is_master(self) -> bool:
        """Broker id 0 is the master of its broker group."""
        return self.broker_id == MASTER_ID


@attrs.frozen
class ControllerSample:
    """Controller mode at one refresh: the controller asked, its leader, and each broker
    group's master, epochs and SyncStateSet; ``error`` set when no controller answered."""

    address: str
    leader: str | None = None
    error: str | None = None
    groups: dict[str, ReplicasInfo] = attrs.Factory(dict)


@attrs.frozen
class Sample:
    """One refresh: registries, brokers, and the budgeted details known so far."""

    monotonic: float
    wall_ms: int
    registries: dict[str, str | None]  # address -> error (None when it answered)
    cluster_info: ClusterInfo | None
    brokers: list[BrokerSample]
    topic_queues: dict[tuple[str, str], TopicQueues]  # (broker name, topic)
    group_details: dict[str, GroupDetail]
    requests: int
    seconds: float
    #: Group -> its queues' owners, for the drill-down's group only.
    queue_owners: dict[str, QueueOwners] = attrs.Factory(dict)
    #: Controller mode: None when no controller is known (not given, none in runtime info).
    controller: ControllerSample | None = None


class Collector:
    """Takes `Sample`s of one cluster through ``instance``; keeps the budgeted details."""

    def __init__(
        self,
        instance: ClientInstance,
        *,
        detail_budget: int = DETAIL_BUDGET,
        timeout: float = 3.0,
        controller_addr: str | None = None,
    ) -> None:
        self.instance = instance
        #: The controller(s) to ask (``host:port;host:port``); when None, the controller
        #: leader a controller-mode broker reports in its runtime info, if any does.
        self.controller_addr = controller_addr
        self.reads = BrokerReads(instance, timeout=timeout)
        self.detail_budget = detail_budget
        self.topic_queues: dict[tuple[str, str], TopicQueues] = {}
        self.group_details: dict[str, GroupDetail] = {}
        #: Keys fetched first at the next refresh whatever their age (a drill-down's subject).
        self.wanted: set[str] = set()
        self.last_cluster_info: ClusterInfo | None = None

    async def sample(self) -> Sample:
        """Refresh once; never raises for a registry or broker that does not answer."""
        started = time.monotonic()
        requests_before = self.reads.requests
        registries: dict[str, str | None] = {}
        infos: list[ClusterInfo] = []

        async def ask_registry(address: str) -> None:
            try:
                infos.append(await self.reads.cluster_info(address))
                registries[address] = None
            except Exception as exc:  # any failure: the registry is shown as down
                registries[address] = _describe(exc)

        await _gather([partial(ask_registry, a) for a in self.instance.registries])
        # With every registry down the brokers last listed are still asked: they may well
        # be serving, and the header shows the registries' state.
        info = _merge(infos) if infos else self.last_cluster_info
        self.last_cluster_info = info
        brokers = await self._sample_brokers(info)
        await self._fetch_details(brokers)
        owners = await self._fetch_owners(brokers)
        controller = await self._sample_controller(info, brokers)
        self._forget_gone(brokers)
        return Sample(
            monotonic=time.monotonic(),
            wall_ms=int(time.time() * 1000),
            registries=dict(sorted(registries.items())),
            cluster_info=info,
            brokers=brokers,
            topic_queues=dict(self.topic_queues),
            group_details=dict(self.group_details),
            requests=self.reads.requests - requests_before,
            seconds=time.monotonic() - started,
            queue_owners=owners,
            controller=controller,
        )

    async def _sample_controller(
        self, info: ClusterInfo | None, brokers: list[BrokerSample]
    ) -> ControllerSample | None:
        """Two requests: the controller's leader, and every broker group's SyncStateSet."""
        # Without --controller: the controller leader a controller-mode broker reports.
        address = self.controller_addr or next(
            (
                b.runtime.get("controllerAddr") or b.runtime["controllerLeaderAddress"]
                for b in brokers
                if b.runtime.get("controllerAddr") or b.runtime.get("controllerLeaderAddress")
            ),
            None,
        )
        if not address:
            return None
        try:
            meta = await self.reads.controller_metadata(address)
            names = sorted(info.broker_addr_table) if info is not None else []
            table = (await self.reads.sync_state_data(address, names)).replicas_info_table
        except Exception as exc:  # shown as the controller's error; the rest goes on
            return ControllerSample(address, error=_describe(exc))
        return ControllerSample(address, meta.controller_leader_address, None, dict(table))

    async def _sample_brokers(self, info: ClusterInfo | None) -> list[BrokerSample]:
        if info is None:
            return []
        cluster_of = {
            name: cluster for cluster, names in info.cluster_addr_table.items() for name in names
        }
        places = [
            (name, broker_id, address, cluster_of.get(name, data.cluster))
            for name, data in sorted(info.broker_addr_table.items())
            for broker_id, address in sorted(data.broker_addrs.items())
        ]
        samples: dict[int, BrokerSample] = {}

        async def one(index: int, name: str, broker_id: int, address: str, cluster: str) -> None:
            try:
                runtime = await self.reads.runtime_info(address)
                if broker_id != MASTER_ID:
                    samples[index] = BrokerSample(
                        name, broker_id, address, cluster, runtime=runtime
                    )
                    return
                topics = await self.reads.all_topic_config(address)
                groups = await self.reads.all_group_config(address)
                offsets = await self.reads.all_consumer_offset(address)
                producers, unknown = await self._producers(address)
            except Exception as exc:  # a broker that fails is shown with its error
                samples[index] = BrokerSample(name, broker_id, address, cluster, _describe(exc))
                return
            samples[index] = BrokerSample(
                name,
                broker_id,
                address,
                cluster,
                None,
                runtime,
                dict(topics.topic_config_table),
                frozenset(groups.subscription_group_table),
                offsets,
                producers,
                unknown,
            )

        await _gather([partial(one, i, *p) for i, p in enumerate(places)])
        return [samples[i] for i in range(len(places))]

    async def _producers(
        self, address: str
    ) -> tuple[dict[str, list[ProducerInfo]] | None, str | None]:
        # A broker that cannot list its producers still has everything else to show.
        try:
            table = await self.reads.all_producer_info(address)
        except Exception as exc:
            return None, _describe(exc)
        if table is None:
            return None, "the broker does not serve GET_ALL_PRODUCER_INFO (RocketMQ 4.x)"
        return table.data, None

    async def _fetch_details(self, brokers: list[BrokerSample]) -> None:
        """Spend the budget on the stalest topic stats and group details."""
        masters = [b for b in brokers if b.is_master and b.error is None]
        jobs: list[tuple[float, int, Callable[[], Awaitable[None]]]] = []
        for broker in masters:
            for topic in broker.topics:
                key = (broker.broker_name, topic)
                known = self.topic_queues.get(key)
                age = -1.0 if topic in self.wanted else known.fetched if known else 0.0
                jobs.append((age, 1, partial(self._fetch_topic, broker, topic)))
        groups = sorted({g for b in masters for g in b.groups} | _offset_groups(masters))
        for group in groups:
            known_group = self.group_details.get(group)
            age = -1.0 if group in self.wanted else known_group.fetched if known_group else 0.0
            cost = 2 * len(masters)  # at most: members and consume stats at each master
            jobs.append((age, cost, partial(self._fetch_group, masters, group)))
        jobs.sort(key=lambda job: job[0])
        chosen: list[Callable[[], Awaitable[None]]] = []
        spent = 0
        for _, cost, job in jobs:
            if spent + cost > self.detail_budget and chosen:
                break
            chosen.append(job)
            spent += cost
        await _gather(chosen)

    async def _fetch_owners(self, brokers: list[BrokerSample]) -> dict[str, QueueOwners]:
        """Ask the online members of the drill-down's group which queues they hold: at most
        RUNNING_INFO_BUDGET of them, through a master (it relays the call to the client)."""
        relay = next((b.address for b in brokers if b.is_master and b.error is None), None)
        result: dict[str, QueueOwners] = {}
        for group in sorted(self.wanted):
            detail = self.group_details.get(group)
            if relay is not None and detail is not None and detail.connection is not None:
                members = sorted(c.client_id for c in detail.connection.connection_set)
                result[group] = await self._owners_of(relay, group, members)
        return result

    async def _owners_of(self, relay: str, group: str, members: list[str]) -> QueueOwners:
        owners: dict[tuple[str, str, int], str] = {}
        unanswered = set(members[RUNNING_INFO_BUDGET:])

        async def ask(client_id: str) -> None:
            try:
                info = await self.reads.consumer_running_info(relay, group, client_id)
            except Exception:  # a pull consumer, a client that does not answer, gone
                unanswered.add(client_id)
                return
            for mq in info.mq_table:
                owners[(mq.topic, mq.broker_name, mq.queue_id)] = client_id

        await _gather([partial(ask, c) for c in members[:RUNNING_INFO_BUDGET]])
        return QueueOwners(time.monotonic(), owners, frozenset(unanswered))

    async def _fetch_topic(self, broker: BrokerSample, topic: str) -> None:
        try:
            table = await self.reads.topic_stats(broker.address, topic)
        except Exception:  # the topic went away between the two requests: next refresh knows
            return
        queues = {mq.queue_id: offset for mq, offset in table.offset_table.items()}
        self.topic_queues[(broker.broker_name, topic)] = TopicQueues(time.monotonic(), queues)

    async def _fetch_group(self, masters: list[BrokerSample], group: str) -> None:
        connection: ConsumerConnection | None = None
        progress: dict[tuple[str, str, int], OffsetWrapper] = {}
        pop: dict[str, PopConsumeStats] = {}
        tps = 0.0
        for broker in masters:
            try:
                if connection is None or not connection.connection_set:
                    connection = await self.reads.consumer_connection(broker.address, group)
                stats = await self.reads.consume_stats(broker.address, group)
            except Exception:  # keep what the other masters said
                continue
            tps += stats.consume_tps
            for mq, wrapper in stats.offset_table.items():
                progress[(mq.topic, mq.broker_name, mq.queue_id)] = wrapper
            for line in stats.pop_stats or ():
                pop[line.topic] = _add_pop(pop.get(line.topic), line)
        self.group_details[group] = GroupDetail(time.monotonic(), connection, progress, tps, pop)

    def _forget_gone(self, brokers: list[BrokerSample]) -> None:
        answered = {b.broker_name: b for b in brokers if b.is_master and b.error is None}
        for key in list(self.topic_queues):
            broker = answered.get(key[0])
            if broker is not None and key[1] not in broker.topics:
                del self.topic_queues[key]
        if answered:
            groups = {g for b in answered.values() for g in b.groups}
            groups |= _offset_groups(list(answered.values()))
            for group in list(self.group_details):
                if group not in groups:
                    del self.group_details[group]


def _offset_groups(brokers: list[BrokerSample]) -> set[str]:
    return {key.split("@", 1)[1] for b in brokers for key in b.consumer_offsets if "@" in key}


def _merge(infos: list[ClusterInfo]) -> ClusterInfo:
    """Registries never talk to each other: a broker known to any of them is in the cluster."""
    brokers: dict[str, BrokerData] = {}
    clusters: dict[str, set[str]] = {}
    for info in infos:
        for name, data in info.broker_addr_table.items():
            known = brokers.get(name)
            if known is None or len(data.broker_addrs) > len(known.broker_addrs):
                brokers[name] = data
        for cluster, names in info.cluster_addr_table.items():
            clusters.setdefault(cluster, set()).update(names)
    return ClusterInfo(
        broker_addr_table=brokers,
        cluster_addr_table={c: sorted(n) for c, n in clusters.items()},
    )


async def _gather(jobs: list[Callable[[], Awaitable[None]]]) -> None:
    limiter = trio.CapacityLimiter(CONCURRENCY)

    async def run(job: Callable[[], Awaitable[None]]) -> None:
        async with limiter:
            await job()

    async with trio.open_nursery() as nursery:
        for job in jobs:
            nursery.start_soon(run, job)


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]


def _add_pop(total: PopConsumeStats | None, line: PopConsumeStats) -> PopConsumeStats:
    """Two masters' pop figures of one topic, summed."""
    if total is None:
        return line
    return PopConsumeStats(
        topic=line.topic, ck_nums=total.ck_nums + line.ck_nums,
        ack_nums=total.ack_nums + line.ack_nums, in_flight=total.in_flight + line.in_flight,
        revive_nums=total.revive_nums + line.revive_nums,
        dlq_put_nums=total.dlq_put_nums + line.dlq_put_nums,
    )  # fmt: skip
