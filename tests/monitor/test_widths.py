"""Every view drawn at 80, 120, 160 and 220 columns keeps its names, addresses and units whole.

The snapshot is the model's own, from two samples built by hand: two broker groups (broker-a
with a slave that falls behind and one that does not answer, broker-b on another host), topics
and groups with names of 20-30 characters, producers and consumers. Each table is drawn by a
rich console of a fixed width, as the screen and ``--once`` draw it, and read back as text.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.cells import cell_len
from rich.console import Console, RenderableType

from monitor import views
from monitor.collector import BrokerSample, GroupDetail, Sample, TopicQueues
from monitor.model import Model
from monitor.snapshot import ControllerGroupRow
from protocol.bodies import (
    BrokerData,
    ClusterInfo,
    Connection,
    ConsumerConnection,
    OffsetWrapper,
    ProducerInfo,
    TopicConfig,
    TopicOffset,
)

WIDTHS = (80, 120, 160, 220)
T0 = 1_700_000_000_000
CLUSTER = "production-cluster-east"
#: (broker name, broker id) -> address.
BROKERS = {
    ("broker-a", 0): "127.0.0.1:10911",
    ("broker-a", 1): "192.168.100.201:10911",
    ("broker-a", 2): "192.168.100.202:10911",
    ("broker-b", 0): "192.168.100.200:10911",
}
NOT_ANSWERING = ("broker-a", 2)
#: Topic -> queues on each master.
TOPICS = {
    "OrderSettlementEvents_v2": 4,
    "PaymentReconciliationStream": 8,
    "inventory-adjustments-eu-west": 2,
}
#: Group -> (topic, its consumers' addresses).
GROUPS = {
    "cg_order_settlement_replay": ("OrderSettlementEvents_v2", ["192.168.100.77:48213"]),
    "cg_payment_reconcile_audit": (
        "PaymentReconciliationStream",
        ["192.168.100.78:51002", "10.20.30.40:40112"],
    ),
    "inventory-sync-worker-group": ("inventory-adjustments-eu-west", []),  # stalled
}
PRODUCER_GROUP, PRODUCER_ADDRESS = "pg_order_settlement_gateway", "192.168.100.90:39001"
GIB = 1 << 30
HISTOGRAM = "[<=0ms]:{} [0~10ms]:{} [10~50ms]:{} [50~100ms]:0 [100~200ms]:0 [200~500ms]:0 "
HISTOGRAM += "[500ms~1s]:0 [1~2s]:0 [2~3s]:0 [3~4s]:0 [4~5s]:0 [5~10s]:0 [10s~]:0"


def client_id(address: str) -> str:
    return address.replace(":", "@") + "#2817623"


def sample(n: int) -> Sample:
    """Refresh ``n`` (one a second): every master takes 1,500 messages a second."""
    info = ClusterInfo(
        broker_addr_table={
            name: BrokerData(cluster=CLUSTER, broker_name=name, broker_addrs={
                broker_id: address for (b, broker_id), address in BROKERS.items() if b == name
            })
            for name in ("broker-a", "broker-b")
        },
        cluster_addr_table={CLUSTER: ["broker-a", "broker-b"]},
    )  # fmt: skip
    put = 1_000_000 + 1500 * n
    brokers = []
    for (name, broker_id), address in BROKERS.items():
        if (name, broker_id) == NOT_ANSWERING:
            error = f"timed out after 3.0 s ({address})"
            brokers.append(BrokerSample(name, broker_id, address, CLUSTER, error))
            continue
        runtime = {
            "msgPutTotalTodayNow": str(put), "msgGetTotalTodayNow": str(put // 2),
            "bootTimestamp": str(T0 - 3 * 86400_000), "brokerVersionDesc": "V4_9_8",
            "codecs": "compiled",
            "commitLogDiskRatio": "0.42", "commitLogMinOffset": str(2 * GIB),
            "commitLogMaxOffset": str(14 * GIB + (537 << 20)),
            "earliestMessageTimeStamp": str(T0 - 50 * 3600_000),
            "putMessageDistributeTime": HISTOGRAM.format(900 * n, 95 * n + 1, 5 * n),
            "haSlaveFallBehindSeconds": "12", "haMasterFallBehindBytes": str(96 << 20),
        }  # fmt: skip
        if broker_id != 0:
            brokers.append(BrokerSample(name, broker_id, address, CLUSTER, None, runtime))
            continue
        topics = {
            topic: TopicConfig(topic_name=topic, read_queue_nums=q, write_queue_nums=q)
            for topic, q in TOPICS.items()
        }
        offsets = {
            f"{topic}@{group}": {q: 1000 * n + 10 for q in range(TOPICS[topic])}
            for group, (topic, _) in GROUPS.items()
        }
        producers = {
            PRODUCER_GROUP: [ProducerInfo(client_id=client_id(PRODUCER_ADDRESS),
                                          remote_ip=PRODUCER_ADDRESS, version=413)]
        }  # fmt: skip
        brokers.append(BrokerSample(name, broker_id, address, CLUSTER, None, runtime, topics,
                                    frozenset(GROUPS), offsets, producers))  # fmt: skip
    queues = {
        (name, topic): TopicQueues(
            float(n),
            {q: TopicOffset(min_offset=0, max_offset=123_456 + 2000 * n) for q in range(count)},
        )
        for name in ("broker-a", "broker-b")
        for topic, count in TOPICS.items()
    }
    details = {}
    for group, (topic, addresses) in GROUPS.items():
        connection = ConsumerConnection(connection_set=[
            Connection(client_id=client_id(a), client_addr=a, version=413) for a in addresses
        ])  # fmt: skip
        progress = {
            (topic, name, q): OffsetWrapper(broker_offset=123_456 + 2000 * n,
                                            consumer_offset=1000 * n + 10,
                                            last_timestamp=T0 - 95_000)
            for name in ("broker-a", "broker-b")
            for q in range(TOPICS[topic])
        }  # fmt: skip
        details[group] = GroupDetail(float(n), connection, progress, 0.0)
    return Sample(
        monotonic=float(n), wall_ms=T0 + n * 1000,
        registries={"127.0.0.1:9876": None, "192.168.100.10:9876": None},
        cluster_info=info, brokers=brokers, topic_queues=queues, group_details=details,
        requests=17, seconds=0.04,
    )  # fmt: skip


@pytest.fixture(scope="module")
def model() -> Model:
    model = Model()
    for n in range(3):
        model.update(sample(n))
    return model


def draw(renderable: RenderableType, width: int) -> str:
    console = Console(width=width, record=True, color_system=None, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def tables(model: Model) -> dict[str, tuple[list[Any], list[list[str]]]]:
    """Each table -> (its rows, the names and addresses each row must show whole)."""
    snap = model.snapshot()
    group, (topic, _) = next(iter(GROUPS.items()))
    group_queues = model.group_queues(group, topic)
    topic_queues = model.topic_queues(topic)
    return {
        "brokers": (snap.brokers, [[r.broker_name, r.address] for r in snap.brokers]),
        "topics": (snap.topics, [[r.topic, *r.brokers] for r in snap.topics]),
        "groups": (snap.groups, [[r.group, r.topic] for r in snap.groups]),
        "clients": (snap.clients, [[r.group, r.address] for r in snap.clients]),
        "group queues": (group_queues, [[r.topic, r.broker_name] for r in group_queues]),
        "topic queues": (topic_queues, [[r.broker_name] for r in topic_queues]),
        "controller": (
            CONTROLLER_ROWS,
            [[r.broker_name, r.master_address or "-"] for r in CONTROLLER_ROWS],
        ),
    }


#: Controller mode's rows, as the model makes them from a controller's answer.
CONTROLLER_ROWS = [
    ControllerGroupRow(
        broker_name="broker-a", master_broker_id=2, master_address="192.168.100.202:10911",
        master_epoch=17, sync_state_set=[1, 2, 3], sync_state_set_epoch=42, not_in_sync=[4],
        controller_leader="192.168.100.210:9878",
    ),
    ControllerGroupRow(
        broker_name="broker-b", master_broker_id=None, master_address=None, master_epoch=3,
        sync_state_set=[], sync_state_set_epoch=5, not_in_sync=[1, 2],
        controller_leader="192.168.100.210:9878",
    ),
]  # fmt: skip


def table_rows(text: str) -> list[list[str]]:
    """The cells of each row's first line (a wrapped cell goes on below, first cell blank)."""
    lines = text.splitlines()
    # A table too wide is cropped at the terminal's edge, not cut with `…`: every line of it
    # must reach its right border.
    drawn = [line.rstrip() for line in lines if line[:1] in "┏┃┡│└"]
    assert all(line[-1:] in "┓┃┩│┘" for line in drawn), text
    body = lines[next(i for i, line in enumerate(lines) if "━" in line and "┡" in line) + 1 :]
    rows = []
    for line in body:
        if not line.startswith("│"):
            break
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if cells[0]:
            rows.append(cells)
    return rows


