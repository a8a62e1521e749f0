"""How a message reads in every message and dead-letter verb: in full (`message_document`,
`detail_table`) and as a row of a list (`MESSAGE_COLUMNS`, `message_row`); and the time flags.
"""

from __future__ import annotations

import argparse
import base64
import datetime
from collections.abc import Sequence
from typing import Any

from boltmq.cli.admin._output import Column, Result, Table, human_time, number, timestamp
from protocol.message import MessageExt

MESSAGE_COLUMNS = (
    Column("msgId", "Message ID"),
    Column("offsetMsgId", "Offset Message ID"),
    Column("brokerName", "Broker Name"),
    number("queueId", "QID"),
    number("queueOffset", "Offset"),
    Column("tags", "Tags"),
    Column("keys", "Keys", lambda v: " ".join(v or ()) or "-"),
    number("reconsumeTimes", "Reconsume"),
    timestamp("storeTimestamp", "Store Time"),
    Column("body", "Body"),
)

DETAIL_TITLES = {
    "msgId": "Message ID", "offsetMsgId": "Offset Message ID", "topic": "Topic",
    "tags": "Tags", "keys": "Keys", "queueId": "Queue ID", "queueOffset": "Queue Offset",
    "commitLogOffset": "CommitLog Offset", "reconsumeTimes": "Reconsume Times",
    "bornTimestamp": "Born Timestamp", "bornHost": "Born Host",
    "storeTimestamp": "Store Timestamp", "storeHost": "Store Host", "sysFlag": "System Flag",
    "flag": "Flag", "properties": "Properties", "body": "Body",
}  # fmt: skip

TIME_HELP = "milliseconds since the epoch, or yyyy-MM-dd#HH:mm:ss:SSS (local time)"

# -- how a message reads ----------------------------------------------------------------------


def body_text(message: MessageExt, charset: str = "utf-8") -> str:
    """The body as text in ``charset``; bytes that do not decode read as U+FFFD."""
    return message.decompressed_body().decode(charset, errors="replace")


def message_document(message: MessageExt, charset: str = "utf-8") -> dict[str, Any]:
    """One message in full, camelCase keys; ``bodyBase64`` keeps the exact bytes."""
    body = message.decompressed_body()
    return {
        "msgId": message.msg_id,
        "offsetMsgId": message.offset_msg_id,
        "topic": message.topic,
        "tags": message.tags,
        "keys": message.keys,
        "queueId": message.queue_id,
        "queueOffset": message.queue_offset,
        "commitLogOffset": message.commit_log_offset,
        "reconsumeTimes": message.reconsume_times,
        "bornTimestamp": message.born_timestamp,
        "bornHost": host_text(message.born_host),
        "storeTimestamp": message.store_timestamp,
        "storeHost": host_text(message.store_host),
        "sysFlag": message.sys_flag,
        "flag": message.flag,
        "properties": dict(sorted(message.properties.items())),
        "body": body.decode(charset, errors="replace"),
        "bodyBase64": base64.b64encode(body).decode(),
    }


def message_row(
    message: MessageExt,
    broker_name: str | None = None,
    *,
    charset: str = "utf-8",
    with_body: bool = True,
) -> dict[str, Any]:
    """One message in a list: the keys of ``MESSAGE_COLUMNS``."""
    return {
        "msgId": message.msg_id,
        "offsetMsgId": message.offset_msg_id,
        "brokerName": broker_name,
        "queueId": message.queue_id,
        "queueOffset": message.queue_offset,
        "tags": message.tags,
        "keys": message.keys,
        "reconsumeTimes": message.reconsume_times,
        "storeTimestamp": message.store_timestamp,
        "body": body_text(message, charset) if with_body else None,
    }


def detail_table(document: dict[str, Any]) -> Table:
    """A message's fields as a two-column table titled with its msgId."""
    rows = []
    for key, title in DETAIL_TITLES.items():
        value: Any = document.get(key)
        if key == "properties":
            value = ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
        elif key == "keys":
            value = " ".join(value) or "-"
        elif key in ("bornTimestamp", "storeTimestamp"):
            value = f"{human_time(value)} ({value})"
        rows.append({"field": title, "value": value})
    columns = (Column("field", "Field"), Column("value", "Value"))
    return Table(columns, rows, title=f"message {document['msgId']}")


def details(messages: Sequence[MessageExt], charset: str = "utf-8") -> Result:
    """Messages in full: a JSON list of documents, a field table per message."""
    documents = [message_document(m, charset) for m in messages]
    return Result(documents, tuple(detail_table(d) for d in documents))


def time_arg(text: str) -> int:
    """An argparse type: milliseconds since the epoch, or mqadmin's yyyy-MM-dd#HH:mm:ss:SSS."""
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f")
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time; give milliseconds since the epoch or "
            "yyyy-MM-dd#HH:mm:ss:SSS, e.g. 2026-01-31#13:45:00:000"
        ) from None
    return int(moment.timestamp() * 1000)


def host_text(host: tuple[str, int]) -> str:
    """A host as ``ip:port``."""
    return f"{host[0]}:{host[1]}"
