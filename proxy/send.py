"""SendMessage and EndTransaction: v2 messages turned into SEND_MESSAGE_V2 and END_TRANSACTION.

Each v2 message becomes a remoting send to a master as RocketMQ's proxy builds it: tag to
``TAGS``, keys to ``KEYS``, the client's message id kept as ``UNIQ_KEY``, the topic as the
producer group (``PGROUP``: the group a broker's transaction check asks), a FIFO message's
group as the sharding key ``__SHARDINGKEY``, a delivery timestamp as ``__STARTDELIVERTIME``
(what BoltMQ's brokers time by) and ``TIMER_DELIVER_MS`` (RocketMQ 5's), a transactional
one with ``TRAN_MSG`` and the prepared flag, a GZIP body with the compressed flag.

The proxy picks the queue, since a v2 send names none: a message group hashes to one writable
queue (Guava's consistent hash of Java's String.hashCode, as RocketMQ's proxy does, so a
group keeps its queue), other sends go round robin.

A transaction id handed to the client carries what END_TRANSACTION needs (broker name,
commit-log offset, queue offset, the broker's transaction id), so the proxy keeps no table of
open transactions and any proxy of the cluster can end one.
"""

from __future__ import annotations

import base64
import itertools
import logging
import time

import orjson

from client.instance import DEFAULT_TOPIC, MASTER_ID, publish_queues
from protocol.bodies import MessageQueue
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.headers import (
    EndTransactionRequestHeader,
    decode_send_response,
    encode_header,
    send_v2_fields,
)
from protocol.message import (
    MessageConst,
    MessageSysFlag,
    decode_offset_msg_id,
    properties_to_string,
    tag_hash_code,
)
from proxy import metrics
from proxy._pb.apache.rocketmq.v2 import definition_pb2 as pb
from proxy._pb.apache.rocketmq.v2 import service_pb2 as spb
from proxy.route import RouteService, validate_topic
from proxy.runtime import Context, ProxyRuntime, client_id
from proxy.status import Code, ProxyError, from_response_code, ok, status

__all__ = [
    "SHARDING_KEY",
    "TIMER_DELIVER_MS",
    "SendService",
    "TransactionHandle",
    "consistent_hash",
    "message_properties",
]

log = logging.getLogger("boltmq.proxy.send")

#: RocketMQ 5's property names this module writes besides `MessageConst`'s.
SHARDING_KEY = "__SHARDINGKEY"
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TRACE_CONTEXT = "TRACE_CONTEXT"
BORN_HOST = "__BORNHOST"
#: Property names a user may not set: the system's own (RocketMQ refuses them the same way).
RESERVED_PROPERTIES = frozenset(
    {value for name, value in vars(MessageConst).items() if name.isupper() and value.strip()}
    | {SHARDING_KEY, TIMER_DELIVER_MS, TRACE_CONTEXT, BORN_HOST, "TIMER_DELAY_SEC",
       "TIMER_DELAY_MS", "TIMER_OUT_MS", "__transactionId__", "POP_CK", "1ST_POP_TIME"}
)  # fmt: skip
#: RocketMQ's limits on a message's parts (its proxy's defaults).
MAX_USER_PROPERTIES = 128
MAX_USER_PROPERTY_BYTES = 16 * 1024
MAX_MESSAGE_GROUP_BYTES = 64

_SENT: dict[int, pb.Code] = {
    ResponseCode.SUCCESS: pb.OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: pb.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
}


