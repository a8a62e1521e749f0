"""The controller (RocketMQ 5's controller mode, RIP-44): broker ids, masters, epochs,
SyncStateSets, and elections when a master goes silent.

Layers, bottom up: `replicas` (the replicated state, plain, no I/O or clock) and `heartbeat`
(each controller's own liveness table); `journal` commits state changes (at once for one
controller, through Raft in `raft` for several); `handlers` serve the request codes; `service`
runs it all, on its own port or lent to the registry's::

    async with open_controller(ControllerConfig(listen_port=0)) as controller:
        print(controller.address)

Imports only protocol/ and supervisors/; the registry may import it to embed it.
"""

from actors.controller.config import ConfigError, ControllerConfig
from actors.controller.handlers import CONTROLLER_CODES
from actors.controller.heartbeat import BrokerLiveInfo, HeartbeatTable
from actors.controller.replicas import ReplicaTable, Result
from actors.controller.service import (
    Controller,
    ControllerStatistics,
    ElectionRecord,
    open_controller,
)

__all__ = [
    "CONTROLLER_CODES",
    "BrokerLiveInfo",
    "ConfigError",
    "Controller",
    "ControllerConfig",
    "ControllerStatistics",
    "ElectionRecord",
    "HeartbeatTable",
    "ReplicaTable",
    "Result",
    "open_controller",
]
