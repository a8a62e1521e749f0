"""`MessagingService`: one method per RPC of apache.rocketmq.v2.MessagingService.

The service is registered with `grpc.method_handlers_generic_handler` from the generated
message classes (`handler`), so no generated servicer stubs are needed. Each method delegates
to the module of its family (route, send, telemetry, consume); RPCs not served answer Code
NOT_IMPLEMENTED in their status, which clients report as such rather than as a broken
connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc

from proxy._pb.apache.rocketmq.v2 import definition_pb2 as pb
from proxy._pb.apache.rocketmq.v2 import service_pb2 as spb
from proxy.consume import ConsumeService
from proxy.runtime import Context, ProxyRuntime
from proxy.status import status

__all__ = ["SERVICE_NAME", "MessagingService", "handler"]

SERVICE_NAME = "apache.rocketmq.v2.MessagingService"


def _not_implemented(rpc: str) -> pb.Status:
    return status(pb.NOT_IMPLEMENTED, f"{rpc} is not implemented by this proxy")


class MessagingService:
    """The RPCs, each ``(request, context) -> response`` (streams: async iterators)."""

    def __init__(self, runtime: ProxyRuntime) -> None:
        self.runtime = runtime
        self.consume = ConsumeService(runtime)

    # -- routes and clients ---------------------------------------------------------------

    async def query_route(
        self, request: spb.QueryRouteRequest, context: Context
    ) -> spb.QueryRouteResponse:
        """QueryRoute: the topic's queues, each reached through this proxy."""
        return spb.QueryRouteResponse(status=_not_implemented("QueryRoute"))

    async def heartbeat(
        self, request: spb.HeartbeatRequest, context: Context
    ) -> spb.HeartbeatResponse:
        """Heartbeat: keep the client's groups registered with the brokers."""
        return spb.HeartbeatResponse(status=_not_implemented("Heartbeat"))

    async def notify_client_termination(
        self, request: spb.NotifyClientTerminationRequest, context: Context
    ) -> spb.NotifyClientTerminationResponse:
        """NotifyClientTermination: unregister the client from the brokers."""
        return spb.NotifyClientTerminationResponse(
            status=_not_implemented("NotifyClientTermination")
        )

    async def telemetry(
        self,
        requests: AsyncIterator[spb.TelemetryCommand],
        context: Context,
    ) -> AsyncIterator[spb.TelemetryCommand]:
        """Telemetry: settings in, merged settings and server commands out."""
        async for _ in requests:
            yield spb.TelemetryCommand(status=_not_implemented("Telemetry"))

    # -- producing --------------------------------------------------------------------------

    async def send_message(
        self, request: spb.SendMessageRequest, context: Context
    ) -> spb.SendMessageResponse:
        """SendMessage: normal, FIFO, delay and transactional (half) messages."""
        return spb.SendMessageResponse(status=_not_implemented("SendMessage"))

    async def end_transaction(
        self, request: spb.EndTransactionRequest, context: Context
    ) -> spb.EndTransactionResponse:
        """EndTransaction: commit or roll back a half message."""
        return spb.EndTransactionResponse(status=_not_implemented("EndTransaction"))

    # -- consuming (proxy/consume.py) -------------------------------------------------------

    async def receive_message(
        self, request: spb.ReceiveMessageRequest, context: Context
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        """ReceiveMessage: see `ConsumeService.receive_message`."""
        # An async generator function itself: grpc.aio serves a plain function's result as a
        # synchronous iterator.
        async for response in self.consume.receive_message(request, context):
            yield response

    async def ack_message(
        self, request: spb.AckMessageRequest, context: Context
    ) -> spb.AckMessageResponse:
        """AckMessage: see `ConsumeService.ack_message`."""
        return await self.consume.ack_message(request, context)

    async def change_invisible_duration(
        self, request: spb.ChangeInvisibleDurationRequest, context: Context
    ) -> spb.ChangeInvisibleDurationResponse:
        """ChangeInvisibleDuration: see `ConsumeService.change_invisible_duration`."""
        return await self.consume.change_invisible_duration(request, context)

    async def query_assignment(
        self, request: spb.QueryAssignmentRequest, context: Context
    ) -> spb.QueryAssignmentResponse:
        """QueryAssignment: see `ConsumeService.query_assignment`."""
        return await self.consume.query_assignment(request, context)

    async def forward_message_to_dead_letter_queue(
        self,
        request: spb.ForwardMessageToDeadLetterQueueRequest,
        context: Context,
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        """ForwardMessageToDeadLetterQueue: see `ConsumeService`."""
        return await self.consume.forward_message_to_dead_letter_queue(request, context)

    # -- not served: offset-based pull, recall, lite topics ---------------------------------

    async def pull_message(
        self, request: spb.PullMessageRequest, context: Context
    ) -> AsyncIterator[spb.PullMessageResponse]:
        """PullMessage: not served (NOT_IMPLEMENTED)."""
        yield spb.PullMessageResponse(status=_not_implemented("PullMessage"))

    async def update_offset(
        self, request: spb.UpdateOffsetRequest, context: Context
    ) -> spb.UpdateOffsetResponse:
        """UpdateOffset: not served (NOT_IMPLEMENTED)."""
        return spb.UpdateOffsetResponse(status=_not_implemented("UpdateOffset"))

    async def get_offset(
        self, request: spb.GetOffsetRequest, context: Context
    ) -> spb.GetOffsetResponse:
        """GetOffset: not served (NOT_IMPLEMENTED)."""
        return spb.GetOffsetResponse(status=_not_implemented("GetOffset"))

    async def query_offset(
        self, request: spb.QueryOffsetRequest, context: Context
    ) -> spb.QueryOffsetResponse:
        """QueryOffset: not served (NOT_IMPLEMENTED)."""
        return spb.QueryOffsetResponse(status=_not_implemented("QueryOffset"))

    async def recall_message(
        self, request: spb.RecallMessageRequest, context: Context
    ) -> spb.RecallMessageResponse:
        """RecallMessage: not served (NOT_IMPLEMENTED)."""
        return spb.RecallMessageResponse(status=_not_implemented("RecallMessage"))

    async def sync_lite_subscription(
        self, request: spb.SyncLiteSubscriptionRequest, context: Context
    ) -> spb.SyncLiteSubscriptionResponse:
        """SyncLiteSubscription: not served (NOT_IMPLEMENTED)."""
        return spb.SyncLiteSubscriptionResponse(status=_not_implemented("SyncLiteSubscription"))


# RPC name -> (method name, request class, response class, kind)
_RPCS: dict[str, tuple[str, type[Any], type[Any], str]] = {
    "QueryRoute": ("query_route", spb.QueryRouteRequest, spb.QueryRouteResponse, "unary"),
    "Heartbeat": ("heartbeat", spb.HeartbeatRequest, spb.HeartbeatResponse, "unary"),
    "SendMessage": ("send_message", spb.SendMessageRequest, spb.SendMessageResponse, "unary"),
    "QueryAssignment": (
        "query_assignment",
        spb.QueryAssignmentRequest,
        spb.QueryAssignmentResponse,
        "unary",
    ),
    "ReceiveMessage": (
        "receive_message",
        spb.ReceiveMessageRequest,
        spb.ReceiveMessageResponse,
        "stream",
    ),
    "AckMessage": ("ack_message", spb.AckMessageRequest, spb.AckMessageResponse, "unary"),
    "ForwardMessageToDeadLetterQueue": (
        "forward_message_to_dead_letter_queue",
        spb.ForwardMessageToDeadLetterQueueRequest,
        spb.ForwardMessageToDeadLetterQueueResponse,
        "unary",
    ),
    "PullMessage": ("pull_message", spb.PullMessageRequest, spb.PullMessageResponse, "stream"),
    "UpdateOffset": ("update_offset", spb.UpdateOffsetRequest, spb.UpdateOffsetResponse, "unary"),
    "GetOffset": ("get_offset", spb.GetOffsetRequest, spb.GetOffsetResponse, "unary"),
    "QueryOffset": ("query_offset", spb.QueryOffsetRequest, spb.QueryOffsetResponse, "unary"),
    "EndTransaction": (
        "end_transaction",
        spb.EndTransactionRequest,
        spb.EndTransactionResponse,
        "unary",
    ),
    "Telemetry": ("telemetry", spb.TelemetryCommand, spb.TelemetryCommand, "bidi"),
    "NotifyClientTermination": (
        "notify_client_termination",
        spb.NotifyClientTerminationRequest,
        spb.NotifyClientTerminationResponse,
        "unary",
    ),
    "ChangeInvisibleDuration": (
        "change_invisible_duration",
        spb.ChangeInvisibleDurationRequest,
        spb.ChangeInvisibleDurationResponse,
        "unary",
    ),
    "RecallMessage": (
        "recall_message",
        spb.RecallMessageRequest,
        spb.RecallMessageResponse,
        "unary",
    ),
    "SyncLiteSubscription": (
        "sync_lite_subscription",
        spb.SyncLiteSubscriptionRequest,
        spb.SyncLiteSubscriptionResponse,
        "unary",
    ),
}


def handler(service: MessagingService) -> grpc.GenericRpcHandler:
    """The generic handler serving every RPC of MessagingService from ``service``."""
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for rpc, (method, request_type, response_type, kind) in _RPCS.items():
        behaviour = getattr(service, method)
        make = {
            "unary": grpc.unary_unary_rpc_method_handler,
            "stream": grpc.unary_stream_rpc_method_handler,
            "bidi": grpc.stream_stream_rpc_method_handler,
        }[kind]
        handlers[rpc] = make(
            behaviour,
            request_deserializer=request_type.FromString,
            response_serializer=response_type.SerializeToString,
        )
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)