class SendService:
    """SendMessage and EndTransaction over the shared client core."""

    def __init__(self, runtime: ProxyRuntime, routes: RouteService) -> None:
        self.runtime = runtime
        self.routes = routes
        self._counter = itertools.count()

    async def send_message(
        self, request: spb.SendMessageRequest, context: Context
    ) -> spb.SendMessageResponse:
        """Send every message of ``request``; one entry per message, in order."""
        try:
            client_id(context)
            if not request.messages:
                raise ProxyError(Code.MESSAGE_CORRUPTED, "the request holds no message")
            topic = validate_topic(request.messages[0].topic.name)
            if any(m.topic.name != topic for m in request.messages):
                raise ProxyError(
                    Code.MESSAGE_CORRUPTED, "every message of one request must name one topic"
                )
            prepared = [self._prepare(message) for message in request.messages]
            route = await self.routes.route(topic)
        except ProxyError as exc:
            return spb.SendMessageResponse(status=exc.status())
        queues = publish_queues(topic, route)
        if not queues:
            return spb.SendMessageResponse(
                status=status(Code.FORBIDDEN, f"topic {topic} has no writable queue")
            )
        entries = [await self._send(topic, queues, *one) for one in prepared]
        codes = {entry.status.code for entry in entries}
        if len(codes) > 1:
            answer = status(Code.MULTIPLE_RESULTS)
        else:
            answer = entries[0].status if codes != {pb.OK} else ok()
        return spb.SendMessageResponse(status=answer, entries=entries)

    async def end_transaction(
        self, request: spb.EndTransactionRequest, context: Context
    ) -> spb.EndTransactionResponse:
        """END_TRANSACTION (commit or rollback) to the broker holding the half message."""
        try:
            client_id(context)
            topic = validate_topic(request.topic.name)
            handle = TransactionHandle.decode(request.transaction_id)
            flag = {
                pb.COMMIT: MessageSysFlag.TRANSACTION_COMMIT,
                pb.ROLLBACK: MessageSysFlag.TRANSACTION_ROLLBACK,
            }.get(request.resolution)
            if flag is None:
                raise ProxyError(Code.BAD_REQUEST, "the resolution must be COMMIT or ROLLBACK")
            address = await self._master(topic, handle.broker_name)
        except ProxyError as exc:
            return spb.EndTransactionResponse(status=exc.status())
        header = EndTransactionRequestHeader(
            producer_group=topic,
            tran_state_table_offset=handle.queue_offset,
            commit_log_offset=handle.commit_log_offset,
            commit_or_rollback=flag,
            from_transaction_check=request.source == pb.SOURCE_SERVER_CHECK,
            msg_id=request.message_id,
            transaction_id=handle.transaction_id or request.message_id,
        )
        command = RemotingCommand.request(
            RequestCode.END_TRANSACTION, encode_header(header), oneway=True
        )
        try:
            # Oneway, as every RocketMQ producer ends a transaction: the broker answers none.
            await self.runtime.instance.remoting.invoke_oneway(address, command)
        except RemotingError as exc:
            return spb.EndTransactionResponse(
                status=status(
                    Code.INTERNAL_SERVER_ERROR,
                    f"END_TRANSACTION to broker {handle.broker_name} ({address}) not sent: "
                    f"{exc}; the broker will check the transaction back",
                )
            )
        return spb.EndTransactionResponse(status=ok())

    # -- internals ------------------------------------------------------------------------

    def _prepare(self, message: pb.Message) -> tuple[pb.Message, dict[str, str], int]:
        body = message.body
        if not body:
            raise ProxyError(Code.MESSAGE_BODY_EMPTY, "message body is empty")
        limit = self.runtime.config.max_message_size
        if len(body) > limit:
            raise ProxyError(
                Code.MESSAGE_BODY_TOO_LARGE,
                f"message body of {len(body)} bytes exceeds the limit of {limit} bytes "
                "(maxMessageSize)",
            )
        properties = message_properties(message)
        sys_flag = 0
        system = message.system_properties
        if system.body_encoding == pb.GZIP:
            sys_flag |= MessageSysFlag.COMPRESSED
        if system.message_type == pb.TRANSACTION:
            sys_flag |= MessageSysFlag.TRANSACTION_PREPARED
        return message, properties, sys_flag

    async def _send(
        self,
        topic: str,
        queues: list[MessageQueue],
        message: pb.Message,
        properties: dict[str, str],
        sys_flag: int,
    ) -> spb.SendResultEntry:
        group = message.system_properties.message_group
        if group:
            queue = queues[consistent_hash(tag_hash_code(group), len(queues))]
        else:
            queue = queues[next(self._counter) % len(queues)]
        born = message.system_properties.born_timestamp
        born_ms = born.seconds * 1000 + born.nanos // 1_000_000 if born.seconds else 0
        fields = send_v2_fields(
            topic, topic, DEFAULT_TOPIC, len(queues), queue.queue_id, sys_flag,
            born_ms or time.time_ns() // 1_000_000, 0, properties_to_string(properties),
        )  # fmt: skip
        command = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, message.body)
        message_id = message.system_properties.message_id
        try:
            address = await self._master(topic, queue.broker_name)
            response = await self.runtime.instance.invoke_broker(address, command)
        except ProxyError as exc:
            return spb.SendResultEntry(status=exc.status())
        except RemotingError as exc:
            return spb.SendResultEntry(
                status=status(
                    Code.PROXY_TIMEOUT if isinstance(exc, TimeoutError) else pb.INTERNAL_ERROR,
                    f"send to broker {queue.broker_name} failed: {exc}",
                )
            )
        code = _SENT.get(response.code)
        if code is None:
            return spb.SendResultEntry(
                status=from_response_code(
                    response.code,
                    f"broker {queue.broker_name} refused the send: {response.remark}",
                )
            )
        if code != pb.OK:
            return spb.SendResultEntry(
                status=status(code, f"broker {queue.broker_name}: {response.remark or ''}")
            )
        answer = decode_send_response(response.ext_fields)
        metrics.messages_in(topic, message.system_properties.message_type)
        transaction_id = ""
        if sys_flag & MessageSysFlag.TRANSACTION_PREPARED:
            _, commit_log_offset = decode_offset_msg_id(answer.msg_id)
            transaction_id = TransactionHandle(
                broker_name=queue.broker_name,
                commit_log_offset=commit_log_offset,
                queue_offset=answer.queue_offset,
                transaction_id=answer.transaction_id or message_id,
            ).encode()
        return spb.SendResultEntry(
            status=ok(),
            message_id=message_id,
            transaction_id=transaction_id,
            offset=answer.queue_offset,
        )

    async def _master(self, topic: str, broker_name: str) -> str:
        instance = self.runtime.instance
        address = instance.master_address(broker_name)
        if address is None:
            try:
                await instance.update_route(topic)
            except RemotingError as exc:
                raise ProxyError(Code.INTERNAL_SERVER_ERROR, f"route of {topic}: {exc}") from exc
            address = instance.broker_addrs.get(broker_name, {}).get(MASTER_ID)
        if address is None:
            raise ProxyError(
                Code.INTERNAL_SERVER_ERROR, f"broker {broker_name} has no master now; retry later"
            )
        return address


