"""The command-line tests use the client tests' cluster process and names (tests/client)."""

from tests.client.helpers import cluster, unique

__all__ = ["cluster", "unique"]
