"""What ``bench compare --write-docs`` writes: every run appended to the journal, and a complete
run's table put between the markers of the performance page, the rest of the page untouched;
and the repository's own two pages still shaped for that writer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.peers.report import (
    COMPLETE_ROWS,
    DOCS,
    JOURNAL,
    PAGE,
    SECTION,
    SUMMARY_END,
    SUMMARY_START,
    Cell,
    Row,
    docs_section,
    incomplete,
    ratio_lines,
    summary_block,
    table_lines,
    write_docs,
)

ARGS: dict[str, Any] = {"seconds": 4.0, "backlog": 200_000, "runs": 3, "tries": 2}
WORKLOADS = ["a", "b", "c", "d"]
PAGE_TEXT = f"""# Performance

Before the summary.

{SUMMARY_START}
Latest complete run: **2000-01-01 00:00 UTC**.
{SUMMARY_END}

## Benchmark by benchmark

After the summary.
"""
JOURNAL_TEXT = f"""# Performance journal

## Remoting round trips

### 2000-01-01

{SECTION}

### 2000-01-02 00:00 UTC

| an older table |
"""


def _rows(rate: float, labels: tuple[str, ...] = COMPLETE_ROWS) -> list[Row]:
    def cell(scale: float) -> Cell:
        return Cell(rate * scale, 1.0, 3.0, 0.5, 0.9, clean=True, runs=3)

    return [
        Row(label, label.split()[0].lower(), "settings", version="1.0",
            cells={w: cell((1 + i / 10) * (1 + j)) for j, w in enumerate(WORKLOADS)})
        for i, label in enumerate(labels)
    ]  # fmt: skip


def _record(docs: Path, rows: list[Row], date: str, workloads: list[str] = WORKLOADS) -> list[str]:
    """What main does with --write-docs, against ``docs``."""
    lines = [*table_lines(rows, workloads), "", *ratio_lines(rows)]
    taken: dict[str, Any] = {
        "command": "python -m bench compare --rocketmq-home DIR --write-docs",
        "machine": "a 2-core test machine", "date": date, "args": ARGS, "codecs": "compiled",
    }  # fmt: skip
    section = docs_section(
        rows, lines, [], load=((0.1, 0.2, 0.3), (1.0, 1.1, 1.2)), minutes=9.5, docs=docs, **taken
    )
    why_not = incomplete(rows, workloads, quick=False)
    return write_docs(section, None if why_not else summary_block(rows, lines, **taken), docs)


def _docs(tmp_path: Path) -> Path:
    (tmp_path / PAGE).write_text(PAGE_TEXT)
    (tmp_path / JOURNAL).write_text(JOURNAL_TEXT)
    return tmp_path


def test_a_complete_run_goes_to_the_journal_and_the_page(tmp_path: Path) -> None:
    docs = _docs(tmp_path)
    done = _record(docs, _rows(10_000), "2026-11-28 12:00 UTC")
    assert done == [f"appended to docs/{JOURNAL}", f"summary replaced in docs/{PAGE}"]

    journal = (docs / JOURNAL).read_text()
    assert journal.startswith(JOURNAL_TEXT)  # appended, nothing before it rewritten
    added = journal[len(JOURNAL_TEXT) :]
    assert SECTION not in added  # the section exists: only the run's own heading is added
    assert "\n### 2026-11-28 12:00 UTC\n" in added
    command = "`python -m bench compare --rocketmq-home DIR --write-docs`"
    assert f"- Command: {command} (9.5 min; 4 s runs, backlog 200,000," in added
    assert "- BoltMQ's codecs: compiled (`protocol/_speedups.pyx`)" in added
    assert "- Load average (1/5/15 min): 0.1/0.2/0.3 before, 1.0/1.1/1.2 after" in added
    assert "| BoltMQ ASYNC_FLUSH | 10,000 | 1.0 / 3.0 | 20,000 | 30,000 |" in added

    page = (docs / PAGE).read_text()
    head, rest = page.split(SUMMARY_START)
    summary, tail = rest.split(SUMMARY_END)
    assert head == PAGE_TEXT.split(SUMMARY_START)[0]
    assert tail == PAGE_TEXT.split(SUMMARY_END)[1]
    assert "2000-01-01" not in summary  # the earlier summary is gone
    assert "Latest complete run: **2026-11-28 12:00 UTC**." in summary
    assert "- Machine: a 2-core test machine" in summary
    assert "- BoltMQ's codecs: compiled (`protocol/_speedups.pyx`)" in summary
    assert "| BoltMQ ASYNC_FLUSH | 10,000 | 1.0 / 3.0 | 20,000 | 30,000 |" in summary
    assert "- BoltMQ ASYNC_FLUSH / RocketMQ ASYNC_FLUSH, (a): 0.83x" in summary
    assert f"[{JOURNAL}]({JOURNAL})" in summary
    assert "Load average" not in summary  # the run's circumstances stay in the journal

    # The next complete run replaces it again: one summary, the newest.
    _record(docs, _rows(20_000), "2026-11-28 13:00 UTC")
    page = (docs / PAGE).read_text()
    assert page.count(SUMMARY_START) == page.count(SUMMARY_END) == 1
    assert "**2026-11-28 13:00 UTC**" in page and "12:00 UTC" not in page
    assert "| BoltMQ ASYNC_FLUSH | 20,000 |" in page
    journal = (docs / JOURNAL).read_text()
    assert journal.index("### 2026-11-28 12:00 UTC") < journal.index("### 2026-11-28 13:00 UTC")


def test_an_incomplete_run_goes_to_the_journal_only(tmp_path: Path) -> None:
    docs = _docs(tmp_path)
    boltmq_only = _rows(10_000, COMPLETE_ROWS[:2])
    assert incomplete(boltmq_only, WORKLOADS, quick=False) == "no RocketMQ ASYNC_FLUSH row"
    assert incomplete(_rows(10_000), ["a", "b"], quick=False) == "workloads c, d not run"
    assert incomplete(_rows(10_000), WORKLOADS, quick=True) == "a --quick run"
    failed = _rows(10_000)
    del failed[2].cells["b"]
    failed[2].failures["b"] = "SERVICE_NOT_AVAILABLE"
    assert incomplete(failed, WORKLOADS, quick=False) == "RocketMQ ASYNC_FLUSH has no (b)"
    assert incomplete(_rows(10_000), WORKLOADS, quick=False) == ""

    done = _record(docs, boltmq_only, "2026-11-28 12:00 UTC")
    assert done == [f"appended to docs/{JOURNAL}"]
    assert (docs / PAGE).read_text() == PAGE_TEXT
    assert "### 2026-11-28 12:00 UTC" in (docs / JOURNAL).read_text()


def test_a_page_without_markers_is_left_alone(tmp_path: Path) -> None:
    docs = tmp_path
    (docs / PAGE).write_text("# Performance\n\nNo markers here.\n")
    done = _record(docs, _rows(10_000), "2026-11-28 12:00 UTC")
    assert done[0] == f"appended to docs/{JOURNAL}"
    assert done[1].startswith(f"docs/{PAGE} left alone: it lacks")
    assert (docs / PAGE).read_text() == "# Performance\n\nNo markers here.\n"
    # A journal without the section gets its heading once, before the first run.
    journal = (docs / JOURNAL).read_text()
    assert journal.count(SECTION) == 1
    assert journal.index(SECTION) < journal.index("### 2026-11-28 12:00 UTC")


def test_the_repository_pages_fit_the_writer() -> None:
    page = (DOCS / PAGE).read_text()
    assert page.count(SUMMARY_START) == page.count(SUMMARY_END) == 1
    assert page.index(SUMMARY_START) < page.index(SUMMARY_END)
    journal = (DOCS / JOURNAL).read_text()
    # Runs are appended at the end, so the side-by-side section must stay the last one.
    last = [line for line in journal.splitlines() if line.startswith("## ")][-1]
    assert last == SECTION


def test_a_run_on_both_codec_paths_counts_as_complete_by_its_compiled_rows() -> None:
    from bench.compare import codecs_line

    by_path = [
        f"{label} ({path})" if label.startswith("BoltMQ") else label
        for label in COMPLETE_ROWS
        for path in (("compiled", "pure") if label.startswith("BoltMQ") else ("",))
    ]
    assert incomplete(_rows(10_000, tuple(by_path)), WORKLOADS, quick=False) == ""
    pure_only = tuple(label for label in by_path if not label.endswith("(compiled)"))
    assert incomplete(_rows(10_000, pure_only), WORKLOADS, quick=False) == (
        "no BoltMQ ASYNC_FLUSH row"
    )
    assert codecs_line(["compiled", "pure"]) == "compiled and pure, as each BoltMQ row's label says"
