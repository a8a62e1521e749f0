"""Pipeline tests: one Spark session (local[2]) and one BoltMQ cluster (node processes) for the
whole run, and broker-r's min offset once retention has moved it; see helpers.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from .helpers import (
    AGED,
    AGED_MESSAGES,
    RETENTION_ROUND,
    ClusterData,
    queue_offsets,
    run,
    spark_session,
    start_cluster,
    wait_for,
)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The run's Spark session, with the boltmq format registered."""
    session = spark_session()
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def data(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterData]:
    """The run's BoltMQ cluster and the messages sent to it."""
    root: Path = tmp_path_factory.mktemp("pipeline-cluster")
    with start_cluster(root) as test_data:
        yield test_data


@pytest.fixture(scope="session")
def aged_min(data: ClusterData) -> int:
    """broker-r's queue min offset once retention is done with it: a round that began after
    the last send has deleted every file but the current one, so it moves no more."""
    found: list[int] = []

    def deleted() -> bool:
        low, high = run(queue_offsets, data.namesrv, AGED)[("broker-r", 0)]
        assert high == AGED_MESSAGES
        found.append(low)
        # A round that ran while the sends went on may have deleted only some files.
        settled = time.monotonic() > data.aged_sent_at + RETENTION_ROUND + 2
        return low > 0 and settled

    wait_for(deleted, "broker-r's retention to delete its oldest commit-log files", timeout=90)
    return found[-1]
