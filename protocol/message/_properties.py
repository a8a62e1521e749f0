"""Message properties: the well-known keys (MessageConst), the properties string (``name\\x01value``
pairs joined by ``\\x02``), and the hash code of TAGS that a consume-queue entry stores.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

PROPERTY_SEPARATOR = "\x02"
NAME_VALUE_SEPARATOR = "\x01"


class MessageConst:
    """Well-known property keys (sheet 5.4); Java's constant names without ``PROPERTY_``."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT_STORE_MSG_OK = "WAIT"
    DELAY_TIME_LEVEL = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QUEUE_ID = "REAL_QID"
    TRANSACTION_PREPARED = "TRAN_MSG"
    PRODUCER_GROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    BUYER_ID = "BUYER_ID"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    TRANSFER_FLAG = "TRANSFER_FLAG"
    CORRECTION_FLAG = "CORRECTION_FLAG"
    MQ2_FLAG = "MQ2_FLAG"
    RECONSUME_TIME = "RECONSUME_TIME"
    MSG_REGION = "MSG_REGION"
    TRACE_SWITCH = "TRACE_ON"
    UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
    TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    INSTANCE_ID = "INSTANCE_ID"
    CORRELATION_ID = "CORRELATION_ID"
    MESSAGE_REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
    MESSAGE_TTL = "TTL"
    REPLY_MESSAGE_ARRIVE_TIME = "ARRIVE_TIME"
    PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
    MESSAGE_TYPE = "MSG_TYPE"
    CLUSTER = "CLUSTER"
    INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
    INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
    START_DELIVER_TIME = "__STARTDELIVERTIME"
    # BoltMQ's own, not RocketMQ's: a BoltMQ broker stores a message with a key it stored
    # within its dedup window only once (actors.broker.services.dedup); Apache brokers ignore it.
    DEDUP_KEY = "BOLTMQ_DEDUP_KEY"
    # Aliases under the short names people use.
    WAIT = WAIT_STORE_MSG_OK
    DELAY = DELAY_TIME_LEVEL
    UNIQ_KEY = UNIQ_CLIENT_MESSAGE_ID_KEYIDX
    REAL_QID = REAL_QUEUE_ID
    TRAN_MSG = TRANSACTION_PREPARED
    PGROUP = PRODUCER_GROUP
    KEY_SEPARATOR = " "


def tag_hash_code(tag: str | None) -> int:
    """Java ``String.hashCode`` of ``tag`` (UTF-16 units, signed 32-bit); empty or None -> 0."""
    if not tag:
        return 0
    if _compiled_hash is not None:
        return _compiled_hash(tag)
    return tag_hash_code_py(tag)


def tag_hash_code_py(tag: str) -> int:
    """`tag_hash_code` in pure Python (the compiled module's reference)."""
    h = 0
    if tag.isascii():
        for ch in tag.encode():
            h = (31 * h + ch) & 0xFFFFFFFF
    else:
        # surrogatepass: a lone surrogate is one UTF-16 unit in Java too, not an error.
        units = tag.encode("utf-16-be", "surrogatepass")
        for i in range(0, len(units), 2):
            h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def properties_to_string(props: Mapping[str, str]) -> str:
    """``name\\x01value`` pairs joined by ``\\x02``, no trailing one; empty values skipped."""
    return PROPERTY_SEPARATOR.join(
        f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items() if k and v is not None and v != ""
    )


def string_to_properties(text: str) -> dict[str, str]:
    """Parse a properties string as Java does: pieces without a name or a value are dropped."""
    props: dict[str, str] = {}
    if not text:
        return props
    for piece in text.split(PROPERTY_SEPARATOR):
        name, sep, value = piece.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            props[name] = value
    return props


_compiled_hash: Callable[[str], int] | None
try:
    from protocol._speedups import java_hash as _compiled_hash
except ImportError:
    _compiled_hash = None
