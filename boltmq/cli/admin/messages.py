"""Verbs about messages: queryMsgById, queryMsgByKey, queryMsgTraceById, queryMsgByUniqueKey,
queryMsgByOffset, printMsg, printMsgByQueue, sendMessage, consumeMessage.

Reading verbs pull with the tools group and commit nothing, so they never move a consumer
group's offsets. How a message reads, in full or in a list, is ``_message_view``'s, shared
with the dead-letter verbs.
"""

from __future__ import annotations

import argparse
from typing import Any

from boltmq.cli.admin._direct import direct_args, push_directly, wants_direct
from boltmq.cli.admin._message_view import (
    MESSAGE_COLUMNS,
    TIME_HELP,
    details,
    host_text,
    message_row,
    time_arg,
)
from boltmq.cli.admin._output import Column, Result, Table, number, timestamp
from boltmq.cli.admin._verbs import (
    AdminError,
    Arg,
    UsageError,
    arg,
    boolean,
    topic_arg,
    verb,
)
from client import Admin, Message, MQClientError, Producer
from client.browse import TOOLS_CONSUMER_GROUP, QueueBrowser
from client.trace import TRACE_TOPIC, decode_trace_data
from protocol.bodies import MessageQueue
from protocol.message import MessageExt, MessageFormatError

#: The producer group sendMessage sends with.
TOOLS_PRODUCER_GROUP = "TOOLS_PRODUCER"
#: mqadmin's consumeMessage reads at most this many messages unless -c says otherwise.
DEFAULT_CONSUME_COUNT = 128

SEND_COLUMNS = (
    Column("brokerName", "Broker Name"),
    number("queueId", "QID"),
    Column("sendStatus", "Send Result"),
    Column("msgId", "MsgId"),
    Column("offsetMsgId", "Offset MsgId"),
    number("queueOffset", "Queue Offset"),
)

TAG_COLUMNS = (Column("tag", "Tag"), number("count", "Count"))


# -- lookups ----------------------------------------------------------------------------------


@verb(
    "queryMsgById",
    "a message in full by its offset msgId (store host + commit-log offset); with -g and -d "
    "pushed to that consumer client instead (CONSUME_MESSAGE_DIRECTLY)",
    "boltmq admin queryMsgById -i 7F00000100002A9F0000000000000C2E "
    "[-g OrderConsumers -d 10.0.0.5@4242]",
    [
        arg(
            "-i",
            "--msgId",
            dest="msg_ids",
            metavar="MSGID",
            required=True,
            action="append",
            help="offset msgId(s), comma separated or -i repeated",
        ),
        *direct_args(),
    ],
)
async def query_msg_by_id(admin: Admin, args: argparse.Namespace) -> Result:
    """queryMsgById: VIEW_MESSAGE_BY_ID at the store host each id names (or a direct push)."""
    ids = [i.strip() for text in args.msg_ids for i in text.split(",") if i.strip()]
    direct = wants_direct(args)
    found = []
    for msg_id in ids:
        try:
            found.append(await admin.view_message(msg_id))
        except MessageFormatError:
            raise AdminError(
                f"{msg_id} is not an offset msgId (32 hex digits: store host and commit-log "
                "offset); for a client msgId use queryMsgByUniqueKey -t TOPIC -i MSGID"
            ) from None
    if direct:
        return await push_directly(admin, args, ids)
    return details(found)


@verb(
    "queryMsgByKey",
    "messages of a topic with a business key (KEYS), from the brokers' index",
    "boltmq admin queryMsgByKey -t Orders -k order-42 [-b 1700000000000 -e ... -c 64]",
    [
        topic_arg(),
        arg("-k", "--msgKey", dest="key", required=True, help="the message key"),
        arg(
            "-b",
            "--beginTimestamp",
            dest="begin",
            type=time_arg,
            default=0,
            help=f"stored at or after this time: {TIME_HELP}",
        ),
        arg(
            "-e",
            "--endTimestamp",
            dest="end",
            type=time_arg,
            default=None,
            help=f"stored at or before this time (default: now): {TIME_HELP}",
        ),
        arg(
            "-c",
            "--maxNum",
            dest="max_num",
            type=int,
            default=64,
            help="at most this many messages per broker (default: 64)",
        ),
    ],
)
async def query_msg_by_key(admin: Admin, args: argparse.Namespace) -> Result:
    """queryMsgByKey: QUERY_MESSAGE on every master of the topic, oldest first."""
    if args.max_num <= 0:
        raise UsageError(f"-c {args.max_num}: give a positive number of messages")
    if args.end is not None and args.end < args.begin:
        raise UsageError("-e is before -b; give a time range that ends after it starts")
    found = await admin.query_message(
        args.topic, args.key, max_num=args.max_num, begin_ms=args.begin, end_ms=args.end
    )
    return _listing(await _with_brokers(admin, args.topic, found), f"key {args.key}")


