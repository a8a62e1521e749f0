"""The consumer side of MessagingService (simple and push consumers over the brokers' pop).

Every RPC is one or two pop requests through `client.pop.PopClient`; the proxy keeps no
state of its own, as RocketMQ 5's proxy in cluster mode:

- ReceiveMessage pops from the broker the request's queue names (any readable one of the
  topic when it names none the route knows), queue -1 (any) unless a queue id is given, with
  the group's filter, batch size, invisible duration (the settings' default for an
  auto-renewing push consumer) and long-polling time (the request's, bounded by the settings
  and by what is left of the call's deadline). It streams a ``status`` (OK, or
  MESSAGE_NOT_FOUND when nothing came), one ``message`` per message, then the
  ``delivery_timestamp`` of the batch. A message that cannot be written (the client went
  away) is made visible again in a second (RocketMQ's nack).
- AckMessage acks each entry and answers a status per entry (MULTIPLE_RESULTS when they
  differ); a handle that does not parse, has expired, or names no message in flight gets
  INVALID_RECEIPT_HANDLE.
- ChangeInvisibleDuration answers the new receipt handle; a duration out of range gets
  ILLEGAL_INVISIBLE_TIME.
- QueryAssignment gives a push consumer one queue per readable broker (every queue for a
  FIFO group), reached through this proxy.
- ForwardMessageToDeadLetterQueue sends the message to ``%DLQ%<group>`` and acks it.

FIFO is the group's ``consumeMessageOrderly``, read from a broker's group table and kept for
`ConsumeSettings.group_config_ttl` seconds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import cast

import anyio
import attrs
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from client.message import MQClientError
from client.pop import PopClient, PoppedMessage, PopResult, PopStatus, ReceiptHandle
from protocol.bodies import PERM_READ, PERM_WRITE, SubscriptionGroupConfig, SubscriptionGroupWrapper
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError, RemotingTimeoutError
from protocol.filter import SQL92, TAG
from proxy import metrics
from proxy._pb.apache.rocketmq.v2 import definition_pb2 as pb
from proxy._pb.apache.rocketmq.v2 import service_pb2 as spb
from proxy.consume_message import to_grpc_message
from proxy.runtime import Context, ProxyRuntime
from proxy.status import ProxyError, from_response_code, status

__all__ = ["ConsumeService", "ConsumeSettings"]

log = logging.getLogger("boltmq.proxy.consume")

#: A pop hands out at most this many messages (the brokers' limit).
MAX_BATCH_SIZE = 32
#: How long a message that could not be written to its receiver stays invisible (ms).
NACK_INVISIBLE_MS = 1000


@attrs.frozen
class ConsumeSettings:
    """Limits of the consumer RPCs, in milliseconds; the defaults are RocketMQ 5's proxy's."""

    #: The invisible time of an auto-renewing (push) consumer's receive.
    default_invisible_ms: int = 60_000
    #: The shortest invisible duration a receive may ask for.
    min_invisible_ms_for_receive: int = 10_000
    #: The longest invisible duration (receive and change).
    max_invisible_ms: int = 12 * 3600 * 1000
    #: Long-polling times are brought into this range.
    min_long_polling_ms: int = 5_000
    max_long_polling_ms: int = 20_000
    #: How long a group's config (FIFO or not) is kept before it is read again, in seconds.
    group_config_ttl: float = 30.0


class ConsumeService:
    """ReceiveMessage, AckMessage, ChangeInvisibleDuration, QueryAssignment and
    ForwardMessageToDeadLetterQueue."""

    def __init__(self, runtime: ProxyRuntime, settings: ConsumeSettings | None = None) -> None:
        self.runtime = runtime
        self.settings = settings or ConsumeSettings()
        self.pop = PopClient(runtime.instance)
        self._groups: dict[str, tuple[float, SubscriptionGroupConfig | None]] = {}

    # -- ReceiveMessage -----------------------------------------------------------------------

    async def receive_message(
        self, request: spb.ReceiveMessageRequest, context: Context
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        """ReceiveMessage: a status, the messages, then the delivery timestamp."""
        try:
            answer = await self._receive(request, context)
        except Exception as exc:  # every failure is the client's status
            yield spb.ReceiveMessageResponse(status=_status_of(exc, "receive"))
            yield _delivered_now()
            return
        result, invisible_ms = answer
        if result.status is PopStatus.POLLING_FULL:
            yield spb.ReceiveMessageResponse(status=status(pb.TOO_MANY_REQUESTS, "polling full"))
        elif not result.messages:
            yield spb.ReceiveMessageResponse(status=status(pb.MESSAGE_NOT_FOUND, "no new message"))
        else:
            yield spb.ReceiveMessageResponse(status=status(pb.OK))
            written = 0
            try:
                for popped in result.messages:
                    yield spb.ReceiveMessageResponse(message=to_grpc_message(popped, invisible_ms))
                    written += 1
            finally:
                if written < len(result.messages):
                    await self._nack(request, result.messages[written:])
            if written:
                metrics.messages_out(request.message_queue.topic.name, request.group.name, written)
        yield _delivered_now()

    async def _receive(
        self, request: spb.ReceiveMessageRequest, context: Context
    ) -> tuple[PopResult, int]:
        settings = self.settings
        group, topic = _group(request.group), _topic(request.message_queue.topic)
        if request.auto_renew:
            invisible_ms = settings.default_invisible_ms
        else:
            invisible_ms = _millis(request.invisible_duration)
            self._check_invisible(invisible_ms, settings.min_invisible_ms_for_receive)
        poll_ms = self._polling_ms(request, context)
        batch = request.batch_size
        if batch <= 0:
            raise ProxyError(pb.BAD_REQUEST, f"batch_size must be positive, not {batch}")
        expression_type, expression = _filter(request.filter_expression)
        address, queue_id = await self._broker_for(topic, request.message_queue)
        fifo = bool((await self.group_config(group, topic) or _NO_GROUP).consume_message_orderly)
        result = await self.pop.pop(
            address, group, topic, queue_id=queue_id, max_messages=min(batch, MAX_BATCH_SIZE),
            invisible_ms=invisible_ms, poll_ms=poll_ms, expression_type=expression_type,
            expression=expression, order=fifo,
            attempt_id=request.attempt_id if request.HasField("attempt_id") else None,
        )  # fmt: skip
        return result, invisible_ms

    def _polling_ms(self, request: spb.ReceiveMessageRequest, context: Context) -> int:
        """The long-polling time: the request's (or what the deadline leaves past half a
        request timeout), within the settings' range, and ending half a request timeout
        before the call's deadline; ILLEGAL_POLLING_TIME when the deadline is nearer than
        the shortest poll."""
        settings = self.settings
        timeout_ms = int(self.runtime.config.request_timeout * 1000)
        remaining = context.time_remaining()
        remaining_ms = None if remaining is None else int(remaining * 1000)
        if request.HasField("long_polling_timeout"):
            poll_ms = _millis(request.long_polling_timeout)
        elif remaining_ms is not None:
            poll_ms = remaining_ms - timeout_ms // 2
        else:
            poll_ms = settings.max_long_polling_ms
        poll_ms = min(max(poll_ms, settings.min_long_polling_ms), settings.max_long_polling_ms)
        if remaining_ms is not None:
            if poll_ms > remaining_ms and remaining_ms < settings.min_long_polling_ms:
                raise ProxyError(
                    pb.ILLEGAL_POLLING_TIME,
                    f"the call's deadline leaves {max(remaining_ms, 0)} ms: not enough to poll "
                    f"for at least {settings.min_long_polling_ms} ms; give the call a longer "
                    "deadline",
                )
            # The answer must leave the broker before the client stops waiting for it.
            poll_ms = min(poll_ms, max(remaining_ms - timeout_ms // 2, 0))
        return poll_ms

    async def _nack(self, request: spb.ReceiveMessageRequest, unsent: list[PoppedMessage]) -> None:
        """Messages the client did not get: visible again in a second, not at their time."""
        group, topic = request.group.name, request.message_queue.topic.name
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(self.runtime.config.request_timeout),
        ):
            for popped in unsent:
                try:
                    await self.pop.change_invisible(
                        popped, NACK_INVISIBLE_MS, group=group, topic=topic
                    )
                except (RemotingError, OSError) as exc:
                    log.warning("receive of %s/%s: message %s not written and not nacked (%s); "
                                "it returns after its invisible time", group, topic,
                                popped.message.msg_id, exc)  # fmt: skip

    # -- AckMessage ---------------------------------------------------------------------------

    async def ack_message(
        self, request: spb.AckMessageRequest, context: Context
    ) -> spb.AckMessageResponse:
        """AckMessage: each entry acked, a status per entry."""
        try:
            group, topic = _group(request.group), _topic(request.topic)
        except ProxyError as exc:
            return spb.AckMessageResponse(status=exc.status())
        entries = []
        for entry in request.entries:
            try:
                handle = _handle(entry.receipt_handle, expired_refused=True)
                await self.pop.ack(handle.encode(), group=group, topic=topic)
                entry_status = status(pb.OK)
            except Exception as exc:  # each entry answers its own status
                entry_status = _status_of(exc, "ack")
            entries.append(
                spb.AckMessageResultEntry(
                    message_id=entry.message_id,
                    receipt_handle=entry.receipt_handle,
                    status=entry_status,
                )
            )
        codes = {e.status.code for e in entries}
        if len(codes) > 1:
            overall = status(pb.MULTIPLE_RESULTS)
        elif codes:
            overall = status(codes.pop())
        else:
            overall = status(pb.BAD_REQUEST, "the request names no message to ack")
        return spb.AckMessageResponse(status=overall, entries=entries)

    # -- ChangeInvisibleDuration --------------------------------------------------------------

    async def change_invisible_duration(
        self, request: spb.ChangeInvisibleDurationRequest, context: Context
    ) -> spb.ChangeInvisibleDurationResponse:
        """ChangeInvisibleDuration: the message invisible that long from now, a new handle."""
        try:
            group, topic = _group(request.group), _topic(request.topic)
            invisible_ms = _millis(request.invisible_duration)
            self._check_invisible(invisible_ms, 0)
            handle = _handle(request.receipt_handle, expired_refused=False)
            # The brokers take 1 ms at the least; 0 means visible again at once.
            new = await self.pop.change_invisible(
                handle.encode(), max(invisible_ms, 1), group=group, topic=topic
            )
        except Exception as exc:  # every failure is the client's status
            return spb.ChangeInvisibleDurationResponse(status=_status_of(exc, "change"))
        return spb.ChangeInvisibleDurationResponse(status=status(pb.OK), receipt_handle=new)

    # -- QueryAssignment ----------------------------------------------------------------------

    async def query_assignment(
        self, request: spb.QueryAssignmentRequest, context: Context
    ) -> spb.QueryAssignmentResponse:
        """QueryAssignment: one queue per readable broker (each queue for a FIFO group)."""
        try:
            group, topic = _group(request.group), _topic(request.topic)
            route = await self.runtime.instance.route(topic)
            if route is None:
                raise ProxyError(pb.TOPIC_NOT_FOUND, f"topic {topic} has no route")
            config = await self.group_config(group, topic)
        except Exception as exc:  # every failure is the client's status
            return spb.QueryAssignmentResponse(status=_status_of(exc, "assignment"))
        fifo = bool(config is not None and config.consume_message_orderly)
        endpoints = self._endpoints(request.endpoints)
        masters = {b.broker_name for b in route.broker_datas if 0 in b.broker_addrs}
        assignments = []
        for queue_data in sorted(route.queue_datas, key=lambda q: q.broker_name):
            if not (queue_data.perm & PERM_READ and queue_data.read_queue_nums > 0):
                continue
            if queue_data.broker_name not in masters:
                continue
            broker = pb.Broker(name=queue_data.broker_name, id=0, endpoints=endpoints)
            ids = range(queue_data.read_queue_nums) if fifo else (-1,)
            for queue_id in ids:
                queue = pb.MessageQueue(
                    topic=request.topic, id=queue_id,
                    permission=_permission(queue_data.perm), broker=broker,
                )  # fmt: skip
                assignments.append(pb.Assignment(message_queue=queue))
        if not assignments:
            return spb.QueryAssignmentResponse(
                status=status(pb.FORBIDDEN, f"topic {topic} has no readable queue")
            )
        return spb.QueryAssignmentResponse(status=status(pb.OK), assignments=assignments)

    def _endpoints(self, given: pb.Endpoints) -> pb.Endpoints:
        """The endpoints the client reached us at, else the proxy's advertised address."""
        if given.addresses:
            return given
        host, port = self.runtime.advertised
        scheme = pb.IPv6 if ":" in host else pb.IPv4
        if not host.replace(".", "").replace(":", "").isalnum() or host[:1].isalpha():
            scheme = pb.DOMAIN_NAME
        return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=port)])

    # -- ForwardMessageToDeadLetterQueue ------------------------------------------------------

    async def forward_message_to_dead_letter_queue(
        self,
        request: spb.ForwardMessageToDeadLetterQueueRequest,
        context: Context,
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        """ForwardMessageToDeadLetterQueue: to ``%DLQ%<group>`` now, and acked."""
        try:
            group, topic = _group(request.group), _topic(request.topic)
            handle = _handle(request.receipt_handle, expired_refused=False)
            if handle.commit_log_offset < 0:
                raise ProxyError(pb.INVALID_RECEIPT_HANDLE, "commit log offset is empty")
            await self.pop.forward_handle_to_dead_letter(
                handle.encode(), group=group, topic=topic, message_id=request.message_id
            )
        except Exception as exc:  # every failure is the client's status
            return spb.ForwardMessageToDeadLetterQueueResponse(status=_status_of(exc, "forward"))
        return spb.ForwardMessageToDeadLetterQueueResponse(status=status(pb.OK))

    # -- shared -------------------------------------------------------------------------------

    def _check_invisible(self, invisible_ms: int, minimum: int) -> None:
        if invisible_ms < minimum:
            raise ProxyError(
                pb.ILLEGAL_INVISIBLE_TIME,
                f"the invisible duration {invisible_ms} ms is too small: the least is {minimum} ms",
            )
        if invisible_ms > self.settings.max_invisible_ms:
            raise ProxyError(
                pb.ILLEGAL_INVISIBLE_TIME,
                f"the invisible duration {invisible_ms} ms is too large: the most is "
                f"{self.settings.max_invisible_ms} ms",
            )

    async def _broker_for(self, topic: str, queue: pb.MessageQueue) -> tuple[str, int]:
        """(master address, queue id) to pop: the broker the queue names if it is readable,
        else the first readable one; queue -1."""
        instance = self.runtime.instance
        route = await instance.route(topic)
        if route is None:
            raise ProxyError(pb.TOPIC_NOT_FOUND, f"topic {topic} has no route")
        readable = {q.broker_name: q.read_queue_nums for q in route.queue_datas
                    if q.perm & PERM_READ and q.read_queue_nums > 0}  # fmt: skip
        wanted = queue.broker.name
        for name in ([wanted] if wanted in readable else []) + sorted(readable):
            address = instance.master_address(name)
            if address is not None:
                # Any queue of that broker, as RocketMQ's proxy pops (its broker-acting queue):
                # clients name a queue only to pick a broker (the 5.x Node client names queue 0
                # always).
                return address, -1
        raise ProxyError(pb.FORBIDDEN, f"topic {topic} has no readable queue with a master")

    async def group_config(self, group: str, topic: str) -> SubscriptionGroupConfig | None:
        """The group's config at a master of the topic (None: no broker knows it), cached."""
        now = time.monotonic()
        cached = self._groups.get(group)
        if cached is not None and now - cached[0] < self.settings.group_config_ttl:
            return cached[1]
        instance = self.runtime.instance
        route = await instance.route(topic)
        config = None
        request = RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        for broker in route.broker_datas if route is not None else []:
            address = broker.broker_addrs.get(0)
            if address is None:
                continue
            try:
                response = await instance.invoke_broker(address, request)
            except RemotingError as exc:
                log.warning("group config of %s at %s not read (%s); trying another broker",
                            group, address, exc)  # fmt: skip
                continue
            if response.code == ResponseCode.SUCCESS:
                table = SubscriptionGroupWrapper.from_json(response.body or b"{}")
                config = table.subscription_group_table.get(group)
                break
        self._groups[group] = (now, config)
        return config


_NO_GROUP = SubscriptionGroupConfig(group_name="")


def _delivered_now() -> spb.ReceiveMessageResponse:
    stamp = Timestamp()
    stamp.FromMilliseconds(int(time.time() * 1000))
    return spb.ReceiveMessageResponse(delivery_timestamp=stamp)


def _group(resource: pb.Resource) -> str:
    if not resource.name.strip():
        raise ProxyError(pb.ILLEGAL_CONSUMER_GROUP, "the request names no consumer group")
    return resource.name


def _topic(resource: pb.Resource) -> str:
    if not resource.name.strip():
        raise ProxyError(pb.ILLEGAL_TOPIC, "the request names no topic")
    return resource.name


def _millis(duration: Duration) -> int:
    return int(duration.seconds * 1000 + duration.nanos // 1_000_000)


def _filter(expression: pb.FilterExpression) -> tuple[str, str]:
    text = expression.expression.strip()
    if expression.type == pb.SQL:
        if not text:
            raise ProxyError(pb.ILLEGAL_FILTER_EXPRESSION, "an SQL filter needs an expression")
        return SQL92, text
    return TAG, text or "*"


def _handle(text: str, *, expired_refused: bool) -> ReceiptHandle:
    try:
        handle = ReceiptHandle.parse(text)
    except MQClientError as exc:
        raise ProxyError(pb.INVALID_RECEIPT_HANDLE, exc.remark) from None
    if expired_refused and handle.invisible_until_ms <= int(time.time() * 1000):
        raise ProxyError(pb.INVALID_RECEIPT_HANDLE, "receipt handle is expired")
    return handle


def _permission(perm: int) -> pb.Permission:
    if perm & PERM_READ and perm & PERM_WRITE:
        return pb.READ_WRITE
    if perm & PERM_READ:
        return pb.READ
    if perm & PERM_WRITE:
        return pb.WRITE
    return pb.NONE


def _status_of(exc: Exception, what: str) -> pb.Status:
    """The client's status for a failure of ``what``."""
    if isinstance(exc, ProxyError):
        return exc.status()
    if isinstance(exc, RemotingTimeoutError):
        return status(pb.PROXY_TIMEOUT, f"{what}: a broker did not answer in time: {exc.remark}")
    if isinstance(exc, RemotingError):
        if exc.code == ResponseCode.NO_MESSAGE and what in ("ack", "change", "forward"):
            # The broker holds no message in flight under this handle.
            return status(pb.INVALID_RECEIPT_HANDLE, exc.remark)
        if exc.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED:
            return status(pb.ILLEGAL_FILTER_EXPRESSION, exc.remark)
        return from_response_code(cast(pb.Code, exc.code), exc.remark)
    log.exception("%s failed", what)
    return status(pb.INTERNAL_SERVER_ERROR, f"{what} failed: {type(exc).__name__}: {exc}")
