"""The comparison's ratio lines: each target met or not, and the SYNC_FLUSH p99 read also
against the peers that fsync before they acknowledge."""

from __future__ import annotations

from bench.peers.report import Cell, Row, ratio_lines


def _row(label: str, system: str, settings: str, rate: float, p99: float) -> Row:
    cell = Cell(rate, 1.0, p99, 0.5, 0.5, clean=True, runs=1)
    return Row(label, system, settings, cells={"a": cell})


def test_targets_and_p99_lines() -> None:
    rows = [
        _row("BoltMQ ASYNC_FLUSH", "boltmq", "flushDiskType=ASYNC_FLUSH", 30_000, 5.0),
        _row("BoltMQ SYNC_FLUSH", "boltmq", "flushDiskType=SYNC_FLUSH", 20_000, 9.0),
        _row("NATS JetStream", "nats", "file storage", 40_000, 3.0),
        _row("RabbitMQ", "rabbitmq", "durable", 5_000, 30.0),
        _row("Redis Streams always", "redis", "appendfsync always", 25_000, 4.0),
    ]
    lines = ratio_lines(rows)
    assert "- BoltMQ ASYNC_FLUSH / NATS JetStream, (a): 0.75x (target >= 1x): NOT met" in lines
    assert "- BoltMQ ASYNC_FLUSH / RabbitMQ, (a): 6.00x (target >= 2x): met" in lines
    assert "- BoltMQ SYNC_FLUSH / RabbitMQ, (a): 4.00x (target >= 2x): met" in lines
    assert any(
        line.startswith("- BoltMQ ASYNC_FLUSH (a) ack p99 5.0 ms; best peer NATS JetStream")
        and line.endswith(": met") for line in lines
    )  # fmt: skip
    sync = lines.index(
        "- BoltMQ SYNC_FLUSH (a) ack p99 9.0 ms; best peer NATS JetStream 3.0 ms "
        "(target <= 2x = 6.0 ms): NOT met"
    )  # fmt: skip
    # The like-for-like reading follows the strict line and never replaces it.
    assert lines[sync + 1] == (
        "  (like for like, peers that fsync before acknowledging: best Redis Streams always "
        "4.0 ms, 2x = 8.0 ms: not within)"
    )  # fmt: skip
    # The ASYNC_FLUSH row has no like-for-like line: only the SYNC_FLUSH row's p99 has one.
    assert sum("like for like" in line for line in lines) == 1


def test_no_rows_to_compare() -> None:
    lines = ratio_lines([_row("RabbitMQ", "rabbitmq", "durable", 5_000, 30.0)])
    assert lines[1] == "- none: the rows a target compares are not all in this run"
