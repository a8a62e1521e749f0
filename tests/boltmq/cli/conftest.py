"""The command-line tests use the client tests' cluster process and names (tests/client)."""

from tests.client.helpers import cluster, cluster_process, unique

__all__ = ["cluster", "cluster_process", "unique"]
