"""The official RocketMQ C++ client (PyPI ``rocketmq==0.4.4``, librocketmq behind ctypes).

The wheel bundles librocketmq for Linux only: there it is in the test extra and must load, so
a broken install fails the interop tests instead of skipping them; elsewhere they skip.
"""

from __future__ import annotations

import importlib
import sys
import time
from typing import Any

import pytest

rocketmq = (
    importlib.import_module("rocketmq.client")
    if sys.platform == "linux"
    else pytest.importorskip("rocketmq.client", reason="the rocketmq 0.4.4 wheel is Linux only")
)


def send_sync_with_route(producer: Any, message: Any, timeout: float = 60.0) -> Any:
    """``producer.send_sync(message)``, asked again while the client reports no route.

    The C++ client gives up on a topic's route when the registry does not answer within its own
    3 s; on a machine busy with other work that happens, and no message was sent then.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            return producer.send_sync(message)
        except Exception as exc:  # the wrapper raises ProducerSendSyncFailed
            if "No route info" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
