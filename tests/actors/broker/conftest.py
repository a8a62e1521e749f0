"""Fixtures of this directory's tests; the helpers they use are in helpers.py."""

from tests.actors.broker.helpers import client, cluster, file_cluster, sql_cluster

__all__ = ["client", "cluster", "file_cluster", "sql_cluster"]
