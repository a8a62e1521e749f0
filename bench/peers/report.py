"""The comparison's table, its ratios against the issue's targets, and what it writes into the
docs: its dated section, appended to docs/performance-journal.md, and, for a complete run, the
summary between the markers of docs/PERFORMANCE.md."""

from __future__ import annotations

import statistics
import textwrap
from pathlib import Path
from typing import Any

import attrs

from bench.peers.workloads import WORKLOADS, Result

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
#: Today's figures (the summary between the markers is rewritten by each complete run) and the
#: dated record every run is appended to.
PAGE, JOURNAL = "PERFORMANCE.md", "performance-journal.md"
SUMMARY_START, SUMMARY_END = "<!-- compare:summary:start -->", "<!-- compare:summary:end -->"
SECTION = "## Side by side"
#: The rows a run needs, each with every workload, to stand as the page's summary.
COMPLETE_ROWS = (
    "BoltMQ ASYNC_FLUSH", "BoltMQ SYNC_FLUSH", "RocketMQ ASYNC_FLUSH", "RocketMQ SYNC_FLUSH",
    "NATS JetStream", "RabbitMQ", "Redis Streams everysec", "Redis Streams always",
)  # fmt: skip


@attrs.define
class Cell:
    """One workload of one row: medians over its runs."""

    rate: float
    p50_ms: float
    p99_ms: float
    client_cpu: float
    server_cpu: float
    clean: bool
    runs: int

    @classmethod
    def of(cls, results: list[Result], clean: bool) -> Cell:
        """Medians of ``results``; ``clean`` when no run had busy neighbours."""

        def median(name: str) -> float:
            return float(statistics.median(getattr(r, name) for r in results))

        return cls(
            median("rate"), median("p50_ms"), median("p99_ms"), median("client_cpu"),
            median("server_cpu"), clean, len(results),
        )  # fmt: skip

    @property
    def bound(self) -> str:
        """Which side used more CPU over the timed window."""
        return "client" if self.client_cpu >= self.server_cpu else "broker"


@attrs.define
class Row:
    """A system in one setting, with its cells or the error that stopped it."""

    label: str
    system: str
    settings: str
    version: str = ""
    cells: dict[str, Cell] = attrs.Factory(dict)
    #: Workload -> why it has no cell.
    failures: dict[str, str] = attrs.Factory(dict)
    error: str = ""


def _mark(cell: Cell) -> str:
    return "" if cell.clean else "~"


def table_lines(rows: list[Row], workloads: list[str]) -> list[str]:
    """The table in Markdown (readable as plain text too)."""
    head = ["system"]
    for w in workloads:
        head += {
            "a": ["(a) msgs/s", "(a) ack p50/p99 ms"],
            "b": ["(b) msgs/s"],
            "c": ["(c) msgs/s"],
            "d": ["(d) e2e p50/p99 ms @ msgs/s"],
        }[w]
    head += [f"({w}) cpu client/broker" for w in workloads]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        if row.error:
            lines.append(f"| {row.label} | " + f"failed: {row.error} |" + " |" * (len(head) - 2))
            continue
        cells = [row.label]
        for w in workloads:
            cell = row.cells.get(w)
            if cell is None:
                cells += ["failed" if w in row.failures else "-"] * (2 if w == "a" else 1)
                continue
            m = _mark(cell)
            if w == "a":
                cells += [f"{m}{cell.rate:,.0f}", f"{m}{cell.p50_ms:.1f} / {cell.p99_ms:.1f}"]
            elif w == "d":
                cells.append(f"{m}{cell.p50_ms:.1f} / {cell.p99_ms:.1f} @ {cell.rate:,.0f}")
            else:
                cells.append(f"{m}{cell.rate:,.0f}")
        for w in workloads:
            cell = row.cells.get(w)
            cells.append(
                "-" if cell is None
                else f"{cell.client_cpu:.0%} / {cell.server_cpu:.0%} {cell.bound}"
            )  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return lines


#: (BoltMQ row, peer row, workloads, least ratio): the issue's targets on throughput.
TARGETS = [
    ("BoltMQ ASYNC_FLUSH", "RocketMQ ASYNC_FLUSH", "abc", 1.0),
    ("BoltMQ SYNC_FLUSH", "RocketMQ SYNC_FLUSH", "abc", 1.0),
    ("BoltMQ ASYNC_FLUSH", "NATS JetStream", "abc", 1.0),
    ("BoltMQ ASYNC_FLUSH", "RabbitMQ", "abc", 2.0),
    ("BoltMQ ASYNC_FLUSH", "Redis Streams everysec", "ab", 1.0),
    ("BoltMQ SYNC_FLUSH", "RabbitMQ", "ab", 2.0),
]