@verb(
    "queryMsgTraceById",
    "the trace of a message (enableMsgTrace clients): its send, then each consumer group's "
    "consumes, read from the trace topic",
    "boltmq admin queryMsgTraceById -i 7F0000010F2A18B4AAC2166E0C2A0000 "
    "[-t RMQ_SYS_TRACE_TOPIC -b 1700000000000 -e ... -c 64]",
    [
        arg("-i", "--msgId", dest="msg_id", metavar="MSGID", required=True,
            help="the client msgId (UNIQ_KEY) whose trace to show"),
        arg("-t", "--traceTopic", dest="trace_topic", default=TRACE_TOPIC,
            help=f"the trace topic the clients write to (default: {TRACE_TOPIC})"),
        arg("-b", "--beginTimestamp", dest="begin", type=time_arg, default=0,
            help=f"traces stored at or after this time: {TIME_HELP}"),
        arg("-e", "--endTimestamp", dest="end", type=time_arg, default=None,
            help=f"traces stored at or before this time (default: now): {TIME_HELP}"),
        arg("-c", "--maxNum", dest="max_num", type=int, default=64,
            help="at most this many trace messages per broker (default: 64)"),
    ],
)  # fmt: skip
async def query_msg_trace_by_id(admin: Admin, args: argparse.Namespace) -> Result:
    """queryMsgTraceById: QUERY_MESSAGE on the trace topic by msgId (trace messages are keyed
    by every msgId they trace), the records of that msgId decoded; the send first, then one
    table per consumer group, as mqadmin prints them."""
    if args.max_num <= 0:
        raise UsageError(f"-c {args.max_num}: give a positive number of messages")
    try:
        found = await admin.query_message(
            args.trace_topic, args.msg_id, max_num=args.max_num, begin_ms=args.begin,
            end_ms=args.end,
        )  # fmt: skip
    except MQClientError as exc:
        raise AdminError(
            f"cannot read the trace topic {args.trace_topic}: {exc} (do the clients run with "
            "message trace on, and to this topic?)"
        ) from None
    rows: list[dict[str, Any]] = []
    for message in sorted(found, key=lambda m: (m.store_timestamp, m.commit_log_offset)):
        text = message.decompressed_body().decode("utf-8", "replace")
        for record in decode_trace_data(text):
            if record.msg_id != args.msg_id or record.type not in ("Pub", "SubAfter"):
                continue
            rows.append({
                "type": "Pub" if record.type == "Pub" else "Sub",
                "group": record.group,
                "clientHost": record.client_host or host_text(message.born_host),
                "time": record.timestamp,
                "costTimes": f"{record.cost_ms}ms",
                "status": "success" if record.success else "failed",
                "topic": record.topic,
                "tags": record.tags,
                "keys": record.keys,
                "storeHost": record.store_host,
            })  # fmt: skip
    sends = [row for row in rows if row["type"] == "Pub"]
    tables = [Table(_trace_columns("ProducerGroup", "SendTime"), sends)] if sends else []
    consumes: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row["type"] == "Sub":
            consumes.setdefault(row["group"], []).append(row)
    for group_rows in consumes.values():
        tables.append(Table(_trace_columns("ConsumerGroup", "ConsumerTime"), group_rows))
    notes = () if rows else (
        f"no trace of msgId {args.msg_id} in {args.trace_topic} (is message trace on in the "
        "producer and consumers?)",
    )  # fmt: skip
    return Result(rows, tuple(tables), notes)


def _trace_columns(group_title: str, time_title: str) -> tuple[Column, ...]:
    return (
        Column("type", "Type"),
        Column("group", group_title),
        Column("clientHost", "ClientHost"),
        timestamp("time", time_title),
        number("costTimes", "CostTimes"),
        Column("status", "Status"),
    )


