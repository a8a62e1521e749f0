"""The kernel: supervision trees, the actor base and configuration files.

`supervisors.supervisor` runs children over a trio nursery with one-for-one restarts,
exponential backoff and a restart-intensity cap; `supervisors.actor` is the actor base (a task
that owns its state and drains a typed mailbox); `supervisors.config` reads RocketMQ-style
properties files into attrs config classes; `supervisors.config_file` writes JSON config files
atomically (tmp + fsync + rename, `.bak` kept).
"""

from supervisors.actor import (
    DEFAULT_CALL_TIMEOUT,
    Actor,
    ActorCrashed,
    ActorError,
    ActorStatistics,
    ActorStatus,
    ActorStopped,
    ActorTimeout,
    MailboxFull,
    Reply,
    Request,
)
from supervisors.config_file import ConfigFileError, load_json_config, save_json_config
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
    "DEFAULT_CALL_TIMEOUT",
    "Actor",
    "ActorCrashed",
    "ActorError",
    "ActorStatistics",
    "ActorStatus",
    "ActorStopped",
    "ActorTimeout",
    "ConfigFileError",
    "MailboxFull",
    "Reply",
    "Request",
    "load_json_config",
    "save_json_config",
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