def ratio_lines(rows: list[Row]) -> list[str]:
    """BoltMQ against each peer as the targets are phrased, each met or not."""
    by_label = {row.label: row for row in rows if not row.error}
    lines = ["Ratios (BoltMQ / peer, msgs/s; `~`: a run had busy neighbours):"]
    for ours, theirs, workloads, least in TARGETS:
        for w in workloads:
            a, b = by_label.get(ours), by_label.get(theirs)
            if a is None or b is None or w not in a.cells or w not in b.cells:
                continue
            ratio = a.cells[w].rate / b.cells[w].rate if b.cells[w].rate else float("inf")
            mark = "" if a.cells[w].clean and b.cells[w].clean else " ~"
            lines.append(
                f"- {ours} / {theirs}, ({w}): {ratio:.2f}x (target >= {least:g}x): "
                f"{'met' if ratio >= least else 'NOT met'}{mark}"
            )  # fmt: skip
    peers = [row for row in by_label.values() if row.system != "boltmq"]
    for ours in ("BoltMQ ASYNC_FLUSH", "BoltMQ SYNC_FLUSH"):
        for w, what in (("a", "ack"), ("d", "e2e")):
            mine = by_label.get(ours)
            if mine is None or w not in mine.cells:
                continue
            lines += _p99_lines(mine, w, what, peers)
    if len(lines) == 1:
        lines.append("- none: the rows a target compares are not all in this run")
    return lines


#: Peers that answer a publish only after their own fsync covers it.
FSYNC_BEFORE_ACK = ("RocketMQ SYNC_FLUSH", "RabbitMQ", "Redis Streams always")


def _p99_lines(mine: Row, w: str, what: str, peers: list[Row]) -> list[str]:
    """The p99 target against the best peer of all; for the SYNC_FLUSH row also, for reading
    alongside, against the best peer that fsyncs before it acknowledges."""
    measured = [p for p in peers if w in p.cells and p.cells[w].p99_ms > 0]
    if not measured:
        return []
    p99 = mine.cells[w].p99_ms
    out = []
    best = min(measured, key=lambda p: p.cells[w].p99_ms)
    limit = 2 * best.cells[w].p99_ms
    out.append(
        f"- {mine.label} ({w}) {what} p99 {p99:.1f} ms; best peer {best.label} "
        f"{best.cells[w].p99_ms:.1f} ms (target <= 2x = {limit:.1f} ms): "
        f"{'met' if p99 <= limit else 'NOT met'}"
    )  # fmt: skip
    durable = [p for p in measured if p.label in FSYNC_BEFORE_ACK]
    if mine.settings.endswith("=SYNC_FLUSH") and durable and best not in durable:
        alike = min(durable, key=lambda p: p.cells[w].p99_ms)
        out.append(
            f"  (like for like, peers that fsync before acknowledging: best {alike.label} "
            f"{alike.cells[w].p99_ms:.1f} ms, 2x = {2 * alike.cells[w].p99_ms:.1f} ms: "
            f"{'within' if p99 <= 2 * alike.cells[w].p99_ms else 'not within'})"
        )  # fmt: skip
    return out


def docs_section(
    rows: list[Row], lines: list[str], notes: list[str], *, command: str, machine: str,
    date: str, load: tuple[tuple[float, ...], tuple[float, ...]], minutes: float,
    args: dict[str, Any], codecs: str, docs: Path = DOCS,
) -> str:  # fmt: skip
    """The text appended to the journal in ``docs``: the section's heading the first time, then
    this run's figures with what they were taken on (``codecs``: `codecs_status` of the run)."""
    path = docs / JOURNAL
    text = path.read_text() if path.exists() else ""
    out: list[str] = []
    if SECTION not in text:
        out += ["", SECTION, ""]
        out += textwrap.wrap(
            "`python -m bench compare` (`./dev bench compare`) runs BoltMQ and its peers on "
            "this machine in one run, every system driven from one asyncio client process "
            "(a child process per run, so its CPU is its own), 1 KiB payloads: (a) 64 "
            "concurrent publishers awaiting each ack; (b) 8 publishers of batches of 32; (c) "
            "consuming a backlog with acks or offset commits; (d) publish-to-receipt latency "
            "at half of (a)'s peak. Each cell is the median of its runs; `~` marks a cell "
            "with a run during which other processes used more than 20% of a core. CPU is "
            "the share of one core the client process and the server's processes used over "
            "the timed window; the larger names the bound side. Only ratios inside one run "
            "compare: the machine is shared.",
            width=95,
        )  # fmt: skip
    out += ["", f"### {date}", ""]
    out += _run_lines(command, machine, args, codecs, minutes)
    busy = [row.label for row in rows for cell in row.cells.values() if not cell.clean]
    out.append(
        f"- Load average (1/5/15 min): {'/'.join(f'{v:.1f}' for v in load[0])} before, "
        f"{'/'.join(f'{v:.1f}' for v in load[1])} after; "
        + (
            f"{len(busy)} cells never got a run without busy neighbours (marked `~`)" if busy
            else "no kept run had other processes above 20% of a core"
        )
    )  # fmt: skip
    for row in rows:
        out.append(f"- {row.label}: {row.version or 'not started'}; {row.settings}")
    out += [f"- {note}" for note in notes]
    out += [f"- {row.label} ({w}) failed: {why}" for row in rows for w, why in row.failures.items()]
    out += ["", *lines, ""]
    return "\n".join(out) + "\n"


