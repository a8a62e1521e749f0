"""Client tests: one real BoltMQ cluster (registry + broker on loopback, ephemeral ports) runs
in a subprocess for the whole session, so the same tests run on trio and on asyncio.

Every async test is marked ``anyio`` and runs once per backend (the ``anyio_backend``
fixture). The cases marked ``over_both_transports`` also run with the cluster's websocket
addresses as namesrv (``cluster.transport`` says which). pytest-trio's trio_mode would claim
those tests for trio alone, so its mark is taken off them after collection. Every test uses
topics and groups of its own.
"""

from __future__ import annotations

import pytest

from .helpers import anyio_backend, cluster, cluster_process, unique

__all__ = [
    "anyio_backend", "cluster", "cluster_process", "pytest_collection_modifyitems", "unique",
]  # fmt: skip


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Let anyio's plugin, not pytest-trio, run the tests marked ``anyio``."""
    for item in items:
        if item.get_closest_marker("anyio") is not None:
            item.own_markers[:] = [m for m in item.own_markers if m.name != "trio"]
