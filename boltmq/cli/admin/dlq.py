"""`boltmq admin dlq ACTION -g GROUP`: a consumer group's dead letters (``%DLQ%<group>``).

- ``list``: every dead letter still stored, with the topic it came from (RETRY_TOPIC) and the
  first copy's id (ORIGIN_MESSAGE_ID);
- ``show -i MSGID...``: dead letters in full;
- ``resend (--all | -i MSGID...)``: a copy of each back to its original topic, once: a copy
  carries ``DLQ_RESENT_FROM`` (the dead letter's offset msgId) and keeps the msgId, and a
  resend first asks the topic's index whether that copy exists (see client/dead_letters.py);
- ``export -o FILE.jsonl``: one JSON document per dead letter, as ``show --json`` prints them.

Dead letters stay in the DLQ: resending copies them, it neither deletes nor moves them.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import orjson

from boltmq.cli.admin._message_view import detail_table, message_document
from boltmq.cli.admin._output import Column, Result, Table, number, timestamp
from boltmq.cli.admin._verbs import AdminError, UsageError, arg, group_arg, verb
from client import Admin, MQClientError
from client.dead_letters import DeadLetters, ResendOutcome, ResendStatus, dlq_topic
from protocol.codes import ResponseCode
from protocol.message import MessageConst, MessageExt

ACTIONS = ("list", "show", "resend", "export")

LIST_COLUMNS = (
    Column("msgId", "Message ID"),
    Column("offsetMsgId", "DLQ Offset Message ID"),
    Column("originTopic", "Origin Topic"),
    Column("originMsgId", "Origin Offset Message ID"),
    number("queueOffset", "DLQ Offset"),
    Column("tags", "Tags"),
    Column("keys", "Keys", lambda v: " ".join(v or ()) or "-"),
    number("reconsumeTimes", "Reconsume"),
    timestamp("storeTimestamp", "Died At"),
    Column("body", "Body"),
)

RESEND_COLUMNS = (
    Column("msgId", "Message ID"),
    Column("dlqOffsetMsgId", "DLQ Offset Message ID"),
    Column("topic", "To Topic"),
    Column("status", "Status"),
    Column("offsetMsgId", "Copy Offset Message ID"),
    number("queueId", "QID"),
    number("queueOffset", "Queue Offset"),
)

EXAMPLE = """boltmq admin dlq list -g OrderConsumers
  boltmq admin dlq show -g OrderConsumers -i 7F0000010F2A18B4AAC2166E0C2A0000
  boltmq admin dlq resend -g OrderConsumers --all       # each dead letter once, run it twice
  boltmq admin dlq resend -g OrderConsumers -i MSGID [-i MSGID ...]
  boltmq admin dlq export -g OrderConsumers -o dead.jsonl"""


@verb(
    "dlq",
    "a group's dead letters: list, show, resend (each once) to the original topic, export",
    EXAMPLE,
    [
        arg("action", choices=ACTIONS, help="list | show | resend | export"),
        group_arg(),
        arg(
            "-i",
            "--msgId",
            dest="msg_ids",
            metavar="MSGID",
            action="append",
            default=[],
            help="a dead letter's msgId or DLQ offset msgId (repeat, or comma separated)",
        ),
        arg("--all", dest="all", action="store_true", help="resend: every dead letter"),
        arg(
            "-o",
            "--output",
            dest="output",
            metavar="FILE",
            help="export: the JSON Lines file to write",
        ),
    ],
)
async def dlq(admin: Admin, args: argparse.Namespace) -> Result:
    """dlq ACTION: the four dead-letter actions over `client.dead_letters.DeadLetters`."""
    ids = [i.strip() for text in args.msg_ids for i in text.split(",") if i.strip()]
    _check_flags(args, ids)
    letters = DeadLetters(admin)
    group: str = args.group
    if ids:
        try:
            found = await letters.find(group, ids)
        except MQClientError as exc:
            if exc.code != ResponseCode.QUERY_NOT_FOUND:
                raise
            raise AdminError(f"{exc.remark}; dlq list -g {group} shows the ids") from None
    else:
        found = await letters.messages(group)
    if args.action == "list":
        rows = [_list_row(m) for m in found]
        notes = () if rows else (f"no dead letters in {dlq_topic(group)}",)
        return Result.of_table(Table(LIST_COLUMNS, rows), notes)
    if args.action == "show":
        documents = [message_document(m) for m in found]
        return Result(documents, tuple(detail_table(d) for d in documents))
    if args.action == "resend":
        outcomes = await letters.resend(group, found)
        rows = [_resend_row(o) for o in outcomes]
        return Result.of_table(Table(RESEND_COLUMNS, rows), (_resend_summary(outcomes),))
    return _export(group, found, Path(args.output))


def _check_flags(args: argparse.Namespace, ids: list[str]) -> None:
    action = args.action
    if args.all and action != "resend":
        raise UsageError("--all goes with resend only")
    if args.output is not None and action != "export":
        raise UsageError("-o goes with export only")
    if action == "list" and ids:
        raise UsageError("list shows every dead letter; use show -i MSGID for some of them")
    if action == "show" and not ids:
        raise UsageError("show needs -i MSGID (dlq list shows the ids)")
    if action == "resend" and bool(ids) == args.all:
        raise UsageError("resend needs either --all or -i MSGID (one of them)")
    if action == "export" and not args.output:
        raise UsageError("export needs -o FILE.jsonl")


def _list_row(message: MessageExt) -> dict[str, Any]:
    properties = message.properties
    return {
        "msgId": message.msg_id,
        "offsetMsgId": message.offset_msg_id,
        "originTopic": properties.get(MessageConst.RETRY_TOPIC),
        "originMsgId": properties.get(MessageConst.ORIGIN_MESSAGE_ID),
        "queueOffset": message.queue_offset,
        "tags": message.tags,
        "keys": message.keys,
        "reconsumeTimes": message.reconsume_times,
        "storeTimestamp": message.store_timestamp,
        "body": message.decompressed_body().decode(errors="replace"),
    }


def _resend_row(outcome: ResendOutcome) -> dict[str, Any]:
    return {
        "msgId": outcome.msg_id,
        "dlqOffsetMsgId": outcome.dead_letter.offset_msg_id,
        "topic": outcome.topic,
        "status": outcome.status.value,
        "offsetMsgId": outcome.offset_msg_id,
        "queueId": outcome.queue_id,
        "queueOffset": outcome.queue_offset,
    }


def _resend_summary(outcomes: list[ResendOutcome]) -> str:
    counts = {status: 0 for status in ResendStatus}
    for outcome in outcomes:
        counts[outcome.status] += 1
    text = (
        f"resent {counts[ResendStatus.RESENT]}, already resent before "
        f"{counts[ResendStatus.ALREADY_RESENT]}"
    )
    if counts[ResendStatus.NO_ORIGIN_TOPIC]:
        text += (
            f", skipped {counts[ResendStatus.NO_ORIGIN_TOPIC]} without a RETRY_TOPIC property "
            "(their original topic is unknown; send them with sendMessage)"
        )
    return text


def _export(group: str, letters: list[MessageExt], path: Path) -> Result:
    lines = b"".join(orjson.dumps(message_document(m)) + b"\n" for m in letters)
    path.write_bytes(lines)
    return Result.done(
        f"exported {len(letters)} dead letter(s) of {group} to {path}",
        {"group": group, "file": str(path), "count": len(letters)},
    )