@verb(
    "queryMsgByUniqueKey",
    "a message in full by its client msgId (UNIQ_KEY); with -g and -d pushed to that "
    "consumer client instead (CONSUME_MESSAGE_DIRECTLY)",
    "boltmq admin queryMsgByUniqueKey -t Orders -i 7F0000010F2A18B4AAC2166E0C2A0000 "
    "[-g OrderConsumers -d 10.0.0.5@4242]",
    [
        topic_arg(),
        arg(
            "-i", "--msgId", dest="msg_id", metavar="MSGID", required=True, help="the client msgId"
        ),
        arg(
            "-a",
            "--showAll",
            dest="show_all",
            action="store_true",
            help="every stored copy (retries and resends share the msgId), not just the first",
        ),
        *direct_args(),
    ],
)
async def query_msg_by_unique_key(admin: Admin, args: argparse.Namespace) -> Result:
    """queryMsgByUniqueKey: QUERY_MESSAGE by UNIQ_KEY, oldest copy first (or a direct push)."""
    direct = wants_direct(args)
    found = await admin.query_message(args.topic, args.msg_id, unique_key=True)
    if not found:
        raise AdminError(
            f"no message with msgId {args.msg_id} in topic {args.topic}; check both (an "
            "offset msgId is looked up with queryMsgById)"
        )
    found.sort(key=lambda m: (m.store_timestamp, m.commit_log_offset))
    chosen = found if args.show_all else found[:1]
    if direct:
        return await push_directly(admin, args, [m.offset_msg_id for m in chosen])
    return details(chosen)


@verb(
    "queryMsgByOffset",
    "a message in full by its queue and queue offset",
    "boltmq admin queryMsgByOffset -t Orders -b broker-a -i 0 -o 42",
    [
        topic_arg(),
        arg("-b", "--brokerName", dest="broker_name", required=True, help="broker name"),
        arg("-i", "--queueId", dest="queue_id", type=int, required=True, help="queue id"),
        arg("-o", "--offset", type=int, required=True, help="queue offset"),
    ],
)
async def query_msg_by_offset(admin: Admin, args: argparse.Namespace) -> Result:
    """queryMsgByOffset: one PULL_MESSAGE at the offset, with the tools group."""
    queue = MessageQueue(topic=args.topic, broker_name=args.broker_name, queue_id=args.queue_id)
    async with QueueBrowser(admin.instance, timeout=admin.timeout) as browser:
        await _check_queue(browser, queue)
        message = await browser.read_one(queue, args.offset)
        if message is None:
            low, high = await browser.min_offset(queue), await browser.max_offset(queue)
            raise AdminError(
                f"{_queue_name(queue)} has no message at offset {args.offset}; its messages "
                f"are at offsets {low} to {high - 1}" if high > low else
                f"{_queue_name(queue)} has no message at offset {args.offset}; it is empty"
            )  # fmt: skip
    return details([message])


# -- reading queues ---------------------------------------------------------------------------


def _reading_args() -> list[Arg]:
    """The flags printMsg and printMsgByQueue share: charset, tags and a time range."""
    return [
        arg("-c", "--charsetName", dest="charset", default="utf-8",
            help="the bodies' charset (default: UTF-8)"),
        arg("-s", "--subExpression", dest="expression", default="*",
            help="tag expression, e.g. 'TagA || TagB' (default: *)"),
        arg("-b", "--beginTimestamp", dest="begin", type=time_arg, help=TIME_HELP),
        arg("-e", "--endTimestamp", dest="end", type=time_arg, help=TIME_HELP),
    ]  # fmt: skip


@verb(
    "printMsg",
    "every message of a topic, queue by queue (optionally a time range and tags)",
    "boltmq admin printMsg -t Orders [-s 'TagA || TagB'] [-b 1700000000000] [-d false]",
    [
        topic_arg(),
        *_reading_args(),
        arg(
            "-d",
            "--printBody",
            dest="print_body",
            type=boolean,
            default=True,
            help="show bodies: true (default) or false",
        ),
    ],
)
async def print_msg(admin: Admin, args: argparse.Namespace) -> Result:
    """printMsg: each queue of the topic from its min (or -b) to its max (or -e) offset."""
    _check_charset(args.charset)
    rows: list[dict[str, Any]] = []
    async with QueueBrowser(admin.instance, timeout=admin.timeout) as browser:
        for queue in await browser.queues(args.topic):
            found = await _read(browser, queue, args.begin, args.end, expression=args.expression)
            for message in found:
                rows.append(message_row(message, queue.broker_name, charset=args.charset,
                                        with_body=args.print_body))  # fmt: skip
    return Result.of_table(Table(MESSAGE_COLUMNS, rows))


