"""The views as rich renderables: header, the four tables, drill-downs, controller mode's
groups (under the brokers) and the alerts panel.

Each view is a list of `Column`s over its row type; the screen and ``--once`` use the same
tables. Sorting and filtering work on the columns' values, so they are plain functions here.

Each view also has its give-way list: the steps, in order, by which it fits a narrower terminal
(a column narrowed to its short form, or dropped). A table takes them one by one, at the width
rich gives it, until every cell shows whole; names, addresses and figures with a unit are never
cut, because a `broker…` or a `12.5 M…` reads as a different thing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import attrs
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from monitor.snapshot import (
    Alert,
    BrokerRow,
    ClientRow,
    ControllerGroupRow,
    GroupRow,
    Header,
    QueueRow,
    Snapshot,
    TopicRow,
)

R = TypeVar("R")
VIEWS = ("brokers", "topics", "groups", "clients")
_SPARKS = "▁▂▃▄▅▆▇█"


#: A give-way step: a column narrowed to its short form, or dropped.
NARROW, DROP = "narrow", "drop"
Step = tuple[str, str]


@attrs.frozen
class Column(Generic[R]):
    """A column: its title, the value it sorts by and the text it shows."""

    title: str
    value: Callable[[R], Any]
    text: Callable[[R], str] | None = None
    justify: str = "right"
    #: The same figure in fewer characters, shown once the view's give-way list narrows it.
    narrow: Callable[[R], str] | None = None
    #: Free text or a list of names: wraps between words rather than pushing columns out.
    wrap: bool = False

    def cell(self, row: R, *, narrow: bool = False) -> str:
        """The cell's text (its short form if ``narrow`` and it has one)."""
        if narrow and self.narrow is not None:
            return self.narrow(row)
        return self.text(row) if self.text is not None else _plain(self.value(row))


def rate(value: float | None) -> str:
    """Messages per second."""
    return "-" if value is None else f"{value:,.1f}"


def count(value: int | None) -> str:
    """A count with thousands separators."""
    return "-" if value is None else f"{value:,}"


def seconds(value: float | None) -> str:
    """A duration: 42s, 7m05s, 3h12m, 2d04h; never for infinity."""
    if value is None:
        return "-"
    if math.isinf(value):
        return "never"
    s = int(value)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def size(value: int | None) -> str:
    """Bytes in KiB, MiB, GiB."""
    if value is None:
        return "-"
    amount = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if amount < 1024 or unit == "TiB":
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return str(value)


