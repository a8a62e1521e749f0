"""The batch writer: each partition's rows become messages sent by one producer.

Columns: ``body`` (binary or string, required), ``topic`` (string; the ``topic`` option, when
given, wins over it, as with Spark's Kafka sink), ``tags`` and ``keys`` (strings; keys
space-separated, RocketMQ's form), ``properties`` (map<string,string>), ``delayLevel`` (int:
RocketMQ's delay level, the DELAY property) and ``deliverTimeMs`` (long: the epoch ms to
deliver at, the ``__STARTDELIVERTIME`` property of timed delivery). The other columns
of the read schema (queueId, msgId, ...) are accepted and ignored, so a read can be written
back; any other column is refused by name, since a misspelt ``tag`` would otherwise drop
every row's tags without a word.

Each task's rows go out through one `pipeline.sender.Sender` (batches per topic, a queue per
batch, retries). A send that fails fails the task with the topic, the row count and the
brokers' answer; messages already sent stay sent (a queue cannot take a message back),
which `BoltMQWriter.abort` logs.

With ``exactlyOnce=true`` every message carries a dedup key (``BOLTMQ_DEDUP_KEY``) made of
the write id, the partition id and the row's number in its partition, so a task that runs
again sends the same keys, and a BoltMQ broker stores each key once (`dedup_key`).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator, Mapping
from typing import Any

import attrs
from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructType,
)

from client import Message
from pipeline.errors import OptionError, WriteError
from pipeline.options import WriteOptions
from pipeline.schema import SCHEMA, SYSTEM_PROPERTIES
from pipeline.sender import Sender
from protocol.message import MessageConst

DEDUP_KEY = MessageConst.DEDUP_KEY
"""The property an exactly-once write's messages carry their key in."""

log = logging.getLogger("boltmq.pipeline")

_WRITE_COLUMNS: dict[str, tuple[DataType, ...]] = {
    "body": (BinaryType(), StringType()),
    "topic": (StringType(),),
    "tags": (StringType(),),
    "keys": (StringType(),),
    "properties": (MapType(StringType(), StringType()),),
    "delayLevel": (IntegerType(), LongType()),
    "deliverTimeMs": (LongType(), IntegerType()),
}
_IGNORED_COLUMNS = frozenset(f.name for f in SCHEMA.fields) - set(_WRITE_COLUMNS)


@attrs.frozen
class BoltMQCommitMessage(WriterCommitMessage):
    """What one write task sent: messages per topic, body bytes, sends (a batch or a lone
    message each), and sends the broker stored but answered with a status other than SEND_OK
    (a SYNC_MASTER whose slave was not in sync)."""

    messages: Mapping[str, int]
    body_bytes: int
    sends: int
    not_ok: int


def check_columns(schema: StructType, options: WriteOptions) -> tuple[str, ...]:
    """The columns a write uses; WriteError names a column it cannot take."""
    names = [f.name for f in schema.fields]
    for field in schema.fields:
        accepted = _WRITE_COLUMNS.get(field.name)
        if accepted is None:
            if field.name in _IGNORED_COLUMNS:
                continue
            raise WriteError(
                f"boltmq cannot write column {field.name!r}; a write takes "
                f"{', '.join(_WRITE_COLUMNS)} (and ignores the other columns a read gives)"
            )
        if not any(_same_type(field.dataType, t) for t in accepted):
            raise WriteError(
                f"column {field.name} must be "
                f"{' or '.join(t.simpleString() for t in accepted)}, "
                f"not {field.dataType.simpleString()}"
            )
    if "body" not in names:
        raise WriteError("a write needs a body column (binary or string)")
    if "topic" not in names and options.topic is None:
        raise OptionError("a write needs a topic: give option topic, or a topic column")
    return tuple(n for n in names if n in _WRITE_COLUMNS)


class BoltMQWriter(DataSourceWriter):
    """Sends each partition's rows as messages (``df.write.format("boltmq")``)."""

    def __init__(self, options: WriteOptions, columns: tuple[str, ...]) -> None:
        self.options = options
        self.columns = columns
        #: Drawn once on the driver: each task starts its queues at this plus its partition id.
        self.queue_offset = random.randrange(1 << 16)

    def write(self, iterator: Iterator[Row]) -> BoltMQCommitMessage:
        """Send the rows of one partition; the counts go back to the driver."""
        prefix = None
        if self.options.exactly_once:
            assert self.options.write_id is not None  # write_options insists
            prefix = self.options.write_id
        return send_rows(self.options, self.columns, iterator, prefix, self.queue_offset)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Log what the job sent."""
        sent, body_bytes, sends, not_ok = totals(messages)
        log.info(
            "boltmq write: %d message(s) (%d body bytes) in %d send(s) to %s%s",
            sum(sent.values()), body_bytes, sends,
            ", ".join(f"{t}: {n}" for t, n in sorted(sent.items())) or "no topic",
            f"; {not_ok} send(s) not SEND_OK" if not_ok else "",
        )  # fmt: skip

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Log what the tasks that finished had sent: those messages stay in their topics."""
        sent, _, _, _ = totals(messages)
        log.error(
            "boltmq write failed; tasks that finished had sent %d message(s) (%s), which stay "
            "in their topics (tasks that failed may have sent some of theirs too)",
            sum(sent.values()),
            ", ".join(f"{t}: {n}" for t, n in sorted(sent.items())) or "none",
        )


