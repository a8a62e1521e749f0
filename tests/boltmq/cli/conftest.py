"""The command-line tests use the client tests' cluster process and names (tests/client), and
their two broker groups where a test needs two brokers."""

from tests.client.helpers import cluster, cluster_process, unique
from tests.client.two_groups import two_groups

__all__ = ["cluster", "cluster_process", "two_groups", "unique"]
