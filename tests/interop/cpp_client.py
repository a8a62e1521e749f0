"""The official RocketMQ C++ client (PyPI ``rocketmq==0.4.4``, librocketmq behind ctypes).

The wheel bundles librocketmq for Linux only: there it is in the test extra and must load, so
a broken install fails the interop tests instead of skipping them; elsewhere they skip.
"""

from __future__ import annotations

import importlib
import sys

import pytest

rocketmq = (
    importlib.import_module("rocketmq.client")
    if sys.platform == "linux"
    else pytest.importorskip("rocketmq.client", reason="the rocketmq 0.4.4 wheel is Linux only")
)
