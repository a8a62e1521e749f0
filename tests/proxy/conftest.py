"""The gRPC proxy's tests run on asyncio (grpc.aio) through anyio's plugin: pytest-trio's
trio_mode would claim them for trio, so its mark is taken off the tests marked ``anyio``."""

from __future__ import annotations

import pytest

from .helpers import proxy_cluster

__all__ = ["proxy_cluster", "pytest_collection_modifyitems"]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Let anyio's plugin, not pytest-trio, run the tests marked ``anyio``."""
    for item in items:
        if item.get_closest_marker("anyio") is not None:
            item.own_markers[:] = [m for m in item.own_markers if m.name != "trio"]
