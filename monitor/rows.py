"""Pure functions from a `Sample` to the numbers and rows the model shows (no state, no I/O).

Lag is broker max offset minus committed offset per queue; a part of a group's queues whose
topic offsets have not been fetched yet gives no lag rather than a wrong one.
"""

from __future__ import annotations

from collections.abc import Mapping

from monitor import latency
from monitor.collector import BrokerSample, Sample
from monitor.snapshot import BrokerRow, ClientRow, TopicRow
from protocol.bodies import OffsetWrapper, TopicOffset


def masters(sample: Sample) -> list[BrokerSample]:
    """The masters that answered."""
    return [b for b in sample.brokers if b.is_master and b.error is None]


def runtime_int(table: dict[str, str], key: str) -> int:
    """An integer runtime-info value; 0 when absent or not a number."""
    try:
        return int(table.get(key, "0") or 0)
    except ValueError:
        return 0


def runtime_float(table: dict[str, str], key: str) -> float | None:
    """A float runtime-info value; None when absent or not a number."""
    try:
        return float(table[key])
    except (KeyError, ValueError):
        return None


def max_total(queues: Mapping[int, TopicOffset]) -> int:
    """The queues' max offsets, summed."""
    return sum(q.max_offset for q in queues.values())


def count(queues: Mapping[int, TopicOffset]) -> int:
    """Messages stored in the queues (max minus min offsets), summed."""
    return sum(q.max_offset - q.min_offset for q in queues.values())


def messages(row: TopicRow | None) -> int | None:
    """A topic row's message count, None until known."""
    return row.messages if row is not None and row.known else None


def group_offsets(sample: Sample) -> dict[tuple[str, str], int]:
    """(group, topic) -> its committed offsets summed over every queue."""
    totals: dict[tuple[str, str], int] = {}
    for broker in masters(sample):
        for key, queues in broker.consumer_offsets.items():
            topic, _, group = key.partition("@")
            totals[(group, topic)] = totals.get((group, topic), 0) + sum(queues.values())
    return totals


def group_lags(sample: Sample) -> dict[tuple[str, str], int]:
    """(group, topic) -> its lag, for those whose topic offsets are all known."""
    lags: dict[tuple[str, str], int] = {}
    unknown: set[tuple[str, str]] = set()
    for broker in masters(sample):
        for key, queues in broker.consumer_offsets.items():
            topic, _, group = key.partition("@")
            stats = sample.topic_queues.get((broker.broker_name, topic))
            if stats is None:
                unknown.add((group, topic))
                continue
            lag = 0
            for queue_id, offset in stats.queues.items():
                lag += max(0, offset.max_offset - queues.get(queue_id, offset.min_offset))
            lags[(group, topic)] = lags.get((group, topic), 0) + lag
    for part in unknown:
        lags.pop(part, None)  # a part unknown: no lag rather than a wrong one
    return lags


def backlog(progress: Mapping[tuple[str, str, int], OffsetWrapper], topic: str) -> int:
    """Messages of ``topic`` not yet consumed, from a group's consume stats (a pop group's
    retry topic has rows there before the group first popped from it)."""
    return sum(
        max(0, wrapper.broker_offset - wrapper.consumer_offset)
        for (queue_topic, _, _), wrapper in progress.items()
        if queue_topic == topic
    )


def lag_latency(
    progress: Mapping[tuple[str, str, int], OffsetWrapper], topic: str, now_ms: int
) -> float | None:
    """Age in seconds of the last consumed message of a queue with lag."""
    # The oldest unconsumed message was stored after the last consumed one: this is its age's
    # upper bound, which is what RocketMQ's consume stats carry (lastTimestamp).
    oldest = None
    for (queue_topic, _, _), wrapper in progress.items():
        if queue_topic != topic:
            continue
        behind = wrapper.broker_offset > wrapper.consumer_offset
        stamp = wrapper.last_timestamp
        if behind and stamp > 0:
            oldest = stamp if oldest is None else min(oldest, stamp)
    return None if oldest is None else max(now_ms - oldest, 0) / 1000


