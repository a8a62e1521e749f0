"""Messages as Arrow record batches of the row schema, a column at a time."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from pipeline.schema import SYSTEM_PROPERTIES
from protocol.message import MessageConst, MessageExt

_MAP = pa.map_(pa.field("key", pa.string(), nullable=False),
               pa.field("value", pa.string(), nullable=False))  # fmt: skip

ARROW_SCHEMA = pa.schema([
    pa.field("topic", pa.string(), nullable=False),
    pa.field("brokerName", pa.string(), nullable=False),
    pa.field("queueId", pa.int32(), nullable=False),
    pa.field("queueOffset", pa.int64(), nullable=False),
    pa.field("msgId", pa.string(), nullable=False),
    pa.field("keys", pa.string()),
    pa.field("tags", pa.string()),
    pa.field("body", pa.binary(), nullable=False),
    pa.field("properties", _MAP, nullable=False),
    pa.field("bornTimestamp", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("storeTimestamp", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("bornHost", pa.string(), nullable=False),
    pa.field("reconsumeTimes", pa.int32(), nullable=False),
])  # fmt: skip
"""`pipeline.schema.SCHEMA` in Arrow's types."""


def record_batch(messages: Sequence[MessageExt], broker_name: str) -> pa.RecordBatch:
    """``messages``, read from broker ``broker_name``, as one record batch of ARROW_SCHEMA."""
    count = len(messages)
    properties = [m.properties for m in messages]
    hosts = [m.born_host for m in messages]
    columns = [
        pa.array([m.topic for m in messages], pa.string()),
        pa.array([broker_name] * count, pa.string()),
        pa.array([m.queue_id for m in messages], pa.int32()),
        pa.array([m.queue_offset for m in messages], pa.int64()),
        pa.array([m.msg_id for m in messages], pa.string()),
        pa.array([p.get(MessageConst.KEYS) or None for p in properties], pa.string()),
        pa.array([p.get(MessageConst.TAGS) or None for p in properties], pa.string()),
        pa.array([m.decompressed_body() for m in messages], pa.binary()),
        pa.array([[(k, v) for k, v in p.items() if k not in SYSTEM_PROPERTIES]
                  for p in properties], _MAP),
        pa.array([m.born_timestamp * 1000 for m in messages], pa.timestamp("us", tz="UTC")),
        pa.array([m.store_timestamp * 1000 for m in messages], pa.timestamp("us", tz="UTC")),
        pa.array([f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in hosts], pa.string()),
        pa.array([m.reconsume_times for m in messages], pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
