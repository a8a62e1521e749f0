"""The monitor's model and screen with no I/O: samples built by hand, one refresh a second.

Rates, stalled / growing / slow groups, alerts and their start times, drill-downs, and the
screen's keys (filter, sort, drill in and back, a bad view name).
"""

from __future__ import annotations

from monitor.collector import BrokerSample, GroupDetail, Sample, TopicQueues
from monitor.model import Model, Thresholds
from monitor.screen import DOWN, ENTER, ESC, Screen
from protocol import names
from protocol.bodies import (
    BrokerData,
    ClusterInfo,
    Connection,
    ConsumerConnection,
    OffsetWrapper,
    TopicConfig,
    TopicOffset,
)

T0 = 1_700_000_000_000  # wall ms of the first refresh


def sample(
    n: int,
    *,
    max_offset: int,
    consumed: int,
    members: int = 1,
    put_total: int = 0,
    brokers: tuple[str, ...] = ("broker-a",),
    down: tuple[str, ...] = (),
    dlq: int | None = None,
    slave_behind: int | None = None,
) -> Sample:
    """Refresh ``n`` (one a second): topic T on broker-a's 1 queue, group G consuming it."""
    with_slave = slave_behind is not None
    info = ClusterInfo(
        broker_addr_table={
            name: BrokerData(cluster="C", broker_name=name,
                             broker_addrs={0: f"127.0.0.1:{10911 + i}"}
                             | ({1: "127.0.0.1:10999"} if with_slave and i == 0 else {}))
            for i, name in enumerate(brokers)
        },
        cluster_addr_table={"C": list(brokers)},
    )  # fmt: skip
    rows = []
    for i, name in enumerate(brokers):
        address = f"127.0.0.1:{10911 + i}"
        if name in down:
            rows.append(BrokerSample(name, 0, address, "C", "connection refused"))
            continue
        topics = {"T": TopicConfig(topic_name="T", read_queue_nums=1, write_queue_nums=1)}
        if dlq is not None and i == 0:
            topics[names.dlq_topic("G")] = TopicConfig(
                topic_name=names.dlq_topic("G"), write_queue_nums=1
            )
        runtime = {"msgPutTotalTodayNow": str(put_total), "msgGetTotalTodayNow": "0",
                   "bootTimestamp": str(T0 - 60_000), "brokerVersionDesc": "V4_9_8",
                   "commitLogDiskRatio": "0.5"}  # fmt: skip
        rows.append(BrokerSample(name, 0, address, "C", None, runtime, topics,
                                 frozenset({"G"}), {"T@G": {0: consumed}}))  # fmt: skip
        if slave_behind is not None and i == 0:
            rows.append(BrokerSample(name, 1, "127.0.0.1:10999", "C", None,
                                     {"haMasterFallBehindBytes": str(slave_behind)}))  # fmt: skip
    queues = {
        ("broker-a", "T"): TopicQueues(
            float(n), {0: TopicOffset(min_offset=0, max_offset=max_offset)}
        )
    }
    if dlq is not None:
        queues[("broker-a", names.dlq_topic("G"))] = TopicQueues(
            float(n), {0: TopicOffset(max_offset=dlq)}
        )
    connection = ConsumerConnection(connection_set=[
        Connection(client_id=f"10.0.0.{k}@c", client_addr=f"10.0.0.{k}:5000")
        for k in range(members)
    ])  # fmt: skip
    progress = {("T", "broker-a", 0): OffsetWrapper(broker_offset=max_offset,
                                                    consumer_offset=consumed,
                                                    last_timestamp=T0 - 30_000)}  # fmt: skip
    return Sample(
        monotonic=float(n), wall_ms=T0 + n * 1000, registries={"127.0.0.1:9876": None},
        cluster_info=info, brokers=rows, topic_queues=queues,
        group_details={"G": GroupDetail(float(n), connection, progress, 0.0)},
        requests=7, seconds=0.01,
    )  # fmt: skip


def group_row(model: Model):  # type: ignore[no-untyped-def]
    return next(g for g in model.snapshot().groups if (g.group, g.topic) == ("G", "T"))


def test_rates_lag_and_catch_up() -> None:
    model = Model()
    model.update(sample(0, max_offset=1000, consumed=0, put_total=1000))
    snap = model.update(sample(1, max_offset=1100, consumed=300, put_total=1100))
    row = group_row(model)
    assert row.consume_tps == 300.0
    assert row.lag == 800
    assert row.catch_up_s == 800 / (300 - 100)  # lag over the net rate
    assert row.lag_latency_s == 31.0
    assert row.status == "ok"
    assert snap.topics[0].in_tps == 100.0 and snap.topics[0].messages == 1100
    assert snap.brokers[0].in_tps == 100.0 and snap.brokers[0].uptime_s == 61.0
    assert snap.header.in_tps == 100.0 and snap.alerts == []