def sparkline(points: Sequence[float], width: int = 20) -> str:
    """Block characters scaled to the highest point; more points than ``width`` are averaged
    in runs, so a minute of refreshes fits."""
    if not points:
        return ""
    if len(points) > width:
        run = -(-len(points) // width)
        points = [
            sum(points[i : i + run]) / len(points[i : i + run]) for i in range(0, len(points), run)
        ]
    top = max(points)
    if top <= 0:
        return _SPARKS[0] * len(points)
    return "".join(_SPARKS[min(int(p / top * (len(_SPARKS) - 1) + 0.5), 7)] for p in points)


def _codecs(path: str | None) -> str:
    # "compiled" or "pure"; the reason after "pure" is too long for a cell.
    return "-" if not path else path.split(" ", 1)[0]


BROKER_COLUMNS: list[Column[BrokerRow]] = [
    Column("broker", lambda r: r.broker_name, justify="left"),
    Column("id", lambda r: r.broker_id),
    Column("role", lambda r: r.role, justify="left"),
    Column("address", lambda r: r.address, justify="left"),
    Column("version", lambda r: r.version or "", justify="left"),
    # "pure": the broker runs without its compiled hot paths (the reason is in its runtime
    # info's codecs, `boltmq admin brokerStatus`, and in its start line).
    Column("codecs", lambda r: r.codecs or "", lambda r: _codecs(r.codecs), justify="left"),
    Column("uptime", lambda r: r.uptime_s or 0, lambda r: seconds(r.uptime_s)),
    Column("in/s", lambda r: r.in_tps or 0, lambda r: rate(r.in_tps)),
    Column("out/s", lambda r: r.out_tps or 0, lambda r: rate(r.out_tps)),
    Column(
        "in, last minute",
        lambda r: sum(r.sparkline),
        lambda r: sparkline(r.sparkline),
        "left",
        narrow=lambda r: sparkline(r.sparkline, width=10),
    ),
    Column("store", lambda r: r.store_bytes or 0, lambda r: size(r.store_bytes)),
    Column(
        "disk",
        lambda r: r.disk_ratio or 0,
        lambda r: "-" if r.disk_ratio is None else f"{r.disk_ratio:.0%}",
    ),
    Column(
        "retention",
        lambda r: r.retention_hours or 0,
        lambda r: "-" if r.retention_hours is None else f"{r.retention_hours:.1f}h",
    ),
    Column(
        "put latency",
        lambda r: r.put_over_10ms or 0,
        lambda r: r.put_latency or "-",
        narrow=lambda r: "-" if r.put_over_10ms is None else f"{r.put_over_10ms:.1%} ≥10ms",
    ),
    Column(
        "repl lag",
        lambda r: r.repl_lag_bytes or 0,
        lambda r: (
            ""
            if r.repl_lag_bytes is None
            else f"{size(r.repl_lag_bytes)} {seconds(r.repl_lag_seconds)}"
        ),
    ),
    Column("error", lambda r: r.error or "", lambda r: r.error or "", "left", wrap=True),
]
#: Broker, role, address, store and error always show: they say which broker it is, where, and
#: whether it answers. The trend and the histogram go first, then the slower-moving figures.
BROKER_GIVE_WAY: tuple[Step, ...] = (
    (NARROW, "in, last minute"),  # 10 blocks instead of 20
    (NARROW, "put latency"),  # the share of puts at 10 ms or more, not the p99 bucket
    (DROP, "in, last minute"),
    (DROP, "put latency"),
    (DROP, "retention"),
    (DROP, "version"),
    (DROP, "codecs"),
    (DROP, "uptime"),
    (DROP, "id"),  # the role says the same for a master
    (DROP, "disk"),
    (DROP, "repl lag"),
    (DROP, "out/s"),
    (DROP, "in/s"),
)

TOPIC_COLUMNS: list[Column[TopicRow]] = [
    Column("topic", lambda r: r.topic, justify="left"),
    Column("queues", lambda r: r.queues),
    Column("in/s", lambda r: r.in_tps or 0, lambda r: rate(r.in_tps)),
    Column("out/s", lambda r: r.out_tps or 0, lambda r: rate(r.out_tps)),
    Column(
        "max offsets", lambda r: r.max_offset, lambda r: count(r.max_offset) if r.known else "…"
    ),
    Column("messages", lambda r: r.messages, lambda r: count(r.messages) if r.known else "…"),
    Column("brokers", lambda r: ", ".join(r.brokers), justify="left", wrap=True),
]
#: Topic, messages and brokers always show.
TOPIC_GIVE_WAY: tuple[Step, ...] = (
    (DROP, "max offsets"),  # messages is the figure people read; max offsets is its sum's cousin
    (DROP, "queues"),
    (DROP, "out/s"),
    (DROP, "in/s"),
)

GROUP_COLUMNS: list[Column[GroupRow]] = [
    Column("group", lambda r: r.group, justify="left"),
    Column("topic", lambda r: r.topic, justify="left"),
    Column("members", lambda r: r.members or 0, lambda r: count(r.members)),
    Column("consume/s", lambda r: r.consume_tps or 0, lambda r: rate(r.consume_tps)),
    Column("lag", lambda r: r.lag or 0, lambda r: count(r.lag)),
    Column("lag latency", lambda r: r.lag_latency_s or 0, lambda r: seconds(r.lag_latency_s)),
    Column("catch up", lambda r: r.catch_up_s or 0, lambda r: seconds(r.catch_up_s)),
    Column("retry", lambda r: r.retry_depth or 0, lambda r: count(r.retry_depth)),
    Column("dlq", lambda r: r.dlq_depth or 0, lambda r: count(r.dlq_depth)),
    # A pop group's (RocketMQ 5); "-" for a group that pulls.
    Column("in flight", lambda r: r.in_flight or 0, lambda r: count(r.in_flight)),
    Column("acked", lambda r: r.acked or 0, lambda r: count(r.acked)),
    Column("status", lambda r: r.status, justify="left"),
]
#: Group, topic and lag always show. Status goes last of all, and can go: the row's colour
#: still says it (red stalled or slow, yellow growing).
GROUP_GIVE_WAY: tuple[Step, ...] = (
    (DROP, "acked"),
    (DROP, "in flight"),
    (DROP, "lag latency"),
    (DROP, "catch up"),
    (DROP, "retry"),
    (DROP, "dlq"),
    (DROP, "members"),
    (DROP, "consume/s"),
    (DROP, "status"),
)

CLIENT_COLUMNS: list[Column[ClientRow]] = [
    Column("role", lambda r: r.role, justify="left"),
    Column("group", lambda r: r.group, justify="left"),
    Column("client id", lambda r: r.client_id, justify="left"),
    Column("address", lambda r: r.address, justify="left"),
    Column("language", lambda r: r.language, justify="left"),
    Column("version", lambda r: r.version, lambda r: str(r.version) if r.version else "-"),
    Column("note", lambda r: r.note or "", justify="left", wrap=True),
]
#: Role, group and address always show.
CLIENT_GIVE_WAY: tuple[Step, ...] = (
    (DROP, "language"),
    (DROP, "version"),
    (DROP, "client id"),  # the address tells the connections apart
    (DROP, "note"),
)

GROUP_QUEUE_COLUMNS: list[Column[QueueRow]] = [
    Column("topic", lambda r: r.topic, justify="left"),
    Column("broker", lambda r: r.broker_name, justify="left"),
    Column("queue", lambda r: r.queue_id),
    Column("broker offset", lambda r: r.broker_offset or 0, lambda r: count(r.broker_offset)),
    Column("consumer offset", lambda r: r.consumer_offset or 0, lambda r: count(r.consumer_offset)),
    Column("diff", lambda r: r.diff or 0, lambda r: count(r.diff)),
    Column("client", lambda r: r.client or "", lambda r: r.client or "-", "left"),
]
#: Topic, broker, queue and diff always show.
GROUP_QUEUE_GIVE_WAY: tuple[Step, ...] = (
    (DROP, "broker offset"),
    (DROP, "consumer offset"),
    (DROP, "client"),
)

TOPIC_QUEUE_COLUMNS: list[Column[QueueRow]] = [
    Column("broker", lambda r: r.broker_name, justify="left"),
    Column("queue", lambda r: r.queue_id),
    Column("min offset", lambda r: r.min_offset or 0, lambda r: count(r.min_offset)),
    Column("max offset", lambda r: r.broker_offset or 0, lambda r: count(r.broker_offset)),
    Column("messages", lambda r: r.diff or 0, lambda r: count(r.diff)),
    Column(
        "last stored",
        lambda r: r.last_update_ms or 0,
        lambda r: _clock(r.last_update_ms) if r.last_update_ms else "-",
    ),
]
#: Broker, queue and messages always show.
TOPIC_QUEUE_GIVE_WAY: tuple[Step, ...] = (
    (DROP, "last stored"),
    (DROP, "min offset"),
    (DROP, "max offset"),
)

CONTROLLER_COLUMNS: list[Column[ControllerGroupRow]] = [
    Column("broker group", lambda r: r.broker_name, justify="left"),
    Column(
        "master", lambda r: r.master_broker_id or 0, lambda r: _plain_or_dash(r.master_broker_id)
    ),
    Column("master address", lambda r: r.master_address or "-", justify="left"),
    Column("epoch", lambda r: r.master_epoch or 0, lambda r: _plain_or_dash(r.master_epoch)),
    Column(
        "SyncStateSet",
        lambda r: len(r.sync_state_set),
        lambda r: "{" + ", ".join(map(str, r.sync_state_set)) + "}",
        "left",
    ),
    Column(
        "set epoch",
        lambda r: r.sync_state_set_epoch or 0,
        lambda r: _plain_or_dash(r.sync_state_set_epoch),
    ),
    Column(
        "not in sync", lambda r: len(r.not_in_sync), lambda r: ", ".join(map(str, r.not_in_sync))
    ),
    Column("controller leader", lambda r: r.controller_leader or "", justify="left"),
    Column("error", lambda r: r.error or "", lambda r: r.error or "", "left", wrap=True),
]
#: Group, master and its address, epoch and SyncStateSet always show.
CONTROLLER_GIVE_WAY: tuple[Step, ...] = (
    (DROP, "controller leader"),
    (DROP, "not in sync"),
    (DROP, "set epoch"),
)

COLUMNS: dict[str, list[Any]] = {
    "brokers": BROKER_COLUMNS,
    "topics": TOPIC_COLUMNS,
    "groups": GROUP_COLUMNS,
    "clients": CLIENT_COLUMNS,
    "group queues": GROUP_QUEUE_COLUMNS,
    "topic queues": TOPIC_QUEUE_COLUMNS,
    "controller": CONTROLLER_COLUMNS,
}
GIVE_WAY: dict[str, tuple[Step, ...]] = {
    "brokers": BROKER_GIVE_WAY,
    "topics": TOPIC_GIVE_WAY,
    "groups": GROUP_GIVE_WAY,
    "clients": CLIENT_GIVE_WAY,
    "group queues": GROUP_QUEUE_GIVE_WAY,
    "topic queues": TOPIC_QUEUE_GIVE_WAY,
    "controller": CONTROLLER_GIVE_WAY,
}


def rows_of(snapshot: Snapshot, view: str) -> list[Any]:
    """The rows of one of the four views."""
    rows: list[Any] = getattr(snapshot, view)
    return rows


def arrange(
    rows: Sequence[R], columns: Sequence[Column[R]], *, text: str = "", sort: int | None = None
) -> list[R]:
    """``rows`` whose cells contain ``text`` (any case), sorted by column ``sort`` (descending
    for numbers, ascending for text)."""
    needle = text.lower()
    kept = [r for r in rows if not needle or any(needle in c.cell(r).lower() for c in columns)]
    if sort is None:
        return kept
    column = columns[sort % len(columns)]
    numeric = all(isinstance(column.value(r), int | float) for r in kept)
    return sorted(kept, key=column.value, reverse=numeric)


def table(
    title: str,
    rows: Sequence[R],
    columns: Sequence[Column[R]],
    *,
    give_way: Sequence[Step] = (),
    sort: int | None = None,
    selected: int | None = None,
    limit: int | None = None,
) -> FittedTable[R]:
    """A table of ``rows`` that fits the width it is drawn at by taking ``give_way``'s steps;
    red, yellow and grey rows per their state."""
    return FittedTable(title, rows, columns, give_way, sort=sort, selected=selected, limit=limit)


@attrs.frozen
class FittedTable(Generic[R]):
    """A view's table, laid out when rich draws it: at the width it is given, it takes its
    give-way steps in order until the narrowest it can be with every cell whole fits."""

    title: str
    rows: Sequence[R]
    columns: Sequence[Column[R]]
    give_way: Sequence[Step] = ()
    sort: int | None = None
    selected: int | None = None
    limit: int | None = None

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.fit(console, options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.fit(console, options.max_width))

    def fit(self, console: Console, width: int) -> Table:
        """The table with the fewest give-way steps taken that fits ``width`` columns (all of
        them taken when even that does not fit)."""
        narrowed: set[str] = set()
        dropped: set[str] = set()
        grid = self.build(narrowed, dropped)
        for step, title in self.give_way:
            if _fits(console, grid, width):
                return grid
            (narrowed if step == NARROW else dropped).add(title)
            grid = self.build(narrowed, dropped)
        if _fits(console, grid, width):
            return grid
        # Narrower than the view can be: rich shares the cut among the columns (with `…`),
        # which beats a table cropped at the terminal's edge.
        return self.build(narrowed, dropped, whole=False)

    def build(self, narrowed: set[str], dropped: set[str], *, whole: bool = True) -> Table:
        """The table with the ``narrowed`` columns in their short form, without ``dropped``
        (``whole``: no cell of a column that does not wrap narrower than its text)."""
        title = self.title
        sorted_index = None if self.sort is None else self.sort % len(self.columns)
        if sorted_index is not None and self.columns[sorted_index].title in dropped:
            title += f"  sorted by {self.columns[sorted_index].title} ▼"
        grid = Table(title=title, title_justify="left", expand=False, pad_edge=False)
        shown = self.rows if self.limit is None else self.rows[: self.limit]
        cells: list[list[str]] = []
        for index, column in enumerate(self.columns):
            if column.title in dropped:
                continue
            texts = [column.cell(row, narrow=column.title in narrowed) for row in shown]
            heading = column.title + (" ▼" if index == sorted_index else "")
            # A column that may not wrap is as wide as its widest cell: rich then counts it whole
            # in the table's narrowest measure, and a table that fits never cuts it.
            widest = max(cell_len(text) for text in [heading, *texts])
            grid.add_column(
                heading,
                justify=column.justify,  # type: ignore[arg-type]
                no_wrap=not column.wrap,
                overflow="fold" if column.wrap else "ellipsis",
                min_width=widest if whole and not column.wrap else None,
            )
            cells.append(texts)
        for index, row in enumerate(shown):
            style = _row_style(row)
            if index == self.selected:
                style = f"{style} reverse".strip()
            grid.add_row(*(texts[index] for texts in cells), style=style or None)
        if self.limit is not None and len(self.rows) > self.limit:
            grid.caption = f"{len(self.rows) - self.limit} more rows: / to filter"
        return grid


def header(head: Header, *, paused: bool = False, status: str = "") -> Text:
    """Registries and liveness, clusters, brokers, in/out rates and alerts."""
    line = Text()
    line.append("BoltMQ monitor  ", style="bold")
    for address, error in head.registries.items():
        line.append(f"registry {address} ")
        line.append(
            "up" if error is None else "DOWN", style="green" if error is None else "bold red"
        )
        line.append("  ")
    line.append(f"clusters {','.join(head.clusters) or '-'}  brokers {head.brokers}")
    if head.brokers_down:
        line.append(f" ({head.brokers_down} not answering)", style="bold red")
    line.append(f"  in {head.in_tps:,.1f}/s  out {head.out_tps:,.1f}/s  ")
    line.append(f"alerts {head.alerts}", style="bold red" if head.alerts else "green")
    line.append(
        f"\n{_clock(head.wall_ms)}  refresh {head.refresh_seconds * 1000:.0f} ms, "
        f"{head.requests} requests",
        style="dim",
    )
    if paused:
        line.append("  PAUSED", style="bold yellow")
    if status:
        line.append(f"  {status}", style="yellow")
    return line


def alerts_panel(alerts: Sequence[Alert]) -> RenderableType:
    """The active alerts, each with when it started."""
    if not alerts:
        return Text("no alerts", style="green")
    lines = Table.grid(padding=(0, 2))
    lines.add_column(no_wrap=True)
    lines.add_column(no_wrap=True)
    # Subject and message in one cell that wraps between words: a narrow terminal folds the
    # message under the subject rather than cutting the broker, group or address it names.
    lines.add_column(ratio=1)
    for alert in alerts:
        lines.add_row(
            Text(_clock(alert.since_ms), style="dim"),
            Text(alert.kind, style="bold red"),
            f"{alert.subject}  {alert.message}",
        )
    return Panel(lines, title=f"alerts ({len(alerts)})", title_align="left", border_style="red")


def snapshot_renderable(snapshot: Snapshot) -> RenderableType:
    """Every view one after the other (``--once``)."""
    parts: list[RenderableType] = [header(snapshot.header)]
    for view in VIEWS:
        parts.append(table(view, rows_of(snapshot, view), COLUMNS[view], give_way=GIVE_WAY[view]))
        if view == "brokers" and snapshot.controller_groups:
            parts.append(controller_table(snapshot.controller_groups))
    parts.append(alerts_panel(snapshot.alerts))
    return Group(*parts)


def controller_table(rows: Sequence[ControllerGroupRow]) -> RenderableType:
    """Controller mode's broker groups: master, epochs, SyncStateSet, controller leader."""
    return table("controller", rows, CONTROLLER_COLUMNS, give_way=CONTROLLER_GIVE_WAY)


def _plain_or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def _fits(console: Console, grid: Table, width: int) -> bool:
    """Whether ``grid`` at its narrowest (wrapping what may wrap) is at most ``width`` wide."""
    # Rich's own measure of the table; Measurement.get would clamp it to the width, hiding
    # by how much it is over.
    measure = grid.__rich_measure__(console, console.options.update_width(width))
    return measure.minimum <= width


def _row_style(row: object) -> str:
    if isinstance(row, BrokerRow) and row.error is not None:
        return "dim"
    if isinstance(row, GroupRow):
        return {"stalled": "red", "slow": "red", "growing": "yellow"}.get(row.status, "")
    return ""


def _plain(value: object) -> str:
    return "" if value is None else str(value)


def _clock(wall_ms: int) -> str:
    return time.strftime("%H:%M:%S", time.localtime(wall_ms / 1000))
