"""Fixtures of the comparison tool's tests: where Apache RocketMQ's release is, when given."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def rocketmq_home() -> Path:
    """The unpacked RocketMQ 4.9.x binary release named by BOLTMQ_ROCKETMQ_HOME; the test is
    skipped, saying so, when the variable is unset."""
    home = os.environ.get("BOLTMQ_ROCKETMQ_HOME")
    if not home:
        pytest.skip("BOLTMQ_ROCKETMQ_HOME is not set (an unpacked RocketMQ 4.9.x binary release)")
    return Path(home).expanduser()
