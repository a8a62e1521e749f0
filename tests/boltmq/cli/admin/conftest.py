"""The admin tests run `boltmq admin` in-process against the session's cluster process."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tests.client.helpers import cluster, cluster_process, unique

__all__ = ["cluster", "cluster_process", "restore_logging", "unique"]


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """`main` configures the root logger; put it back as the other tests expect it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