class TransactionHandle:
    """What ending a half message needs, carried in the v2 transaction id (opaque to clients)."""

    __slots__ = ("broker_name", "commit_log_offset", "queue_offset", "transaction_id")

    def __init__(
        self, broker_name: str, commit_log_offset: int, queue_offset: int, transaction_id: str
    ) -> None:
        self.broker_name = broker_name
        self.commit_log_offset = commit_log_offset
        self.queue_offset = queue_offset
        self.transaction_id = transaction_id

    def encode(self) -> str:
        """The transaction id handed to the client."""
        raw = orjson.dumps(
            [self.broker_name, self.commit_log_offset, self.queue_offset, self.transaction_id]
        )
        return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")

    @classmethod
    def decode(cls, text: str) -> TransactionHandle:
        """The handle in a transaction id; `ProxyError` INVALID_TRANSACTION_ID otherwise."""
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            name, commit_log_offset, queue_offset, transaction_id = orjson.loads(raw)
            if not (
                isinstance(name, str)
                and isinstance(commit_log_offset, int)
                and isinstance(queue_offset, int)
                and isinstance(transaction_id, str)
            ):
                raise ValueError("fields of the wrong type")
        except (ValueError, TypeError) as exc:
            raise ProxyError(
                Code.INVALID_TRANSACTION_ID,
                f"transaction id {text[:60]!r} was not issued by this proxy's cluster",
            ) from exc
        return cls(name, commit_log_offset, queue_offset, transaction_id)


