"""Interop tests that drive BoltMQ's client beside the C++ one share the client tests' cluster
process, names and event-loop parameter (tests/client/helpers.py)."""

from tests.client.helpers import anyio_backend, cluster, cluster_process, unique

__all__ = ["anyio_backend", "cluster", "cluster_process", "unique"]