def incomplete(rows: list[Row], workloads: list[str], *, quick: bool) -> str:
    """Why this run may not stand as the page's summary, or "" when it may: every row of
    `COMPLETE_ROWS` with a cell for every workload, none failed, and not a smoke run."""
    if quick:
        return "a --quick run"
    missing = [w for w in WORKLOADS if w not in workloads]
    if missing:
        return f"workloads {', '.join(missing)} not run"
    by_label = {row.label: row for row in rows}
    for label in COMPLETE_ROWS:
        # BoltMQ's rows may be labelled by codec path ("BoltMQ ASYNC_FLUSH (compiled)"): the
        # compiled one stands for the label, the path the summary's figures were taken on.
        row = by_label.get(label) or by_label.get(f"{label} (compiled)")
        if row is None:
            return f"no {label} row"
        if row.error:
            return f"{label} failed"
        lacking = [w for w in workloads if w not in row.cells]
        if lacking:
            return f"{label} has no ({lacking[0]})"
    return ""


def summary_block(
    rows: list[Row], lines: list[str], *, command: str, machine: str, date: str,
    args: dict[str, Any], codecs: str,
) -> str:  # fmt: skip
    """The page's summary of this run, to stand between `SUMMARY_START` and `SUMMARY_END`:
    its date, command, machine, codec path and versions, the table and the ratios."""
    out = [f"Latest complete run: **{date}**.", ""]
    out += _run_lines(command, machine, args, codecs, None)
    out += [f"- {row.label}: {row.version}; {row.settings}" for row in rows]
    out += ["", *lines, ""]
    out.append(f"The run's load, notes and reading are under {date} in [{JOURNAL}]({JOURNAL}).")
    return "\n".join(out)


def write_docs(section: str, summary: str | None, docs: Path = DOCS) -> list[str]:
    """Append ``section`` to the journal in ``docs`` and, given a ``summary``, put it between the
    page's markers in place of the one there; a line per file for the progress output. A page
    without both markers, in order, is left alone and the line says so."""
    done = []
    page = docs / PAGE
    text = page.read_text() if summary is not None and page.exists() else ""
    begin, end = text.find(SUMMARY_START), text.find(SUMMARY_END)
    with (docs / JOURNAL).open("a") as out:
        out.write(section)
    done.append(f"appended to docs/{JOURNAL}")
    if summary is None:
        return done
    if begin < 0 or end < begin:
        done.append(f"docs/{PAGE} left alone: it lacks the {SUMMARY_START} and {SUMMARY_END} lines")
        return done
    head, tail = text[: begin + len(SUMMARY_START)], text[end:]
    page.write_text(f"{head}\n{summary.strip()}\n{tail}")
    done.append(f"summary replaced in docs/{PAGE}")
    return done


def codecs_text(status: str) -> str:
    """The codec path as the docs name it: compiled, with its source, or pure and why."""
    return "compiled (`protocol/_speedups.pyx`)" if status == "compiled" else status


_INTERLEAVED = "; the compared rows of a flush mode side by side, their runs in turn"


def _run_lines(
    command: str, machine: str, args: dict[str, Any], codecs: str, minutes: float | None
) -> list[str]:
    took = "" if minutes is None else f"{minutes:.1f} min; "
    return [
        f"- Command: `{command}` ({took}{args['seconds']:g} s runs, backlog "
        f"{args['backlog']:,}, {args['runs']} runs per cell, up to {args['tries']} tries per "
        f"run{_INTERLEAVED if args.get('interleave') else ''})",
        f"- Machine: {machine}",
        f"- BoltMQ's codecs: {codecs_text(codecs)}",
    ]  # fmt: skip