def whole(cell: str, forms: set[str], wrapped: list[str]) -> bool:
    """``cell`` is one of the row's cell texts, or whole words at the start of a wrapped one."""
    if cell in forms:
        return True
    return any(text.split()[: len(cell.split())] == cell.split() for text in wrapped)


def test_the_snapshot_has_what_the_widths_must_keep(model: Model) -> None:
    snap = model.snapshot()
    assert {r.address for r in snap.brokers} == set(BROKERS.values())
    assert {r.topic for r in snap.topics} == set(TOPICS)
    assert {r.group for r in snap.groups} == set(GROUPS)
    assert {r.address for r in snap.clients} >= {PRODUCER_ADDRESS, "10.20.30.40:40112"}
    assert all(r.put_latency and r.repl_lag_bytes is None for r in snap.brokers[:1])
    assert any(r.repl_lag_bytes for r in snap.brokers) and any(r.error for r in snap.brokers)
    assert any(g.status == "stalled" for g in snap.groups)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("view", list(views.COLUMNS))
def test_each_view_keeps_names_addresses_and_units_whole(
    model: Model, view: str, width: int
) -> None:
    rows, names = tables(model)[view]
    columns = views.COLUMNS[view]
    text = draw(views.table(view, rows, columns, give_way=views.GIVE_WAY[view]), width)
    assert max(cell_len(line) for line in text.splitlines()) <= width, text
    assert "…" not in text, text
    drawn = table_rows(text)
    assert len(drawn) == len(rows), text
    for row, cells, row_names in zip(rows, drawn, names, strict=True):
        forms = {c.cell(row) for c in columns} | {c.cell(row, narrow=True) for c in columns}
        wrapped = [c.cell(row) for c in columns if c.wrap]
        # Every cell is a whole cell text (a figure with its unit), never a piece of one.
        assert all(whole(cell, forms, wrapped) for cell in cells if cell), (cells, text)
        for name in row_names:
            assert name in cells or any(name in w.split(", ") for w in wrapped), (name, text)
            assert name in text
    if width >= 160:
        # The figures with a unit that the issue found cut: the store's size, whole.
        for row in rows if view == "brokers" else []:
            assert views.size(row.store_bytes) in text


