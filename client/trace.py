"""Message traces as RocketMQ's clients write them (``enableMsgTrace``): decoding the records a
Java or C++ client stores in the trace topic, for `boltmq admin queryMsgTraceById`.

A trace message's body holds one or more records, each ended by ``\\x02``; a record's fields
are separated by ``\\x01`` and start with its type. The fields of each type, in order:

- ``Pub``: time (ms), region, producer group, topic, msgId, tags, keys, store host, body
  length, cost (ms), message type (ordinal), then ``success`` alone (oldest clients), or the
  offset msgId and ``success``, and in later clients the client host after them.
- ``SubBefore``: time, region, consumer group, request id, msgId, retry times, keys.
- ``SubAfter``: request id, msgId, cost, ``success``, keys, then optionally the context code,
  and the time and consumer group (clients since 4.9 write both).
- ``EndTransaction``: time, region, producer group, topic, msgId, tags, keys, store host,
  message type, transaction id, transaction state, ``fromTransactionCheck``.

The trace message itself is keyed by every msgId and key it traces, so a key query on the
trace topic finds the records of one message. Records of unknown types are skipped; a record
too short for its type is skipped too (`decode_trace_data` never raises on text).
"""

from __future__ import annotations

import attrs

#: Where clients write traces unless configured otherwise (RocketMQ's RMQ_SYS_TRACE_TOPIC).
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
FIELD_SEPARATOR = "\x01"
RECORD_SEPARATOR = "\x02"
TRACE_TYPES = ("Pub", "SubBefore", "SubAfter", "EndTransaction")


@attrs.frozen
class TraceRecord:
    """One decoded trace record: what happened to ``msg_id`` (``type``: Pub, SubBefore,
    SubAfter or EndTransaction), when, in which group, how long it took and whether it
    succeeded. Fields a record type does not carry are empty or 0."""

    type: str
    msg_id: str
    timestamp: int = 0
    group: str = ""
    topic: str = ""
    tags: str = ""
    keys: str = ""
    store_host: str = ""
    client_host: str = ""
    offset_msg_id: str = ""
    cost_ms: int = 0
    success: bool = True
    retry_times: int = 0
    request_id: str = ""
    transaction_id: str = ""
    transaction_state: str = ""


def decode_trace_data(text: str) -> list[TraceRecord]:
    """Every record in a trace message's body (see the module docstring)."""
    records = []
    for raw in text.split(RECORD_SEPARATOR):
        fields = raw.split(FIELD_SEPARATOR)
        try:
            record = _decode(fields)
        except (IndexError, ValueError):
            continue  # a record cut short or of a newer layout: the others still read
        if record is not None:
            records.append(record)
    return records


def _decode(f: list[str]) -> TraceRecord | None:
    kind = f[0]
    if kind == "Pub":
        offset_msg_id, success, client_host = "", f[12] if len(f) == 13 else "true", ""
        if len(f) >= 14:
            offset_msg_id, success = f[12], f[13]
        if len(f) >= 15:
            client_host = f[14]
        return TraceRecord(
            "Pub", f[5], timestamp=int(f[1]), group=f[3], topic=f[4], tags=f[6], keys=f[7],
            store_host=f[8], cost_ms=int(f[10]), offset_msg_id=offset_msg_id,
            success=_true(success), client_host=client_host,
        )  # fmt: skip
    if kind == "SubBefore":
        return TraceRecord(
            "SubBefore", f[5], timestamp=int(f[1]), group=f[3], request_id=f[4],
            retry_times=int(f[6]), keys=f[7],
        )  # fmt: skip
    if kind == "SubAfter":
        timestamp, group = 0, ""
        if len(f) >= 9 and f[7]:
            timestamp, group = int(f[7]), f[8]
        return TraceRecord(
            "SubAfter", f[2], request_id=f[1], cost_ms=int(f[3]), success=_true(f[4]),
            keys=f[5], timestamp=timestamp, group=group,
        )  # fmt: skip
    if kind == "EndTransaction":
        return TraceRecord(
            "EndTransaction", f[5], timestamp=int(f[1]), group=f[3], topic=f[4], tags=f[6],
            keys=f[7], store_host=f[8], transaction_id=f[10], transaction_state=f[11],
        )  # fmt: skip
    return None


def _true(text: str) -> bool:
    # Java's Boolean.parseBoolean: "true" in any case is true, anything else false.
    return text.lower() == "true"
