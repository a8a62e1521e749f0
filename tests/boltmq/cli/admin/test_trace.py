"""queryMsgTraceById: trace records in the format RocketMQ's clients write them (``\\x01``
between fields, ``\\x02`` after each record), decoded by `client.trace` and shown as mqadmin
shows them: the send, then each consumer group's consumes."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from client import Message, Producer
from client.trace import TraceRecord, decode_trace_data
from tests.boltmq.cli.admin.helpers import admin_json, make_topic, run_admin, wait_for

MSG_ID = "7F0000010F2A18B4AAC2166E0C2A0000"
OTHER_ID = "7F0000010F2A18B4AAC2166E0C2A0001"


def record(*fields: object) -> str:
    return "\x01".join(str(f) for f in fields) + "\x02"


# A Java 4.9 client's records: its producer's Pub (with offset msgId, success, client host),
# a consumer's SubBefore and SubAfter (with context code, time and group).
PUB = record("Pub", 1700000000123, "DefaultRegion", "OrderProducers", "Orders", MSG_ID,
             "Created", "order-1", "127.0.0.1:10911", 17, 3, 0, "7F00000100002A9F0000000000000C2E",
             "true", "10.0.0.5")  # fmt: skip
SUB_BEFORE = record("SubBefore", 1700000000200, "DefaultRegion", "Billing", "req-1", MSG_ID, 0,
                    "order-1")  # fmt: skip
SUB_AFTER = record("SubAfter", "req-1", MSG_ID, 12, "true", "order-1", 0, 1700000000212,
                   "Billing")  # fmt: skip


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (PUB, [TraceRecord("Pub", MSG_ID, timestamp=1700000000123, group="OrderProducers",
                           topic="Orders", tags="Created", keys="order-1",
                           store_host="127.0.0.1:10911", cost_ms=3,
                           offset_msg_id="7F00000100002A9F0000000000000C2E",
                           client_host="10.0.0.5")]),
        # The oldest clients' Pub: success right after the message type.
        (record("Pub", 1, "R", "G", "T", MSG_ID, "", "", "h:1", 5, 2, 0, "false"),
         [TraceRecord("Pub", MSG_ID, timestamp=1, group="G", topic="T", store_host="h:1",
                      cost_ms=2, success=False)]),
        (SUB_BEFORE, [TraceRecord("SubBefore", MSG_ID, timestamp=1700000000200, group="Billing",
                                  request_id="req-1", keys="order-1")]),
        (SUB_AFTER, [TraceRecord("SubAfter", MSG_ID, request_id="req-1", cost_ms=12,
                                 keys="order-1", timestamp=1700000000212, group="Billing")]),
        # A SubAfter of an older client: no time and group.
        (record("SubAfter", "r", MSG_ID, 4, "false", ""),
         [TraceRecord("SubAfter", MSG_ID, request_id="r", cost_ms=4, success=False)]),
        (record("EndTransaction", 9, "R", "TxG", "T", MSG_ID, "tag", "k", "h:1", 1, "tx-1",
                "COMMIT_MESSAGE", "false"),
         [TraceRecord("EndTransaction", MSG_ID, timestamp=9, group="TxG", topic="T", tags="tag",
                      keys="k", store_host="h:1", transaction_id="tx-1",
                      transaction_state="COMMIT_MESSAGE")]),
        # Several records in one body; an unknown type and a record cut short are skipped.
        (PUB + record("Recall", 1, "R", "G", "T", MSG_ID, "true") + record("Pub", 1, "R")
         + SUB_BEFORE,
         [decode_trace_data(PUB)[0], decode_trace_data(SUB_BEFORE)[0]]),
        ("", []),
        ("not a trace at all", []),
    ],
)  # fmt: skip
def test_trace_records_decode_as_the_clients_write_them(
    text: str, expected: list[TraceRecord]
) -> None:
    assert decode_trace_data(text) == expected


def send_traces(namesrv: str, topic: str, bodies: list[tuple[str, list[str]]]) -> None:
    async def send() -> None:
        with trio.fail_after(60):
            async with Producer("trace-test-p", namesrv_addr=namesrv) as producer:
                for body, keys in bodies:
                    await producer.send(Message(topic, body.encode(), keys=keys))

    trio.run(send)


def test_query_msg_trace_by_id_shows_the_send_then_each_group(
    cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = unique("Trace")
    make_topic(cluster.namesrv, topic, 1)
    other_group = record("SubAfter", "req-2", MSG_ID, 30, "false", "order-1", 0, 1700000000300,
                         "Audit")  # fmt: skip
    send_traces(cluster.namesrv, topic, [
        (PUB, [MSG_ID, "order-1"]),
        # A client batches records of several messages into one trace message.
        (SUB_BEFORE + SUB_AFTER + record("SubAfter", "req-9", OTHER_ID, 1, "true", "", 0, 5, "X"),
         [MSG_ID, OTHER_ID, "order-1"]),
        (other_group, [MSG_ID, "order-1"]),
    ])  # fmt: skip
    rows = wait_for(
        lambda: admin_json(capsys, cluster.namesrv, "queryMsgTraceById", "-i", MSG_ID, "-t", topic),
        lambda rows: len(rows) == 3,
    )
    by_type = sorted((r["type"], r["group"], r["costTimes"], r["status"]) for r in rows)
    assert by_type == [
        ("Pub", "OrderProducers", "3ms", "success"),
        ("Sub", "Audit", "30ms", "failed"),
        ("Sub", "Billing", "12ms", "success"),
    ]
    pub = next(r for r in rows if r["type"] == "Pub")
    assert pub["clientHost"] == "10.0.0.5" and pub["time"] == 1700000000123
    sub = next(r for r in rows if r["group"] == "Billing")
    assert sub["clientHost"].startswith("127.0.0.1:")  # the trace message's born host
    code, out, _ = run_admin(capsys, cluster.namesrv, "queryMsgTraceById", "-i", MSG_ID,
                             "-t", topic)  # fmt: skip
    assert code == 0
    assert out.index("ProducerGroup") < out.index("ConsumerGroup")
    assert out.count("ConsumerGroup") == 2  # one table per consumer group
    code, out, _ = run_admin(capsys, cluster.namesrv, "queryMsgTraceById", "-i", "NOPE",
                             "-t", topic)  # fmt: skip
    assert code == 0 and "no trace of msgId NOPE" in out
