"""LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42): orderly consumers' queue locks.

The locks themselves are the `RebalanceLockManager` actor's (`actors.broker.tables.locks`):
a lock is a call (the answer is the set it granted), an unlock a cast (its answer does not
depend on the release).
"""

from __future__ import annotations

from actors.broker.tables.groups import SubscriptionGroupManager
from actors.broker.tables.locks import LockBatch, RebalanceLockManager, UnlockBatch
from protocol.bodies import (
    BodyError,
    LockBatchRequestBody,
    LockBatchResponseBody,
    UnlockBatchRequestBody,
)
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.connection import Connection
from supervisors.actor import ActorError


class LockHandlers:
    """Handlers of LOCK_BATCH_MQ and UNLOCK_BATCH_MQ."""

    def __init__(
        self, locks: RebalanceLockManager, groups: SubscriptionGroupManager, broker_name: str
    ) -> None:
        self.locks = locks
        self.groups = groups
        self.broker_name = broker_name

    async def lock_batch_mq(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """LOCK_BATCH_MQ: the queues of the set that are now the client's."""
        try:
            body = LockBatchRequestBody.from_json(request.body or b"")
        except BodyError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad LOCK_BATCH_MQ body: {exc}")
        refused = self._check_group(request, body.consumer_group)
        if refused is not None:
            return refused
        granted = await self.locks.call(
            LockBatch(body.consumer_group, tuple(body.mq_set), body.client_id)
        )
        answer = LockBatchResponseBody(lock_ok_mq_set=granted)
        return request.response(ResponseCode.SUCCESS, None, None, answer.to_json())

    def unlock_batch_mq(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        """UNLOCK_BATCH_MQ: release the client's locks on the set (answered before it is done)."""
        try:
            body = UnlockBatchRequestBody.from_json(request.body or b"")
        except BodyError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad UNLOCK_BATCH_MQ body: {exc}")
        refused = self._check_group(request, body.consumer_group)
        if refused is not None:
            return refused
        try:
            self.locks.cast_nowait(
                UnlockBatch(body.consumer_group, tuple(body.mq_set), body.client_id)
            )
        except ActorError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"UNLOCK_BATCH_MQ not done: {exc}")
        return request.response(ResponseCode.SUCCESS)

    def _check_group(self, request: RemotingCommand, group: str) -> RemotingCommand | None:
        if self.groups.find_subscription_group_config(group) is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group {group!r} does not exist on broker "
                f"{self.broker_name}; create it (updateSubGroup) or enable "
                "autoCreateSubscriptionGroup",
            )
        return None