@pytest.mark.parametrize("width", WIDTHS)
def test_the_full_snapshot_keeps_names_whole(model: Model, width: int) -> None:
    snap = model.snapshot()
    text = draw(views.snapshot_renderable(snap), width)
    assert max(cell_len(line) for line in text.splitlines()) <= width, text
    assert "…" not in text, text
    words = set(text.split())
    for name in [CLUSTER, *TOPICS, *GROUPS, *BROKERS.values(), "127.0.0.1:9876"]:
        assert name in text, (name, text)
    for alert in snap.alerts:
        assert set(alert.subject.split()) <= words, (alert.subject, text)


def test_wider_terminals_show_more_columns(model: Model) -> None:
    def headings(view: str, width: int) -> int:
        rows, _ = tables(model)[view]
        table = views.table(view, rows, views.COLUMNS[view], give_way=views.GIVE_WAY[view])
        return len(table.fit(Console(width=width, file=io.StringIO()), width).columns)

    for view, columns in views.COLUMNS.items():
        counts = [headings(view, width) for width in WIDTHS]
        assert counts == sorted(counts), (view, counts)
        assert counts[-1] == len(columns), view  # 220 columns show every column


def test_every_give_way_step_names_a_column_of_its_view() -> None:
    for view, steps in views.GIVE_WAY.items():
        titles = {column.title for column in views.COLUMNS[view]}
        assert {title for _, title in steps} <= titles, view
        narrowed = {title for step, title in steps if step == views.NARROW}
        assert all(c.narrow is not None for c in views.COLUMNS[view] if c.title in narrowed)


def test_a_dropped_sort_column_is_named_in_the_title(model: Model) -> None:
    rows, _ = tables(model)["groups"]
    lag_latency = [c.title for c in views.GROUP_COLUMNS].index("lag latency")
    table = views.table("groups", rows, views.GROUP_COLUMNS, give_way=views.GROUP_GIVE_WAY,
                        sort=lag_latency)  # fmt: skip
    assert "sorted by lag latency ▼" in draw(table, 80)
    assert "sorted by" not in draw(table, 220) and "lag latency ▼" in draw(table, 220)
