"""Clusters in one program: `embedded` (a registry and a broker in this process), `launch`
(a spec's whole cluster, a process per node: docs/launcher.md) and the pieces the `boltmq`
commands start their servers with.

    async with embedded() as cluster:      # ephemeral loopback ports, temporary data
        print(cluster.registry_address)

The parts: `embedded` (embedded.py); before a launch, the data directory's lock and the port
check (claim.py); the launcher's record of its nodes (state.py); one node's process or task
under its own supervisor (nodes.py); the launch itself (cluster.py).
"""

from boltmq.launcher.claim import (
    DEFAULT_HOME,
    LOCK_FILE,
    ClusterClaim,
    LaunchRefused,
    check_ports,
    claim,
    lock_data_dir,
    read_state,
)
from boltmq.launcher.cluster import SLAVE_LINK_TIMEOUT, launch
from boltmq.launcher.embedded import EmbeddedCluster, broker_child, embedded
from boltmq.launcher.nodes import NODE_START_TIMEOUT, NODE_STOP_TIMEOUT, READY_LINES
from boltmq.launcher.state import (
    NODE_RESTART_INTENSITY,
    NODE_RESTART_PERIOD,
    STATE_FILE,
    NodeExited,
    NodeState,
    RestartRules,
    RunningCluster,
    kill_left_over,
)

__all__ = [
    "DEFAULT_HOME",
    "LOCK_FILE",
    "NODE_RESTART_INTENSITY",
    "NODE_RESTART_PERIOD",
    "NODE_START_TIMEOUT",
    "NODE_STOP_TIMEOUT",
    "READY_LINES",
    "SLAVE_LINK_TIMEOUT",
    "STATE_FILE",
    "ClusterClaim",
    "EmbeddedCluster",
    "LaunchRefused",
    "NodeExited",
    "NodeState",
    "RestartRules",
    "RunningCluster",
    "broker_child",
    "check_ports",
    "claim",
    "embedded",
    "kill_left_over",
    "launch",
    "lock_data_dir",
    "read_state",
]
