"""Request-reply (RocketMQ 4.6+): a requester's waiting requests, the replies brokers push to it,
and the reply a responder makes from a request message.

The requester sends an ordinary message carrying CORRELATION_ID (unique per request),
REPLY_TO_CLIENT (its client id) and TTL (its timeout in ms), then waits for the reply with that
correlation id. The responder replies with `create_reply_message` and an ordinary send; the
producer sends a message of MSG_TYPE ``reply`` with SEND_REPLY_MESSAGE_V2, and the broker pushes
it to the requester's connection (PUSH_REPLY_MESSAGE_TO_CLIENT), which `ReplyTable` takes.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

import anyio
import attrs

from client.message import Message, MQClientError
from client.pending import Pending
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.connection import Connection
from protocol.message import (
    MessageConst,
    MessageExt,
    MessageSysFlag,
    decompress_body,
    string_to_properties,
)
from protocol.names import REPLY_TOPIC_SUFFIX
from protocol.transport import parse_address

log = logging.getLogger("boltmq.client")

#: MSG_TYPE of a reply message (RocketMQ's MixAll.REPLY_MESSAGE_FLAG).
REPLY_MESSAGE_FLAG = "reply"
#: ClientErrorCode.REQUEST_TIMEOUT_EXCEPTION of RocketMQ's client: the code of `RequestTimeout`.
REQUEST_TIMEOUT_CODE = 10006


class RequestTimeout(MQClientError):
    """No reply came within the request's timeout."""


def create_reply_message(request: MessageExt, body: bytes) -> Message:
    """The reply to ``request`` (a message received by a consumer) carrying ``body``: sent by
    any producer, it reaches the requester that waits for it.

    Raises ValueError when ``request`` is not a request message (no CLUSTER property: it was
    not sent through a broker, or was not sent by `Producer.request`)."""
    props = request.properties
    cluster = props.get(MessageConst.CLUSTER)
    if not cluster:
        raise ValueError(
            f"cannot reply: the message has no {MessageConst.CLUSTER} property (a request "
            "message received from a broker has one)"
        )
    reply = {MessageConst.MESSAGE_TYPE: REPLY_MESSAGE_FLAG}
    for key in (
        MessageConst.CORRELATION_ID,
        MessageConst.MESSAGE_REPLY_TO_CLIENT,
        MessageConst.MESSAGE_TTL,
    ):
        value = props.get(key)
        if value is not None:
            reply[key] = value
    return Message(cluster + REPLY_TOPIC_SUFFIX, body, properties=reply)


def is_reply(message: Message) -> bool:
    """Whether ``message`` is a reply (sent with SEND_REPLY_MESSAGE_V2)."""
    return message.properties.get(MessageConst.MESSAGE_TYPE) == REPLY_MESSAGE_FLAG


RequestCallback = Callable[[MessageExt | None, BaseException | None], object]
"""Called once per `Producer.request_async` with ``(reply, None)`` or ``(None, error)``."""


class RequestHandle(Pending[MessageExt]):
    """A request under way (`Producer.request_async`): ``await handle`` gives the reply or
    raises its error (`RequestTimeout`, or the send's)."""

    __slots__ = ()


class _Waiter:
    def __init__(self) -> None:
        self.done = anyio.Event()
        self.reply: MessageExt | None = None


class ReplyTable:
    """A client's requests waiting for their reply, by correlation id."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self._waiting: dict[str, _Waiter] = {}

    def prepare(self, message: Message, timeout: float) -> tuple[Message, str]:
        """``message`` with the request properties added, and its correlation id."""
        correlation_id = str(uuid.uuid4())
        properties = dict(message.properties)
        properties[MessageConst.CORRELATION_ID] = correlation_id
        properties[MessageConst.MESSAGE_REPLY_TO_CLIENT] = self.client_id
        properties[MessageConst.MESSAGE_TTL] = str(int(timeout * 1000))
        return attrs.evolve(message, properties=properties), correlation_id

    def expect(self, correlation_id: str) -> _Waiter:
        """Start waiting for the reply to ``correlation_id`` (before the request is sent, so a
        fast reply is not missed)."""
        waiter = self._waiting[correlation_id] = _Waiter()
        return waiter

    async def wait(self, correlation_id: str, waiter: _Waiter, deadline: float) -> MessageExt:
        """The reply, or `RequestTimeout` at ``deadline`` (anyio time)."""
        try:
            with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
                await waiter.done.wait()
        finally:
            self._waiting.pop(correlation_id, None)
        if waiter.reply is None:
            raise RequestTimeout(
                REQUEST_TIMEOUT_CODE,
                f"no reply to request {correlation_id} within its timeout (is a responder "
                "consuming the topic, and replying with create_reply_message?)",
            )
        return waiter.reply

    def forget(self, correlation_id: str) -> None:
        """Stop waiting (the request's send failed)."""
        self._waiting.pop(correlation_id, None)

    def receive(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        """PUSH_REPLY_MESSAGE_TO_CLIENT: hand the reply to its waiting request."""
        try:
            reply = _decode_reply(request)
        except (KeyError, ValueError) as exc:
            log.warning("a reply pushed by %s is malformed: %s", connection.peer, exc)
            return request.response(ResponseCode.SYSTEM_ERROR, f"malformed reply: {exc}")
        correlation_id = reply.properties.get(MessageConst.CORRELATION_ID, "")
        waiter = self._waiting.get(correlation_id)
        if waiter is None:
            # Its request timed out already, or it was meant for an earlier run of this client.
            log.warning(
                "reply %s from %s matches no waiting request (timed out?)",
                correlation_id or "without a correlation id", connection.peer,
            )  # fmt: skip
        else:
            waiter.reply = reply
            waiter.done.set()
        return request.response(ResponseCode.SUCCESS)


def _decode_reply(request: RemotingCommand) -> MessageExt:
    fields = request.ext_fields or {}
    properties = string_to_properties(fields.get("properties") or "")
    properties[MessageConst.REPLY_MESSAGE_ARRIVE_TIME] = str(time.time_ns() // 1_000_000)
    body = bytes(request.body or b"")
    sys_flag = int(fields.get("sysFlag") or 0)
    if sys_flag & MessageSysFlag.COMPRESSED:  # the requester gets the body as it was sent
        body, sys_flag = decompress_body(body), sys_flag & ~MessageSysFlag.COMPRESSED
    return MessageExt(
        store_size=0,
        body_crc=0,
        queue_id=int(fields["queueId"]),
        flag=int(fields.get("flag") or 0),
        queue_offset=0,
        commit_log_offset=0,
        sys_flag=sys_flag,
        born_timestamp=int(fields.get("bornTimestamp") or 0),
        born_host=_host(fields.get("bornHost")),
        store_timestamp=int(fields.get("storeTimestamp") or 0),
        store_host=_host(fields.get("storeHost")),
        reconsume_times=int(fields.get("reconsumeTimes") or 0),
        prepared_transaction_offset=0,
        body=body,
        topic=fields["topic"],
        properties=properties,
    )


def _host(text: str | None) -> tuple[str, int]:
    # Java's broker writes a socket address's text, which may start with "/" or "name/".
    if not text:
        return ("0.0.0.0", 0)
    return parse_address(text.rpartition("/")[2])
