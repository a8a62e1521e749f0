"""`boltmq admin dlq`: dead letters that got there through real retries, listed, shown,
exported and resent to where the group's consumer gets them, once, however often resend runs.

A push consumer (in its own thread) fails the "poison" messages with RECONSUME_LATER, one
retry at delay level 1 (1 s), so the broker moves them to %DLQ%<group> after their second
failure. Loopback only, the session's cluster; every wait has a deadline.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from client import (
    Admin,
    BlockingPushConsumer,
    ConsumeConcurrentlyStatus,
    Message,
    Producer,
    SendResult,
)
from client.dead_letters import DLQ_RESENT_FROM
from protocol import names
from protocol.bodies import PERM_WRITE, ConsumeFromWhere
from protocol.message import MessageExt
from tests.boltmq.cli.admin.helpers import admin_json, make_topic, run_admin, wait_for

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
OK = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER


class Listener:
    """Fails bodies starting with ``poison`` while ``failing``; records every delivery."""

    def __init__(self) -> None:
        self.failing = True
        self.lock = threading.Lock()
        self.deliveries: list[MessageExt] = []

    def __call__(self, messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        with self.lock:
            self.deliveries.extend(messages)
            if self.failing and any(m.body.startswith(b"poison") for m in messages):
                return LATER
        return OK

    def copies(self) -> list[MessageExt]:
        """The resent copies delivered so far."""
        with self.lock:
            return [m for m in self.deliveries if DLQ_RESENT_FROM in m.properties]


def send(namesrv: str, topic: str, messages: list[Message]) -> list[SendResult]:
    async def run() -> list[SendResult]:
        with trio.fail_after(60):
            async with Producer("dlq-test-p", namesrv_addr=namesrv) as producer:
                return [await producer.send(message) for message in messages]

    sent: list[SendResult] = trio.run(run)
    return sent


def lag_and_max(namesrv: str, group: str, topic: str) -> tuple[int, int]:
    """The group's lag on ``topic`` and the topic's total max offset."""

    async def run() -> tuple[int, int]:
        with trio.fail_after(60):
            async with Admin(namesrv_addr=namesrv) as admin:
                stats = await admin.consume_stats(group, topic)
                total = sum(w.broker_offset for w in stats.offset_table.values())
                return stats.lag, total

    result: tuple[int, int] = trio.run(run)
    return result


async def make_write_only_dlq(namesrv: str, group: str) -> None:
    """Create %DLQ%<group> with perm 2 and wait until the registry routes it."""
    with trio.fail_after(60):
        async with Admin(namesrv_addr=namesrv) as admin:
            await admin.create_topic(names.dlq_topic(group), queue_nums=1, perm=PERM_WRITE)
            while await admin.instance.fetch_route(names.dlq_topic(group)) is None:
                await trio.sleep(0.05)


def test_dead_letters_resent_once_to_the_consumer(
    cluster: Any, unique: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    namesrv = cluster.namesrv
    topic, group = unique("DlqT"), unique("DlqCG")
    make_topic(namesrv, topic, 2)
    listener = Listener()
    consumer = BlockingPushConsumer(
        group, listener, namesrv_addr=namesrv, consume_from_where=FIRST,
        max_reconsume_times=1, delay_level_when_next_consume=1,
        persist_consumer_offset_interval=0.5,
    )  # fmt: skip
    consumer.subscribe(topic)
    with consumer:
        begin = int(time.time() * 1000)
        poison = send(namesrv, topic, [
            Message(topic, b"poison-1", tags="Bad", keys="p1"),
            Message(topic, b"fine", tags="Good", keys="f1"),
            Message(topic, b"poison-2", tags="Bad", keys=["p2", "extra"]),
        ])  # fmt: skip
        del poison[1]
        by_id = {r.msg_id: r for r in poison}

        # Two failures each (the first delivery and one retry), then the DLQ.
        rows = wait_for(
            lambda: admin_json(capsys, namesrv, "dlq", "list", "-g", group),
            lambda rows: len(rows) == 2,
        )
        rows.sort(key=lambda r: r["body"])
        for n, each in enumerate(rows):
            assert begin - 5_000 <= each.pop("storeTimestamp") <= int(time.time() * 1000) + 5_000
            assert len(each.pop("offsetMsgId")) == 32
            assert each.pop("queueOffset") in (0, 1)
            sent = poison[n]
            assert each == {
                "msgId": sent.msg_id, "originTopic": topic, "originMsgId": sent.offset_msg_id,
                "tags": "Bad", "keys": [["p1"], ["p2", "extra"]][n], "reconsumeTimes": 2,
                "body": f"poison-{n + 1}",
            }  # fmt: skip
        with listener.lock:
            failed = [m.msg_id for m in listener.deliveries if m.body.startswith(b"poison")]
        assert sorted(failed) == sorted([*by_id, *by_id])  # two deliveries each, no more

        code, table, _ = run_admin(capsys, namesrv, "dlq", "list", "-g", group)
        assert code == 0
        for text in ("Origin Topic", "Died At", topic, *by_id):
            assert text in table

        # show: the dead letter in full, with the broker's retry properties.
        first = poison[0]
        [shown] = admin_json(capsys, namesrv, "dlq", "show", "-g", group, "-i", first.msg_id)
        assert (shown["msgId"], shown["topic"], shown["body"]) == (
            first.msg_id,
            names.dlq_topic(group),
            "poison-1",
        )
        assert shown["properties"]["RETRY_TOPIC"] == topic
        assert shown["properties"]["ORIGIN_MESSAGE_ID"] == first.offset_msg_id
        # -i takes the DLQ offset msgId too.
        assert admin_json(
            capsys, namesrv, "dlq", "show", "-g", group, "-i", shown["offsetMsgId"]
        ) == [shown]

        # export: one show document per line.
        out = tmp_path / "dead.jsonl"
        done = admin_json(capsys, namesrv, "dlq", "export", "-g", group, "-o", str(out))
        assert done == {"group": group, "file": str(out), "count": 2}
        exported = [json.loads(line) for line in out.read_text().splitlines()]
        assert sorted(d["msgId"] for d in exported) == sorted(by_id)
        assert [d for d in exported if d["msgId"] == first.msg_id] == [shown]

        # resend: the consumer now succeeds; each dead letter goes back once.
        listener.failing = False
        first_run = admin_json(capsys, namesrv, "dlq", "resend", "-g", group, "--all")
        assert sorted((r["msgId"], r["topic"], r["status"]) for r in first_run) == sorted(
            (msg_id, topic, "RESENT") for msg_id in by_id
        )
        second_run = admin_json(capsys, namesrv, "dlq", "resend", "-g", group, "--all")
        assert sorted(second_run, key=lambda r: r["msgId"]) == [
            {**r, "status": "ALREADY_RESENT"} for r in sorted(first_run, key=lambda r: r["msgId"])
        ]
        [third_run] = admin_json(capsys, namesrv, "dlq", "resend", "-g", group, "-i", first.msg_id)
        assert third_run["status"] == "ALREADY_RESENT"
        code, out_text, _ = run_admin(capsys, namesrv, "dlq", "resend", "-g", group, "--all")
        assert code == 0
        assert "resent 0, already resent before 2" in out_text

        # The consumer gets each copy; once it has consumed everything the topic holds
        # (lag 0) and the topic holds 3 + 2 messages, no further copy can ever arrive.
        wait_for(lambda: len(listener.copies()), lambda n: n >= 2)
        wait_for(lambda: lag_and_max(namesrv, group, topic), lambda v: v == (0, 5))
        copies = listener.copies()
        assert sorted(m.msg_id for m in copies) == sorted(by_id)
        assert {m.topic for m in copies} == {topic}
        assert {m.reconsume_times for m in copies} == {0}
        dead = {r["msgId"]: r["dlqOffsetMsgId"] for r in first_run}
        for copy in copies:
            assert copy.properties[DLQ_RESENT_FROM] == dead[copy.msg_id]
            assert copy.properties["ORIGIN_MESSAGE_ID"] == by_id[copy.msg_id].offset_msg_id
            assert "RETRY_TOPIC" not in copy.properties
        assert {(m.body, m.tags) for m in copies} == {(b"poison-1", "Bad"), (b"poison-2", "Bad")}

        # The dead letters stay in the DLQ.
        assert len(admin_json(capsys, namesrv, "dlq", "list", "-g", group)) == 2


def test_dlq_refusals(cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str]) -> None:
    namesrv = cluster.namesrv
    group = unique("NoDlqCG")
    assert admin_json(capsys, namesrv, "dlq", "list", "-g", group) == []
    code, out, _ = run_admin(capsys, namesrv, "dlq", "list", "-g", group)
    assert code == 0
    assert f"no dead letters in %DLQ%{group}" in out
    code, out, err = run_admin(capsys, namesrv, "dlq", "show", "-g", group, "-i", "ABC")
    assert code == 1 and out == ""
    assert err == (
        f"boltmq admin dlq: no dead letter ABC in %DLQ%{group}; dlq list -g {group} shows the ids\n"
    )
    for argv, complaint in [
        (["resend"], "resend needs either --all or -i MSGID (one of them)"),
        (["resend", "--all", "-i", "ABC"], "resend needs either --all or -i MSGID (one of them)"),
        (["show"], "show needs -i MSGID (dlq list shows the ids)"),
        (["export"], "export needs -o FILE.jsonl"),
        (["list", "--all"], "--all goes with resend only"),
    ]:
        code, out, err = run_admin(capsys, namesrv, "dlq", *argv, "-g", group)
        assert (code, out, err) == (2, "", f"boltmq admin dlq: {complaint}\n")
    # A write-only DLQ (perm 2, as older RocketMQ brokers make it) is refused, not shown empty.
    trio.run(make_write_only_dlq, namesrv, group)
    code, out, err = run_admin(capsys, namesrv, "dlq", "list", "-g", group)
    assert (code, out) == (1, "")
    assert err.count("\n") == 1
    assert f"%DLQ%{group} may not be read on broker " in err
    assert f"updateTopicPerm -t %DLQ%{group} -p 6" in err
    code, _, err = run_admin(capsys, namesrv, "dlq", "purge", "-g", group)
    assert code == 2
    assert "invalid choice: 'purge'" in err


def test_a_dead_letter_without_retry_topic_is_skipped(
    cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    namesrv = cluster.namesrv
    group = unique("OrphanCG")
    dlq = names.dlq_topic(group)
    make_topic(namesrv, dlq, 1)
    [orphan] = send(namesrv, dlq, [Message(dlq, b"orphan", tags="X")])
    [row] = admin_json(capsys, namesrv, "dlq", "resend", "-g", group, "--all")
    assert row == {
        "msgId": orphan.msg_id, "dlqOffsetMsgId": orphan.offset_msg_id, "topic": None,
        "status": "NO_ORIGIN_TOPIC", "offsetMsgId": None, "queueId": None, "queueOffset": None,
    }  # fmt: skip
    code, out, _ = run_admin(capsys, namesrv, "dlq", "resend", "-g", group, "-i", orphan.msg_id)
    assert code == 0
    assert "skipped 1 without a RETRY_TOPIC property" in out