def averagely(index: int, count: int, clients: list[str]) -> str | None:
    """The client AllocateMessageQueueAveragely gives queue ``index`` of ``count``."""
    c = len(clients)
    for position, client in enumerate(clients):
        mod = count % c
        if count <= c:
            average = 1
        elif mod > 0 and position < mod:
            average = count // c + 1
        else:
            average = count // c
        start = position * average if mod > 0 and position < mod else position * average + mod
        if start <= index < start + min(average, count - start):
            return client
    return None


def broker_row(
    broker: BrokerSample,
    master: BrokerSample | None,
    now_ms: int,
    rates: tuple[float, float] | None,
    history: list[float],
    previous: BrokerSample | None = None,
) -> BrokerRow:
    """The brokers view's row of one broker (``previous``: the same broker a refresh ago)."""
    role = "MASTER" if broker.is_master else "SLAVE"
    if broker.error is not None:
        return BrokerRow(
            broker_name=broker.broker_name,
            broker_id=broker.broker_id,
            address=broker.address,
            role=role,
            cluster=broker.cluster,
            error=broker.error,
        )
    info = broker.runtime
    key = "putMessageDistributeTime"
    before = previous.runtime.get(key) if previous is not None else None
    put = latency.summarize(info.get(key), before)
    boot = runtime_int(info, "bootTimestamp")
    earliest = runtime_int(info, "earliestMessageTimeStamp")
    repl_bytes: int | None = None
    repl_seconds: float | None = None
    if not broker.is_master:
        repl_bytes = runtime_int(info, "haMasterFallBehindBytes")
        if master is not None and master.error is None:
            repl_seconds = runtime_float(master.runtime, "haSlaveFallBehindSeconds")
    return BrokerRow(
        broker_name=broker.broker_name,
        broker_id=broker.broker_id,
        address=broker.address,
        role=role,
        cluster=broker.cluster,
        version=info.get("brokerVersionDesc"),
        codecs=info.get("codecs"),
        uptime_s=max(now_ms - boot, 0) / 1000 if boot else None,
        in_tps=rates[0] if rates else None,
        out_tps=rates[1] if rates else None,
        sparkline=history,
        store_bytes=runtime_int(info, "commitLogMaxOffset")
        - runtime_int(info, "commitLogMinOffset"),
        disk_ratio=runtime_float(info, "commitLogDiskRatio"),
        retention_hours=max(now_ms - earliest, 0) / 3_600_000 if earliest > 0 else None,
        put_latency=put.text() if put else None,
        put_p99=put.p99 if put else None,
        put_over_10ms=put.over_10ms if put else None,
        repl_lag_bytes=repl_bytes,
        repl_lag_seconds=repl_seconds,
    )


def client_rows(sample: Sample) -> list[ClientRow]:
    """The clients view: producers (every master's GET_ALL_PRODUCER_INFO), then consumers."""
    rows: list[ClientRow] = []
    seen: set[tuple[str, str]] = set()
    for broker in sample.brokers:
        if not broker.is_master or broker.error is not None:
            continue
        if broker.producers is None:
            rows.append(
                ClientRow(
                    role="producer",
                    group="?",
                    client_id="?",
                    address=broker.address,
                    language="-",
                    version=0,
                    note=f"producers unknown on {broker.broker_name}: {broker.producers_unknown}",
                )
            )
            continue
        # A producer heartbeats to every master it sends to: list each connection once.
        for group, infos in sorted(broker.producers.items()):
            for p in sorted(infos, key=lambda p: p.client_id):
                if (group, p.client_id) in seen:
                    continue
                seen.add((group, p.client_id))
                rows.append(
                    ClientRow(
                        role="producer",
                        group=group,
                        client_id=p.client_id,
                        address=p.remote_ip,
                        language=p.language.name,
                        version=p.version,
                    )
                )
    for group, detail in sorted(sample.group_details.items()):
        if detail.connection is None:
            continue
        for c in sorted(detail.connection.connection_set, key=lambda c: c.client_id):
            rows.append(
                ClientRow(
                    role="consumer",
                    group=group,
                    client_id=c.client_id,
                    address=c.client_addr,
                    language=c.language.name,
                    version=c.version,
                )
            )
    return rows