@verb(
    "printMsgByQueue",
    "the messages of one queue (optionally a time range, tags and counts per tag)",
    "boltmq admin printMsgByQueue -t Orders -a broker-a -i 0 [-f true]",
    [
        topic_arg(),
        arg("-a", "--brokerName", dest="broker_name", required=True, help="broker name"),
        arg("-i", "--queueId", dest="queue_id", type=int, required=True, help="queue id"),
        *_reading_args(),
        arg(
            "-p",
            "--printMsg",
            dest="print_msg",
            type=boolean,
            default=True,
            help="list the messages: true (default) or false",
        ),
        arg(
            "-d",
            "--printBody",
            dest="print_body",
            type=boolean,
            default=True,
            help="show bodies: true (default) or false",
        ),
        arg(
            "-f",
            "--calculate",
            dest="by_tag",
            type=boolean,
            default=False,
            help="count the messages per tag: true or false (default)",
        ),
    ],
)
async def print_msg_by_queue(admin: Admin, args: argparse.Namespace) -> Result:
    """printMsgByQueue: JSON {"messages": [...], "tagCounts": [...]} (each when asked for)."""
    _check_charset(args.charset)
    queue = MessageQueue(topic=args.topic, broker_name=args.broker_name, queue_id=args.queue_id)
    async with QueueBrowser(admin.instance, timeout=admin.timeout) as browser:
        await _check_queue(browser, queue)
        messages = await _read(browser, queue, args.begin, args.end, expression=args.expression)
    document: dict[str, Any] = {}
    tables = []
    if args.print_msg:
        rows = [message_row(m, queue.broker_name, charset=args.charset,
                            with_body=args.print_body) for m in messages]  # fmt: skip
        table = Table(MESSAGE_COLUMNS, rows)
        document["messages"] = table.to_json()
        tables.append(table)
    if args.by_tag:
        counts: dict[str, int] = {}
        for message in messages:
            if message.tags:
                counts[message.tags] = counts.get(message.tags, 0) + 1
        ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        table = Table(TAG_COLUMNS, [{"tag": t, "count": c} for t, c in ordered])
        document["tagCounts"] = table.to_json()
        tables.append(table)
    return Result(document, tuple(tables), (f"{len(messages)} message(s) in {_queue_name(queue)}",))


@verb(
    "consumeMessage",
    "read messages of a topic or one queue without committing any offset",
    "boltmq admin consumeMessage -t Orders [-b broker-a -i 0 [-o 100]] [-c 10]",
    [
        topic_arg(),
        arg("-b", "--brokerName", dest="broker_name", help="broker name (with -i)"),
        arg("-i", "--queueId", dest="queue_id", type=int, help="queue id (needs -b)"),
        arg("-o", "--offset", type=int, help="first queue offset (needs -i)"),
        arg(
            "-g",
            "--consumerGroup",
            dest="group",
            default=TOOLS_CONSUMER_GROUP,
            help=f"the group to pull as (default: {TOOLS_CONSUMER_GROUP})",
        ),
        arg("-s", "--beginTimestamp", dest="begin", type=time_arg, help=TIME_HELP),
        arg("-e", "--endTimestamp", dest="end", type=time_arg, help=TIME_HELP),
        arg(
            "-c",
            "--MessageNumber",
            dest="count",
            type=int,
            default=DEFAULT_CONSUME_COUNT,
            help=f"at most this many messages (default: {DEFAULT_CONSUME_COUNT})",
        ),
    ],
)
async def consume_message(admin: Admin, args: argparse.Namespace) -> Result:
    """consumeMessage: the oldest messages of each queue (or one queue), up to -c in all."""
    if args.count <= 0:
        raise UsageError(f"-c {args.count}: give a positive number of messages")
    if args.queue_id is not None and args.broker_name is None:
        raise UsageError("-i needs -b: give the broker name of the queue")
    if args.offset is not None and args.queue_id is None:
        raise UsageError("-o needs -b and -i: an offset belongs to one queue")
    rows: list[dict[str, Any]] = []
    async with QueueBrowser(admin.instance, group=args.group, timeout=admin.timeout) as browser:
        if args.queue_id is not None:
            queue = MessageQueue(topic=args.topic, broker_name=args.broker_name,
                                 queue_id=args.queue_id)  # fmt: skip
            await _check_queue(browser, queue)
            queues = [queue]
        else:
            queues = await browser.queues(args.topic)
            if args.broker_name is not None:
                queues = [q for q in queues if q.broker_name == args.broker_name]
                if not queues:
                    raise AdminError(
                        f"topic {args.topic} has no queue on broker {args.broker_name}; "
                        f"see topicRoute -t {args.topic}"
                    )
        for queue in queues:
            left = args.count - len(rows)
            if left <= 0:
                break
            found = await _read(browser, queue, args.begin, args.end, first=args.offset, limit=left)
            rows.extend(message_row(message, queue.broker_name) for message in found)
    return Result.of_table(Table(MESSAGE_COLUMNS, rows))


# -- sending ----------------------------------------------------------------------------------


