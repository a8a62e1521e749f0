"""The rows a read yields: the schema, and one stored message as one row.

``properties`` holds the user's properties only. The keys RocketMQ itself sets or reads
(TAGS, KEYS, UNIQ_KEY, WAIT, DELAY, the transaction and retry keys, ...; Java's
MessageConst.STRING_HASH_SET) are left out: tags, keys and the message id have columns of
their own, and the rest describe the broker's handling, not the data. A write refuses those
keys in its properties column for the same reason the Java client does.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from protocol.message import MessageConst, MessageExt

SCHEMA = StructType([
    StructField("topic", StringType(), nullable=False),
    StructField("brokerName", StringType(), nullable=False),
    StructField("queueId", IntegerType(), nullable=False),
    StructField("queueOffset", LongType(), nullable=False),
    StructField("msgId", StringType(), nullable=False),
    StructField("keys", StringType(), nullable=True),
    StructField("tags", StringType(), nullable=True),
    StructField("body", BinaryType(), nullable=False),
    StructField("properties", MapType(StringType(), StringType(), valueContainsNull=False),
                nullable=False),
    StructField("bornTimestamp", TimestampType(), nullable=False),
    StructField("storeTimestamp", TimestampType(), nullable=False),
    StructField("bornHost", StringType(), nullable=False),
    StructField("reconsumeTimes", IntegerType(), nullable=False),
])  # fmt: skip
"""What ``spark.read.format("boltmq")`` gives: one row per message."""

SYSTEM_PROPERTIES = frozenset(
    value for name, value in vars(MessageConst).items()
    if not name.startswith("_") and isinstance(value, str)
)  # fmt: skip
"""Property keys RocketMQ reserves; not part of the ``properties`` column."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def timestamp(millis: int) -> datetime:
    """A stored millisecond timestamp as an aware UTC datetime (exact: no float on the way)."""
    return _EPOCH + timedelta(milliseconds=millis)


def message_row(message: MessageExt, broker_name: str) -> tuple[Any, ...]:
    """One row of `SCHEMA` for ``message``, read from broker ``broker_name``; the body is the
    stored one inflated if the producer compressed it."""
    properties = message.properties
    host, port = message.born_host
    return (
        message.topic,
        broker_name,
        message.queue_id,
        message.queue_offset,
        message.msg_id,
        properties.get(MessageConst.KEYS) or None,
        properties.get(MessageConst.TAGS) or None,
        message.decompressed_body(),
        {k: v for k, v in properties.items() if k not in SYSTEM_PROPERTIES},
        timestamp(message.born_timestamp),
        timestamp(message.store_timestamp),
        f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
        message.reconsume_times,
    )


def same_columns(schema: StructType, other: StructType) -> bool:
    """Whether two schemas have the same column names and types (nullability aside)."""
    return [(f.name, f.dataType.simpleString()) for f in schema.fields] == [
        (f.name, f.dataType.simpleString()) for f in other.fields
    ]