def message_properties(message: pb.Message) -> dict[str, str]:
    """The remoting properties of a v2 message; `ProxyError` names what is illegal in it."""
    user = dict(message.user_properties)
    if len(user) > MAX_USER_PROPERTIES:
        raise ProxyError(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"{len(user)} user properties; at most {MAX_USER_PROPERTIES} are allowed",
        )
    size = 0
    for key, value in user.items():
        if key in RESERVED_PROPERTIES:
            raise ProxyError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property {key!r} is reserved by the system"
            )
        if not key or _has_control(key) or _has_control(value):
            raise ProxyError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                f"property {key!r} has an empty key or a control character",
            )
        size += len(key.encode()) + len(value.encode())
    properties = user
    system = message.system_properties
    if system.HasField("tag"):
        tag = system.tag
        if not tag.strip() or "|" in tag or _has_control(tag):
            raise ProxyError(
                Code.ILLEGAL_MESSAGE_TAG,
                f"tag {tag!r} must not be blank nor hold '|' or a control character",
            )
        properties[MessageConst.TAGS] = tag
        size += len(tag.encode())
    keys = list(system.keys)
    for key in keys:
        if not key.strip() or _has_control(key) or MessageConst.KEY_SEPARATOR in key:
            raise ProxyError(
                Code.ILLEGAL_MESSAGE_KEY,
                f"key {key!r} must not be blank nor hold a space or a control character",
            )
        size += len(key.encode())
    if keys:
        properties[MessageConst.KEYS] = MessageConst.KEY_SEPARATOR.join(keys)
    if size > MAX_USER_PROPERTY_BYTES:
        raise ProxyError(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"user properties, tag and keys take {size} bytes; at most "
            f"{MAX_USER_PROPERTY_BYTES} are allowed",
        )
    if not system.message_id.strip():
        raise ProxyError(Code.ILLEGAL_MESSAGE_ID, "the message carries no message id")
    properties[MessageConst.UNIQ_KEY] = system.message_id
    properties[MessageConst.WAIT] = "true"
    topic = message.topic.name
    # The topic stands for the producer group: v2 producers have none, and a broker's
    # transaction check asks the group's producers (the proxy's connection) about a half.
    properties[MessageConst.PGROUP] = topic
    if system.message_type == pb.TRANSACTION:
        properties[MessageConst.TRAN_MSG] = "true"
        if system.HasField("orphaned_transaction_recovery_duration"):
            seconds = system.orphaned_transaction_recovery_duration.seconds
            properties[MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS] = str(max(0, seconds))
    if system.HasField("delivery_timestamp"):
        stamp = system.delivery_timestamp
        deliver_ms = stamp.seconds * 1000 + stamp.nanos // 1_000_000
        if deliver_ms <= 0:
            raise ProxyError(
                Code.ILLEGAL_DELIVERY_TIME, f"delivery timestamp {deliver_ms} ms is not a time"
            )
        properties[MessageConst.START_DELIVER_TIME] = str(deliver_ms)
        properties[TIMER_DELIVER_MS] = str(deliver_ms)
    if system.HasField("message_group") and system.message_group:
        group = system.message_group
        if not group.strip() or _has_control(group):
            raise ProxyError(
                Code.ILLEGAL_MESSAGE_GROUP,
                f"message group {group!r} must not be blank nor hold a control character",
            )
        if len(group.encode()) >= MAX_MESSAGE_GROUP_BYTES:
            raise ProxyError(
                Code.ILLEGAL_MESSAGE_GROUP,
                f"message group {group[:20]!r}... must be under {MAX_MESSAGE_GROUP_BYTES} bytes",
            )
        properties[SHARDING_KEY] = group
    if system.HasField("trace_context") and system.trace_context:
        properties[TRACE_CONTEXT] = system.trace_context
    if system.born_host:
        properties[BORN_HOST] = system.born_host
    return properties


def consistent_hash(key: int, buckets: int) -> int:
    """Guava's ``Hashing.consistentHash``: a bucket in ``[0, buckets)`` for a 64-bit key.

    A linear congruential walk: the bucket moves only when the number of buckets grows past
    it, so adding queues moves few message groups.
    """
    if buckets <= 0:
        raise ValueError(f"buckets must be positive, not {buckets}")
    state = key & 0xFFFFFFFFFFFFFFFF
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFFFFFFFFFFFFFF
        # ((int) (state >>> 33) + 1) / 2^31: the top 31 bits, always a positive int
        ratio = ((state >> 33) + 1) / float(1 << 31)
        following = int((candidate + 1) / ratio)
        if 0 <= following < buckets:
            candidate = following
        else:
            return candidate


def _has_control(text: str) -> bool:
    return any(ord(c) < 0x20 or ord(c) == 0x7F for c in text)
