"""A popped message as MessagingService's ``Message``, with RocketMQ 5's system properties.

The body goes out as stored but inflated (encoding IDENTITY), with a CRC32 digest of those
bytes as eight upper-case hex digits, the form the official clients check. The receipt handle
is the broker's with the message's commit-log offset as a ninth field (RocketMQ 5's proxy
form), so ForwardMessageToDeadLetterQueue needs nothing but the handle.
"""

from __future__ import annotations

import zlib

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from client.pop import PoppedMessage, ReceiptHandle
from protocol.message import MessageConst
from proxy._pb.apache.rocketmq.v2 import definition_pb2 as pb

__all__ = ["SYSTEM_PROPERTY_KEYS", "to_grpc_message"]

# RocketMQ's message property names the gRPC message carries as system properties or that
# are the brokers' bookkeeping: none of them is shown to the user as a user property.
SHARDING_KEY = "__SHARDINGKEY"
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
BORN_HOST = "__BORNHOST"
TRACE_CONTEXT = "TRACE_CONTEXT"
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
SYSTEM_PROPERTY_KEYS = frozenset(
    {
        "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG",
        "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG",
        "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "UNIQ_KEY",
        "EXTEND_UNIQ_INFO", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "INNER_NUM",
        "INNER_BASE", "CHECK_IMMUNITY_TIME_IN_SECONDS", "TRAN_PREPARED_QUEUE_OFFSET",
        "__transactionId__", "TRANSACTION_CHECK_TIMES", "INSTANCE_ID", "CORRELATION_ID",
        "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE",
        "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", SHARDING_KEY, "PROPERTY_FORWARD_QUEUE_ID",
        "REDIRECT", "INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET", TRACE_CONTEXT,
        TIMER_DELAY_SEC, TIMER_DELIVER_MS, BORN_HOST, "BORN_TIMESTAMP", "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY",
        "TIMER_DELAY_LEVEL", "TIMER_DELAY_MS", "__CRC32#", DLQ_ORIGIN_TOPIC,
        DLQ_ORIGIN_MESSAGE_ID, MessageConst.START_DELIVER_TIME, MessageConst.DEDUP_KEY,
    }
)  # fmt: skip


def to_grpc_message(popped: PoppedMessage, invisible_ms: int) -> pb.Message:
    """The gRPC form of one popped message."""
    message = popped.message
    properties = message.properties
    body = message.decompressed_body()
    system = pb.SystemProperties(
        message_id=message.msg_id,
        body_digest=pb.Digest(type=pb.CRC32, checksum=f"{zlib.crc32(body) & 0xFFFFFFFF:08X}"),
        body_encoding=pb.IDENTITY,
        message_type=_message_type(properties),
        born_timestamp=_timestamp(message.born_timestamp),
        born_host=properties.get(BORN_HOST) or _host(message.born_host),
        store_timestamp=_timestamp(message.store_timestamp),
        store_host=_host(message.store_host),
        receipt_handle=grpc_receipt_handle(popped),
        queue_id=message.queue_id,
        queue_offset=message.queue_offset,
        invisible_duration=_duration(invisible_ms),
        delivery_attempt=popped.delivery_attempt,
    )
    tag = message.tags
    if tag is not None:
        system.tag = tag
    system.keys.extend(message.keys)
    delivery_ms = _delivery_ms(properties, message.born_timestamp)
    if delivery_ms is not None:
        system.delivery_timestamp.CopyFrom(_timestamp(delivery_ms))
    if SHARDING_KEY in properties:
        system.message_group = properties[SHARDING_KEY]
    if TRACE_CONTEXT in properties:
        system.trace_context = properties[TRACE_CONTEXT]
    if DLQ_ORIGIN_TOPIC in properties and DLQ_ORIGIN_MESSAGE_ID in properties:
        system.dead_letter_queue.CopyFrom(
            pb.DeadLetterQueue(
                topic=properties[DLQ_ORIGIN_TOPIC], message_id=properties[DLQ_ORIGIN_MESSAGE_ID]
            )
        )
    user = {k: v for k, v in properties.items() if k not in SYSTEM_PROPERTY_KEYS}
    return pb.Message(
        topic=pb.Resource(name=message.topic),
        user_properties=user,
        system_properties=system,
        body=body,
    )


def grpc_receipt_handle(popped: PoppedMessage) -> str:
    """The broker's handle with the commit-log offset as a ninth field."""
    handle = ReceiptHandle.parse(popped.receipt_handle)
    return ReceiptHandle(
        handle.start_offset, handle.pop_time, handle.invisible_time, handle.revive_qid,
        handle.topic_type, handle.broker_name, handle.queue_id, handle.offset,
        popped.message.commit_log_offset,
    ).encode()  # fmt: skip


def _message_type(properties: dict[str, str]) -> pb.MessageType:
    if properties.get(MessageConst.TRAN_MSG) == "true":
        return pb.TRANSACTION
    if (
        MessageConst.DELAY in properties
        or TIMER_DELIVER_MS in properties
        or TIMER_DELAY_SEC in properties
        or MessageConst.START_DELIVER_TIME in properties
    ):
        return pb.DELAY
    if SHARDING_KEY in properties:
        return pb.FIFO
    return pb.NORMAL


def _delivery_ms(properties: dict[str, str], born_ms: int) -> int | None:
    """When a timer message was due: TIMER_DELIVER_MS, or born + TIMER_DELAY_SEC, or the
    4.x __STARTDELIVERTIME."""
    try:
        if TIMER_DELIVER_MS in properties:
            return int(properties[TIMER_DELIVER_MS])
        if TIMER_DELAY_SEC in properties:
            return born_ms + int(properties[TIMER_DELAY_SEC]) * 1000
        if MessageConst.START_DELIVER_TIME in properties:
            return int(properties[MessageConst.START_DELIVER_TIME])
    except ValueError:
        return None
    return None


def _timestamp(ms: int) -> Timestamp:
    stamp = Timestamp()
    stamp.FromMilliseconds(ms)
    return stamp


def _duration(ms: int) -> Duration:
    duration = Duration()
    duration.FromMilliseconds(ms)
    return duration


def _host(host: tuple[str, int]) -> str:
    address, port = host
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
