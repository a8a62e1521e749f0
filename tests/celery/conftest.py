"""Celery and taskiq on BoltMQ: one cluster process for the directory, real worker processes."""

from __future__ import annotations

from .helpers import cluster

__all__ = ["cluster"]
