"""The consumer side of MessagingService (simple and push consumers over the brokers' pop).

Placeholder: every RPC answers Code NOT_IMPLEMENTED until the pop-based receive, ack,
invisible-duration change, assignment and dead-letter forwarding are served here.
`proxy.service.MessagingService` delegates these five RPCs to `ConsumeService`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from proxy._pb.apache.rocketmq.v2 import definition_pb2 as pb
from proxy._pb.apache.rocketmq.v2 import service_pb2 as spb
from proxy.runtime import Context
from proxy.status import status

__all__ = ["ConsumeService"]

_NOT_YET = "consumption through the proxy is not implemented yet"


class ConsumeService:
    """ReceiveMessage, AckMessage, ChangeInvisibleDuration, QueryAssignment and
    ForwardMessageToDeadLetterQueue."""

    async def receive_message(
        self, request: spb.ReceiveMessageRequest, context: Context
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        """ReceiveMessage: a stream of messages, then a status."""
        yield spb.ReceiveMessageResponse(status=status(pb.NOT_IMPLEMENTED, _NOT_YET))

    async def ack_message(
        self, request: spb.AckMessageRequest, context: Context
    ) -> spb.AckMessageResponse:
        """AckMessage: acknowledge received messages by their receipt handles."""
        return spb.AckMessageResponse(status=status(pb.NOT_IMPLEMENTED, _NOT_YET))

    async def change_invisible_duration(
        self, request: spb.ChangeInvisibleDurationRequest, context: Context
    ) -> spb.ChangeInvisibleDurationResponse:
        """ChangeInvisibleDuration: postpone a received message's redelivery."""
        return spb.ChangeInvisibleDurationResponse(status=status(pb.NOT_IMPLEMENTED, _NOT_YET))

    async def query_assignment(
        self, request: spb.QueryAssignmentRequest, context: Context
    ) -> spb.QueryAssignmentResponse:
        """QueryAssignment: the queues a push consumer receives from."""
        return spb.QueryAssignmentResponse(status=status(pb.NOT_IMPLEMENTED, _NOT_YET))

    async def forward_message_to_dead_letter_queue(
        self,
        request: spb.ForwardMessageToDeadLetterQueueRequest,
        context: Context,
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        """ForwardMessageToDeadLetterQueue: give up on a message the consumer cannot handle."""
        return spb.ForwardMessageToDeadLetterQueueResponse(
            status=status(pb.NOT_IMPLEMENTED, _NOT_YET)
        )