@verb(
    "sendMessage",
    "send one message (to a queue of your choice with -b and -i)",
    "boltmq admin sendMessage -t Orders -p 'hello' [-k order-42] [-c TagA] [-b broker-a -i 0]",
    [
        topic_arg(),
        arg("-p", "--body", required=True, help="the message body (UTF-8 text)"),
        arg("-k", "--key", dest="keys", help="message key(s), space separated"),
        arg("-c", "--tags", help="the message tag"),
        arg("-b", "--broker", dest="broker_name", help="broker name (with -i)"),
        arg("-i", "--qid", dest="queue_id", type=int, help="queue id (needs -b)"),
    ],
)
async def send_message(admin: Admin, args: argparse.Namespace) -> Result:
    """sendMessage: one SEND_MESSAGE_V2 with the tools producer group."""
    if (args.broker_name is None) != (args.queue_id is None):
        raise UsageError("-b and -i go together: give both to choose the queue, or neither")
    if not args.body:
        raise UsageError("-p is empty; a message needs a body")
    message = Message(args.topic, args.body.encode(), tags=args.tags, keys=args.keys)
    queue = None
    if args.queue_id is not None:
        queue = MessageQueue(topic=args.topic, broker_name=args.broker_name,
                             queue_id=args.queue_id)  # fmt: skip
    async with Producer(TOOLS_PRODUCER_GROUP, instance=admin.instance,
                        send_msg_timeout=admin.timeout) as producer:  # fmt: skip
        result = await producer.send(message, queue=queue)
    row = {
        "brokerName": result.queue.broker_name, "queueId": result.queue.queue_id,
        "sendStatus": result.status.value, "msgId": result.msg_id,
        "offsetMsgId": result.offset_msg_id, "queueOffset": result.queue_offset,
    }  # fmt: skip
    table = Table(SEND_COLUMNS, [row])
    return Result(table.to_json()[0], (table,))


# -- helpers ----------------------------------------------------------------------------------


def _listing(found: list[tuple[MessageExt, str | None]], what: str) -> Result:
    # Oldest first; within one broker and millisecond the commit log has the order.
    found.sort(key=lambda pair: (pair[0].store_timestamp, pair[1] or "", pair[0].commit_log_offset))
    rows = [message_row(m, broker) for m, broker in found]
    notes = () if rows else (f"no message with {what}",)
    return Result.of_table(Table(MESSAGE_COLUMNS, rows), notes)


async def _with_brokers(
    admin: Admin, topic: str, messages: list[MessageExt]
) -> list[tuple[MessageExt, str | None]]:
    """Pair each message with the name of the broker whose address stored it."""
    route = await admin.route(topic)
    by_address = {
        address: b.broker_name for b in route.broker_datas for address in b.broker_addrs.values()
    }
    return [(m, by_address.get(host_text(m.store_host))) for m in messages]


async def _check_queue(browser: QueueBrowser, queue: MessageQueue) -> None:
    if queue not in await browser.queues(queue.topic):
        raise AdminError(
            f"topic {queue.topic} has no readable queue {queue.queue_id} on broker "
            f"{queue.broker_name}; see topicRoute -t {queue.topic}"
        )


async def _read(
    browser: QueueBrowser,
    queue: MessageQueue,
    begin_ms: int | None,
    end_ms: int | None,
    *,
    expression: str = "*",
    first: int | None = None,
    limit: int | None = None,
) -> list[MessageExt]:
    """The queue's messages stored in ``[begin_ms, end_ms]``, from offset ``first`` on.

    The brokers' time search gives the offset nearest a time, so it only narrows the
    offsets to pull; the store timestamps decide.
    """
    begin = await browser.min_offset(queue)
    end = await browser.max_offset(queue)
    if begin_ms is not None:
        begin = max(begin, await browser.offset_at(queue, begin_ms))
    if end_ms is not None:
        end = min(end, await browser.offset_at(queue, end_ms) + 1)
    if first is not None:
        begin = max(begin, first)
    timed = begin_ms is not None or end_ms is not None
    found = await browser.read(
        queue, begin, end, expression=expression, limit=None if timed else limit
    )
    found = [
        m for m in found
        if (begin_ms is None or m.store_timestamp >= begin_ms)
        and (end_ms is None or m.store_timestamp <= end_ms)
    ]  # fmt: skip
    return found if limit is None else found[:limit]


def _check_charset(charset: str) -> None:
    try:
        b"".decode(charset)
    except LookupError:
        raise UsageError(f"-c {charset}: unknown charset; try UTF-8 or GBK") from None


def _queue_name(queue: MessageQueue) -> str:
    return f"queue {queue.topic}/{queue.broker_name}/{queue.queue_id}"