def dedup_key(prefix: str, partition: int, number: int) -> str:
    """The dedup key of row ``number`` of a partition: ``prefix:partition:number``; the prefix
    is the write id, or the query id and batch id of a micro-batch."""
    return f"{prefix}:{partition}:{number}"


def send_rows(
    options: WriteOptions,
    columns: tuple[str, ...],
    rows: Iterator[Row],
    prefix: str | None,
    queue_offset: int = 0,
) -> BoltMQCommitMessage:
    """Send one partition's rows, starting at queue ``partition id + queue_offset``; with a
    ``prefix``, each with its dedup key (`dedup_key`), to queues chosen from the partition id."""
    partition = _partition_id()
    pinned = partition if prefix is not None else None
    start = None if prefix is not None else partition + queue_offset
    with Sender(options.namesrv_addr, pinned=pinned, start=start) as sender:
        for number, row in enumerate(rows, 1):
            message = row_message(options, columns, row, number)
            if prefix is not None:
                message.properties = {**message.properties,
                                      DEDUP_KEY: dedup_key(prefix, partition, number)}  # fmt: skip
            sender.add(message)
        sender.flush()
    return BoltMQCommitMessage(messages=sender.counts, body_bytes=sender.body_bytes,
                               sends=sender.sends, not_ok=sender.not_ok)  # fmt: skip


def row_message(options: WriteOptions, columns: tuple[str, ...], row: Row, number: int) -> Message:
    """Row ``number`` of this partition as a message; WriteError says what is wrong."""
    fields: dict[str, Any] = {c: row[c] for c in columns}
    topic = options.topic or fields.get("topic")
    if not topic:
        raise WriteError(f"row {number} of this partition has no topic (its topic is null)")
    body = fields["body"]
    if body is None or len(body) == 0:
        raise WriteError(
            f"row {number} of this partition (topic {topic}) has an empty body: RocketMQ "
            "stores no empty messages"
        )
    if isinstance(body, str):
        body = body.encode()
    properties: dict[str, str] = dict(fields.get("properties") or {})
    reserved = sorted(SYSTEM_PROPERTIES.intersection(properties))
    if reserved:
        raise WriteError(
            f"row {number} of this partition (topic {topic}): properties "
            f"{', '.join(reserved)} are reserved by RocketMQ; use the tags and keys columns"
        )
    if any(v is None for v in properties.values()):
        raise WriteError(f"row {number} of this partition (topic {topic}): a property is null")
    delay_level, deliver_time_ms = _delivery(fields, number, topic)
    return Message(topic, bytes(body), tags=fields.get("tags") or None,
                   keys=fields.get("keys") or None, properties=properties,
                   delay_level=delay_level, deliver_time_ms=deliver_time_ms)  # fmt: skip


def _delivery(fields: dict[str, Any], number: int, topic: str) -> tuple[int, int | None]:
    """(delay level, deliver time) of a row: 0 and None unless its columns say otherwise."""
    level = fields.get("delayLevel") or 0
    at = fields.get("deliverTimeMs")
    where = f"row {number} of this partition (topic {topic})"
    if level < 0:
        raise WriteError(f"{where}: delayLevel {level} is negative; give 1.. or null for none")
    if at is not None and at <= 0:
        raise WriteError(f"{where}: deliverTimeMs {at} is not an epoch time in ms")
    if level and at is not None:
        raise WriteError(f"{where}: give delayLevel or deliverTimeMs, not both")
    return level, at


def _partition_id() -> int:
    context = TaskContext.get()
    if context is None:
        raise WriteError("a boltmq write runs in a Spark task (no task context here)")
    return context.partitionId()


def totals(messages: list[WriterCommitMessage | None]) -> tuple[dict[str, int], int, int, int]:
    """Messages per topic, body bytes, sends and sends not SEND_OK over the tasks' messages."""
    per_topic: dict[str, int] = {}
    body_bytes = sends = not_ok = 0
    for message in messages:
        if isinstance(message, BoltMQCommitMessage):
            for topic, count in message.messages.items():
                per_topic[topic] = per_topic.get(topic, 0) + count
            body_bytes += message.body_bytes
            sends += message.sends
            not_ok += message.not_ok
    return per_topic, body_bytes, sends, not_ok


def _same_type(given: DataType, wanted: DataType) -> bool:
    # Nullability (of map values too) is Spark's bookkeeping; a null value is refused per row.
    return given.simpleString() == wanted.simpleString()
