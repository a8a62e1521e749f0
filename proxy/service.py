"""`MessagingService`: one method per RPC of apache.rocketmq.v2.MessagingService.

The service is registered with `grpc.method_handlers_generic_handler` from the generated
message classes (`handler`), so no generated servicer stubs are needed. Each method delegates
to the module of its family (route, send, telemetry, consume); RPCs not served answer Code
NOT_IMPLEMENTED in their status, which clients report as such rather than as a broken
connection.

`handler` wraps every method once: the ACL check (when the proxy has accounts), the latency
histogram, and a last guard that turns an unexpected error into INTERNAL_SERVER_ERROR with a
logged traceback, so one bad call never takes the stream or the server down.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from time import perf_counter
from typing import Any

import grpc

from proxy import metrics
from proxy._pb.apache.rocketmq.v2 import definition_pb2 as pb
from proxy._pb.apache.rocketmq.v2 import service_pb2 as spb
from proxy.acl import ProxyAcl
from proxy.consume import ConsumeService
from proxy.route import RouteService
from proxy.runtime import Context, ProxyRuntime
from proxy.send import SendService
from proxy.status import ProxyError, status
from proxy.telemetry import TelemetryService

__all__ = ["RPCS", "SERVICE_NAME", "MessagingService", "handler"]

SERVICE_NAME = "apache.rocketmq.v2.MessagingService"

log = logging.getLogger("boltmq.proxy")


def _not_implemented(rpc: str) -> pb.Status:
    return status(pb.NOT_IMPLEMENTED, f"{rpc} is not implemented by this proxy")


class MessagingService:
    """The RPCs, each ``(request, context) -> response`` (streams: async iterators)."""

    def __init__(self, runtime: ProxyRuntime, acl: ProxyAcl | None = None) -> None:
        self.runtime = runtime
        #: Checks each call's signature and permissions; None: ACL off.
        self.acl = acl
        self.routes = RouteService(runtime)
        self.sends = SendService(runtime, self.routes)
        self.consume = ConsumeService(runtime)
        self.clients = TelemetryService(runtime, self.consume.group_config)

    # -- routes and clients ---------------------------------------------------------------

    async def query_route(
        self, request: spb.QueryRouteRequest, context: Context
    ) -> spb.QueryRouteResponse:
        """QueryRoute: the topic's queues, each reached through this proxy."""
        return await self.routes.query_route(request, context)

    async def heartbeat(
        self, request: spb.HeartbeatRequest, context: Context
    ) -> spb.HeartbeatResponse:
        """Heartbeat: keep the client's groups registered with the brokers."""
        return await self.clients.heartbeat(request, context)

    async def notify_client_termination(
        self, request: spb.NotifyClientTerminationRequest, context: Context
    ) -> spb.NotifyClientTerminationResponse:
        """NotifyClientTermination: unregister the client from the brokers."""
        return await self.clients.notify_client_termination(request, context)

    async def telemetry(
        self,
        requests: AsyncIterator[spb.TelemetryCommand],
        context: Context,
    ) -> AsyncIterator[spb.TelemetryCommand]:
        """Telemetry: settings in, merged settings and server commands out."""
        async for command in self.clients.telemetry(requests, context):
            yield command

    # -- producing --------------------------------------------------------------------------

    async def send_message(
        self, request: spb.SendMessageRequest, context: Context
    ) -> spb.SendMessageResponse:
        """SendMessage: normal, FIFO, delay and transactional (half) messages."""
        return await self.sends.send_message(request, context)

    async def end_transaction(
        self, request: spb.EndTransactionRequest, context: Context
    ) -> spb.EndTransactionResponse:
        """EndTransaction: commit or roll back a half message."""
        return await self.sends.end_transaction(request, context)

    # -- consuming (proxy/consume.py) -------------------------------------------------------

    def receive_message(
        self, request: spb.ReceiveMessageRequest, context: Context
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        """ReceiveMessage: see `ConsumeService.receive_message`."""
        return self.consume.receive_message(request, context)

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


#: RPC name -> (method name, request class, response class, kind: unary, stream or bidi).
RPCS: dict[str, tuple[str, type[Any], type[Any], str]] = {
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
    for rpc, (method, request_type, response_type, kind) in RPCS.items():
        behaviour = getattr(service, method)
        if kind == "unary":
            handlers[rpc] = grpc.unary_unary_rpc_method_handler(
                _unary(service, rpc, behaviour, response_type),
                request_deserializer=request_type.FromString,
                response_serializer=response_type.SerializeToString,
            )
        elif kind == "stream":
            handlers[rpc] = grpc.unary_stream_rpc_method_handler(
                _stream(service, rpc, behaviour, response_type),
                request_deserializer=request_type.FromString,
                response_serializer=response_type.SerializeToString,
            )
        else:
            handlers[rpc] = grpc.stream_stream_rpc_method_handler(
                _stream(service, rpc, behaviour, response_type),
                request_deserializer=request_type.FromString,
                response_serializer=response_type.SerializeToString,
            )
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)


def _unary(
    service: MessagingService, rpc: str, behaviour: Callable[..., Any], response_type: type[Any]
) -> Callable[[Any, Context], Any]:
    async def call(request: Any, context: Context) -> Any:
        started = perf_counter()
        try:
            if service.acl is not None:
                service.acl.check(rpc, request, context)
            response = await behaviour(request, context)
        except ProxyError as exc:
            response = response_type(status=exc.status())
        except Exception as exc:
            log.exception("%s from %s failed", rpc, context.peer())
            response = response_type(
                status=status(pb.INTERNAL_SERVER_ERROR, f"{rpc} failed in the proxy: {exc!r}")
            )
        metrics.rpc_done(rpc, response.status.code, started)
        return response

    return call


def _stream(
    service: MessagingService, rpc: str, behaviour: Callable[..., Any], response_type: type[Any]
) -> Callable[[Any, Context], AsyncIterator[Any]]:
    async def call(request: Any, context: Context) -> AsyncIterator[Any]:
        started = perf_counter()
        code: int = pb.OK
        try:
            if service.acl is not None:
                # A stream of requests (Telemetry) is checked on its signature alone.
                service.acl.check(rpc, request if rpc != "Telemetry" else None, context)
            async for response in behaviour(request, context):
                if response.HasField("status") and response.status.code != pb.OK:
                    code = response.status.code
                yield response
        except ProxyError as exc:
            code = exc.code
            yield response_type(status=exc.status())
        except Exception as exc:
            log.exception("%s from %s failed", rpc, context.peer())
            code = pb.INTERNAL_SERVER_ERROR
            yield response_type(
                status=status(pb.INTERNAL_SERVER_ERROR, f"{rpc} failed in the proxy: {exc!r}")
            )
        finally:
            metrics.rpc_done(rpc, code, started)

    return call
