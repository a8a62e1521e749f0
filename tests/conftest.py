"""Fixtures every test gets.

`boltmq.cli.main` run in-process (the admin verbs' tests) sets the root logger's level for
its command (CRITICAL for an admin verb); a test after it that reads log records with caplog
would see none. Each test gets the root level it started with back."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _root_log_level_restored() -> Iterator[None]:
    root = logging.getLogger()
    level = root.level
    yield
    root.setLevel(level)
