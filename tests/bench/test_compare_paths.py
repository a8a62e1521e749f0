"""bench/compare.py's codec paths: BoltMQ's rows run once per path, each labelled, the pure
ones with BOLTMQ_PURE=1 in the server's and the runs' environments. Not timed: a quick run
(one second per cell) only has to produce both rows."""

from __future__ import annotations

import re

import pytest

from bench import compare
from bench.peers.boltmq import BoltMQServer
from bench.peers.report import Cell, Row
from protocol._codecs import PURE_SWITCH
from tests.compiled import needs_compiled

pytestmark = pytest.mark.timeout(600)


def test_each_path_sets_or_clears_the_pure_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PURE_SWITCH, "1")
    pure, compiled, plain = (BoltMQServer("ASYNC_FLUSH", p) for p in ("pure", "compiled", None))
    try:
        assert pure.row == "BoltMQ ASYNC_FLUSH (pure)"
        assert compiled.row == "BoltMQ ASYNC_FLUSH (compiled)"
        assert plain.row == "BoltMQ ASYNC_FLUSH"
        assert pure.environment()[PURE_SWITCH] == "1"
        assert PURE_SWITCH not in compiled.environment()
        assert plain.environment()[PURE_SWITCH] == "1"  # the caller's environment, as it is
    finally:
        for server in (pure, compiled, plain):
            server.stop()


def test_unknown_paths_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        compare.main(["--systems", "boltmq", "--paths", "jit"])
    assert "choose from compiled, pure" in capsys.readouterr().err


@needs_compiled
def test_a_quick_run_has_a_row_per_path(capsys: pytest.CaptureFixture[str]) -> None:
    status = compare.main(
        ["--systems", "boltmq", "--quick", "--workloads", "a", "--paths", "compiled,pure"]
    )
    out = capsys.readouterr().out
    assert status == 0, out
    for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        for path in ("compiled", "pure"):
            row = next(line for line in out.splitlines() if f"BoltMQ {flush} ({path})" in line)
            assert re.search(r"\| ~?[0-9][0-9,]* \|", row), row  # a rate in (a)'s cell


def test_the_pure_rows_are_read_against_the_compiled_ones() -> None:
    def row(label: str, rates: dict[str, float], clean: bool = True) -> Row:
        cells = {w: Cell(r, 1.0, 2.0, 0.5, 0.5, clean=clean, runs=3) for w, r in rates.items()}
        return Row(label, "boltmq", "", cells=cells)

    rows = [
        row("BoltMQ ASYNC_FLUSH (compiled)", {"a": 30_000, "b": 100_000, "c": 200_000}),
        row("BoltMQ ASYNC_FLUSH (pure)", {"a": 27_000, "b": 79_000, "c": 200_000}),
        row("BoltMQ SYNC_FLUSH (compiled)", {"a": 12_000, "b": 50_000, "c": 100_000}),
        row("BoltMQ SYNC_FLUSH (pure)", {"a": 12_000, "b": 40_000, "c": 79_700}, clean=False),
    ]
    lines = compare.path_ratio_lines(rows, ["compiled", "pure"])
    gap = lines[lines.index("Codec paths (BoltMQ pure / compiled, msgs/s):") + 1 :]
    assert gap == [
        "- BoltMQ ASYNC_FLUSH, (a): 0.90x (target >= 0.8x): met",
        "- BoltMQ ASYNC_FLUSH, (b): 0.79x (target >= 0.8x): NOT met",
        "- BoltMQ ASYNC_FLUSH, (c): 1.00x (target >= 0.8x): met",
        "- BoltMQ SYNC_FLUSH, (a): 1.00x (target >= 0.8x): met ~",
        "- BoltMQ SYNC_FLUSH, (b): 0.80x (target >= 0.8x): met ~",
        "- BoltMQ SYNC_FLUSH, (c): 0.797x (target >= 0.8x): NOT met ~",
    ]
    head = lines.index("Codec paths (BoltMQ pure / compiled, msgs/s):")
    assert lines[head - 1] == "" and lines[head - 2] != ""  # one blank line before it
    # A run of one path has nothing to set beside it.
    assert compare.path_gap_lines(rows[:1] + rows[2:3]) == []
