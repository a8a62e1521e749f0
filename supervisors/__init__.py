"""Supervision trees, configuration and the `boltmq` command line.

`supervisors.supervisor` runs children over a trio nursery with one-for-one restarts,
exponential backoff and a restart-intensity cap; `supervisors.config` reads RocketMQ-style
properties files into attrs config classes; `supervisors.cli` is the `boltmq` command.
"""

from supervisors.supervisor import (
    Child,
    ChildFunction,
    ChildSpec,
    ChildState,
    ChildStatistics,
    RestartPolicy,
    Supervisor,
    SupervisorEscalation,
    SupervisorStatistics,
)

__all__ = [
    "Child",
    "ChildFunction",
    "ChildSpec",
    "ChildState",
    "ChildStatistics",
    "RestartPolicy",
    "Supervisor",
    "SupervisorEscalation",
    "SupervisorStatistics",
]
