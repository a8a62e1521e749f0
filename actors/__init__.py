"""Actors: every long-lived piece of state is owned by one task that drains a typed mailbox.

`actors.base` is the kernel (`Actor`, `Request`, `Reply`, the errors and `ActorStatistics`);
the sub-packages hold the registry's, the broker's and the client's actors built on it.
docs/actors.md lists every actor, the state it alone owns and what a restart loses.
"""

from actors.base import (
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

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "Actor",
    "ActorCrashed",
    "ActorError",
    "ActorStatistics",
    "ActorStatus",
    "ActorStopped",
    "ActorTimeout",
    "MailboxFull",
    "Reply",
    "Request",
]