def test_a_group_with_lag_and_no_progress_stalls_and_its_alert_keeps_its_start() -> None:
    model = Model(Thresholds(stall_refreshes=3))
    for n in range(3):
        model.update(sample(n, max_offset=50, consumed=20))
        assert group_row(model).status == "ok"
    snap = model.update(sample(3, max_offset=50, consumed=20))
    assert group_row(model).status == "stalled"
    assert [(a.kind, a.subject, a.since_ms) for a in snap.alerts] == [
        ("group stalled", "G on T", T0 + 3000)
    ]
    snap = model.update(sample(4, max_offset=50, consumed=20))
    assert snap.alerts[0].since_ms == T0 + 3000  # started then, still on
    snap = model.update(sample(5, max_offset=50, consumed=21))
    assert group_row(model).status == "ok" and snap.alerts == []


def test_no_consumer_with_lag_is_stalled_at_once() -> None:
    model = Model()
    model.update(sample(0, max_offset=50, consumed=20, members=0))
    row = group_row(model)
    assert (row.status, row.members, row.lag) == ("stalled", 0, 30)
    assert row.reason == "lag and no consumer online"


def test_lag_rising_every_refresh_is_growing() -> None:
    model = Model(Thresholds(stall_refreshes=3))
    for n in range(4):
        model.update(sample(n, max_offset=100 + 50 * n, consumed=10 * n))
    row = group_row(model)
    assert row.status == "growing"
    assert row.catch_up_s == float("inf")


def test_slow_when_catching_up_takes_longer_than_the_threshold() -> None:
    model = Model(Thresholds(catch_up_seconds=60))
    model.update(sample(0, max_offset=10_000, consumed=0))
    model.update(sample(1, max_offset=10_000, consumed=10))
    assert group_row(model).status == "slow"  # 9,990 left at 10/s


def test_broker_down_left_the_route_slave_behind_and_dlq() -> None:
    model = Model()
    model.update(sample(0, max_offset=5, consumed=5, brokers=("broker-a", "broker-b"), dlq=2,
                        slave_behind=0))  # fmt: skip
    snap = model.update(sample(1, max_offset=5, consumed=5, brokers=("broker-a", "broker-b"),
                               down=("broker-b",), dlq=3, slave_behind=100 << 20))  # fmt: skip
    kinds = {a.kind: a for a in snap.alerts}
    assert set(kinds) == {"broker not answering", "DLQ got new messages", "slave falling behind"}
    assert kinds["broker not answering"].message == "connection refused"
    assert "1 new" in kinds["DLQ got new messages"].message
    assert snap.header.brokers_down == 1
    snap = model.update(sample(2, max_offset=5, consumed=5, dlq=3, slave_behind=0))
    gone = [b for b in snap.brokers if b.broker_name == "broker-b"]
    assert gone and gone[0].error == "left the route"
    assert {a.kind for a in snap.alerts} == {"broker left the route", "DLQ got new messages"}


def test_drill_downs() -> None:
    model = Model()
    model.update(sample(0, max_offset=50, consumed=20, members=2))
    (queue,) = model.group_queues("G", "T")
    assert (queue.broker_offset, queue.consumer_offset, queue.diff) == (50, 20, 30)
    assert queue.client == "10.0.0.0@c (guess)"  # averagely: the first of the sorted members
    (topic_queue,) = model.topic_queues("T")
    assert (topic_queue.min_offset, topic_queue.broker_offset) == (0, 50)


def test_screen_keys() -> None:
    model = Model()
    model.update(sample(0, max_offset=50, consumed=20))
    screen = Screen(model)
    for key in "3/zzz":
        screen.key(key)
    screen.key(ENTER)
    assert screen.view == "groups" and screen.filter_text == "zzz"
    screen.key(ESC)
    assert screen.filter_text == ""
    screen.key(DOWN)
    screen.key(ENTER)
    assert screen.drill is not None and (screen.drill.name, screen.drill.topic) == ("G", "T")
    screen.key(ESC)
    assert screen.drill is None
    screen.key("s")
    assert screen.sort["groups"] == 0
    for key in ":nope":
        screen.key(key)
    screen.key(ENTER)
    assert "no view 'nope'" in screen.status and screen.view == "groups"
    screen.key("p")
    assert screen.paused
    screen.key("q")
    assert screen.quit
