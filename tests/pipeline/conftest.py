"""Pipeline tests: one Spark session (local[2]) and one BoltMQ cluster (node processes) for the
whole run; see helpers.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from .helpers import ClusterData, spark_session, start_cluster


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
