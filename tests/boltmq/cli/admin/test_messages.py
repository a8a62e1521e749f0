"""The message verbs against the session's cluster with known traffic: lookups by id, key,
unique key and offset, printMsg, printMsgByQueue, consumeMessage and sendMessage.

Loopback only; each test has a topic of its own; the command line runs in-process with its own
trio loop, so set-up runs in `trio.run` of its own (helpers.py) and every wait has a deadline.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest
import trio

from client import Admin, Message, Producer, SendResult
from protocol.bodies import MessageQueue
from protocol.message import decode_offset_msg_id
from tests.boltmq.cli.admin.helpers import admin_json, make_topic, run_admin

#: What each test sends: (queue id, body, tags, keys).
TRAFFIC = [
    (0, "order-1 created", "Created", "order-1"),
    (0, "order-2 created", "Created", "order-2"),
    (1, "order-1 paid", "Paid", "order-1"),
    (0, "order-1 shipped", "Shipped", "order-1 ship-9"),
]


@pytest.fixture
def traffic(cluster: Any, unique: Any) -> tuple[str, str, list[SendResult], int, int]:
    """A topic of 2 queues holding TRAFFIC: (topic, broker name, results, start ms, end ms)."""
    topic = unique("MsgT")
    broker_name = make_topic(cluster.namesrv, topic, 2)
    begin = int(time.time() * 1000)
    results = send_traffic(cluster.namesrv, topic, broker_name)
    return topic, broker_name, results, begin, int(time.time() * 1000)


def send_traffic(namesrv: str, topic: str, broker_name: str) -> list[SendResult]:
    async def send() -> list[SendResult]:
        with trio.fail_after(60):
            async with Producer("msg-test-p", namesrv_addr=namesrv) as producer:
                results = []
                for queue_id, body, tags, keys in TRAFFIC:
                    queue = MessageQueue(topic=topic, broker_name=broker_name, queue_id=queue_id)
                    message = Message(topic, body.encode(), tags=tags, keys=keys.split())
                    results.append(await producer.send(message, queue=queue))
                return results

    sent: list[SendResult] = trio.run(send)
    return sent


def row(result: SendResult, broker: str, n: int, body: str | None = "") -> dict[str, Any]:
    """The list row every listing verb prints for TRAFFIC[n] (store time left out)."""
    queue_id, text, tags, keys = TRAFFIC[n]
    return {
        "msgId": result.msg_id, "offsetMsgId": result.offset_msg_id, "brokerName": broker,
        "queueId": queue_id, "queueOffset": result.queue_offset, "tags": tags,
        "keys": keys.split(), "reconsumeTimes": 0, "body": text if body == "" else body,
    }  # fmt: skip


def without_times(rows: list[dict[str, Any]], begin: int, end: int) -> list[dict[str, Any]]:
    """The rows with storeTimestamp checked (within the sends) and taken out."""
    for each in rows:
        stamp = each.pop("storeTimestamp")
        assert begin - 5_000 <= stamp <= end + 5_000, (stamp, begin, end)
    return rows


def test_query_msg_by_id_prints_the_message_in_full(
    cluster: Any, traffic: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, _broker, results, begin, end = traffic
    shipped = results[3]
    [document] = admin_json(capsys, cluster.namesrv, "queryMsgById", "-i", shipped.offset_msg_id)
    (host, port), commit_log_offset = decode_offset_msg_id(shipped.offset_msg_id)
    born, stored = document.pop("bornTimestamp"), document.pop("storeTimestamp")
    assert begin - 5_000 <= born <= stored <= end + 5_000
    assert document.pop("bornHost").startswith("127.0.0.1:")
    properties = document.pop("properties")
    assert properties["UNIQ_KEY"] == shipped.msg_id
    assert properties["TAGS"] == "Shipped" and properties["KEYS"] == "order-1 ship-9"
    assert document == {
        "msgId": shipped.msg_id, "offsetMsgId": shipped.offset_msg_id, "topic": topic,
        "tags": "Shipped", "keys": ["order-1", "ship-9"], "queueId": 0, "queueOffset": 2,
        "commitLogOffset": commit_log_offset, "reconsumeTimes": 0,
        "storeHost": f"{host}:{port}", "sysFlag": 0, "flag": 0, "body": "order-1 shipped",
        "bodyBase64": base64.b64encode(b"order-1 shipped").decode(),
    }  # fmt: skip

    code, out, _ = run_admin(capsys, cluster.namesrv, "queryMsgById", "-i", shipped.offset_msg_id)
    assert code == 0
    for text in ("Message ID", "Offset Message ID", "Store Timestamp", shipped.msg_id, topic,
                 "order-1 shipped", "UNIQ_KEY="):  # fmt: skip
        assert text in out


def test_query_msg_by_id_refuses_a_client_msg_id(
    cluster: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_admin(capsys, cluster.namesrv, "queryMsgById", "-i", "not-an-id")
    assert code == 1 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("boltmq admin queryMsgById: not-an-id is not an offset msgId")
    assert "queryMsgByUniqueKey" in err


def test_query_msg_by_key_with_time_range_and_max_count(
    cluster: Any, traffic: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, broker, results, begin, end = traffic
    rows = admin_json(capsys, cluster.namesrv, "queryMsgByKey", "-t", topic, "-k", "order-1")
    assert without_times(rows, begin, end) == [
        row(results[0], broker, 0),
        row(results[2], broker, 2),
        row(results[3], broker, 3),
    ]
    rows = admin_json(capsys, cluster.namesrv, "queryMsgByKey", "-t", topic, "-k", "ship-9")
    assert without_times(rows, begin, end) == [row(results[3], broker, 3)]
    # -c caps what each broker answers (RocketMQ's maxNum).
    rows = admin_json(capsys, cluster.namesrv, "queryMsgByKey", "-t", topic, "-k", "order-1",
                      "-c", "2")  # fmt: skip
    assert len(rows) == 2
    # Stored before -b: none of them.
    later = str(end + 60_000)
    rows = admin_json(capsys, cluster.namesrv, "queryMsgByKey", "-t", topic, "-k", "order-1",
                      "-b", later)  # fmt: skip
    assert rows == []
    # An end before the beginning is a usage error.
    code, _, err = run_admin(capsys, cluster.namesrv, "queryMsgByKey", "-t", topic, "-k", "x",
                             "-b", later, "-e", str(begin))  # fmt: skip
    assert code == 2
    assert "-e is before -b" in err
    code, _, err = run_admin(capsys, cluster.namesrv, "queryMsgByKey", "-t", topic, "-k", "x",
                             "-b", "yesterday")  # fmt: skip
    assert code == 2
    assert "'yesterday' is not a time" in err


def test_query_msg_by_unique_key(
    cluster: Any, traffic: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, _broker, results, _, _ = traffic
    paid = results[2]
    [document] = admin_json(
        capsys, cluster.namesrv, "queryMsgByUniqueKey", "-t", topic, "-i", paid.msg_id
    )
    assert (document["msgId"], document["offsetMsgId"]) == (paid.msg_id, paid.offset_msg_id)
    assert (document["queueId"], document["queueOffset"], document["body"]) == (
        1,
        0,
        "order-1 paid",
    )
    code, out, err = run_admin(
        capsys, cluster.namesrv, "queryMsgByUniqueKey", "-t", topic, "-i", "0" * 32
    )
    assert code == 1 and out == ""
    assert err == (
        f"boltmq admin queryMsgByUniqueKey: no message with msgId {'0' * 32} in topic {topic}; "
        "check both (an offset msgId is looked up with queryMsgById)\n"
    )


def test_query_msg_by_offset(
    cluster: Any, traffic: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, broker, results, _, _ = traffic
    [document] = admin_json(capsys, cluster.namesrv, "queryMsgByOffset", "-t", topic,
                            "-b", broker, "-i", "0", "-o", "1")  # fmt: skip
    assert (document["msgId"], document["body"]) == (results[1].msg_id, "order-2 created")
    code, out, err = run_admin(capsys, cluster.namesrv, "queryMsgByOffset", "-t", topic,
                               "-b", broker, "-i", "0", "-o", "7")  # fmt: skip
    assert code == 1 and out == ""
    assert err == (
        f"boltmq admin queryMsgByOffset: queue {topic}/{broker}/0 has no message at offset 7; "
        "its messages are at offsets 0 to 2\n"
    )
    code, _, err = run_admin(capsys, cluster.namesrv, "queryMsgByOffset", "-t", topic,
                             "-b", "no-such-broker", "-i", "0", "-o", "0")  # fmt: skip
    assert code == 1
    assert f"has no readable queue 0 on broker no-such-broker; see topicRoute -t {topic}" in err


def test_print_msg_reads_every_queue_with_tags_and_without_bodies(
    cluster: Any, traffic: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, broker, results, begin, end = traffic
    rows = admin_json(capsys, cluster.namesrv, "printMsg", "-t", topic)
    assert without_times(rows, begin, end) == [
        row(results[0], broker, 0), row(results[1], broker, 1), row(results[3], broker, 3),
        row(results[2], broker, 2),
    ]  # fmt: skip
    rows = admin_json(capsys, cluster.namesrv, "printMsg", "-t", topic, "-s", "Paid || Shipped",
                      "-d", "false")  # fmt: skip
    assert without_times(rows, begin, end) == [
        row(results[3], broker, 3, None),
        row(results[2], broker, 2, None),
    ]
    # A time range: stored after the end of the sends, none; before their start, none.
    for flag, stamp in (("-b", end + 60_000), ("-e", begin - 60_000)):
        assert admin_json(capsys, cluster.namesrv, "printMsg", "-t", topic, flag, str(stamp)) == []
    rows = admin_json(capsys, cluster.namesrv, "printMsg", "-t", topic, "-b", str(begin - 60_000))
    assert len(rows) == 4
    code, out, _ = run_admin(capsys, cluster.namesrv, "printMsg", "-t", topic)
    assert code == 0
    for text in ("Message ID", "QID", "Store Time", "order-2 created", results[2].msg_id):
        assert text in out


def test_print_msg_by_queue_counts_tags(
    cluster: Any, traffic: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, broker, results, begin, end = traffic
    document = admin_json(capsys, cluster.namesrv, "printMsgByQueue", "-t", topic, "-a", broker,
                          "-i", "0", "-f", "true")  # fmt: skip
    assert document["tagCounts"] == [{"tag": "Created", "count": 2}, {"tag": "Shipped", "count": 1}]
    assert without_times(document["messages"], begin, end) == [
        row(results[0], broker, 0),
        row(results[1], broker, 1),
        row(results[3], broker, 3),
    ]
    document = admin_json(capsys, cluster.namesrv, "printMsgByQueue", "-t", topic, "-a", broker,
                          "-i", "1", "-p", "false")  # fmt: skip
    assert document == {}
    code, out, _ = run_admin(capsys, cluster.namesrv, "printMsgByQueue", "-t", topic,
                             "-a", broker, "-i", "0", "-f", "true")  # fmt: skip
    assert code == 0
    assert "Tag" in out and "Count" in out
    assert f"3 message(s) in queue {topic}/{broker}/0" in out


def test_consume_message_reads_without_committing(
    cluster: Any, traffic: Any, unique: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, broker, results, begin, end = traffic
    group = unique("CG")
    rows = admin_json(capsys, cluster.namesrv, "consumeMessage", "-t", topic, "-c", "2",
                      "-g", group)  # fmt: skip
    assert without_times(rows, begin, end) == [
        row(results[0], broker, 0),
        row(results[1], broker, 1),
    ]
    rows = admin_json(capsys, cluster.namesrv, "consumeMessage", "-t", topic, "-b", broker,
                      "-i", "0", "-o", "2")  # fmt: skip
    assert without_times(rows, begin, end) == [row(results[3], broker, 3)]
    # Reading committed nothing: the group's offsets on the broker are still 0 (had the reads
    # been committed, queue 0 would say 3).

    async def committed() -> dict[int, int]:
        async with Admin(namesrv_addr=cluster.namesrv) as admin:
            stats = await admin.consume_stats(group, topic)
            return {q.queue_id: w.consumer_offset for q, w in stats.offset_table.items()}

    assert trio.run(committed) == {0: 0, 1: 0}
    code, _, err = run_admin(capsys, cluster.namesrv, "consumeMessage", "-t", topic, "-i", "0")
    assert code == 2
    assert err == "boltmq admin consumeMessage: -i needs -b: give the broker name of the queue\n"


def test_send_message_then_find_it(
    cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = unique("SendT")
    broker = make_topic(cluster.namesrv, topic, 2)
    sent = admin_json(capsys, cluster.namesrv, "sendMessage", "-t", topic, "-p", "hello",
                      "-k", "k-1", "-c", "TagS", "-b", broker, "-i", "1")  # fmt: skip
    msg_id, offset_msg_id = sent.pop("msgId"), sent.pop("offsetMsgId")
    assert sent == {"brokerName": broker, "queueId": 1, "sendStatus": "SEND_OK", "queueOffset": 0}
    [found] = admin_json(capsys, cluster.namesrv, "queryMsgByKey", "-t", topic, "-k", "k-1")
    assert (found["msgId"], found["offsetMsgId"]) == (msg_id, offset_msg_id)
    assert (found["tags"], found["keys"], found["body"]) == ("TagS", ["k-1"], "hello")
    code, out, _ = run_admin(capsys, cluster.namesrv, "sendMessage", "-t", topic, "-p", "again")
    assert code == 0
    assert "SEND_OK" in out and "Send Result" in out
    code, _, err = run_admin(capsys, cluster.namesrv, "sendMessage", "-t", topic, "-p", "x",
                             "-i", "0")  # fmt: skip
    assert code == 2
    assert "-b and -i go together" in err


@pytest.mark.parametrize(
    "verb",
    ["queryMsgById", "queryMsgByKey", "queryMsgByUniqueKey", "queryMsgByOffset", "printMsg",
     "printMsgByQueue", "consumeMessage", "sendMessage", "dlq"],
)  # fmt: skip
def test_help_has_an_example(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_admin(capsys, None, verb, "--help")
    assert code == 0
    assert f"usage: boltmq admin {verb}" in out
    assert f"example:\n  boltmq admin {verb} " in out
