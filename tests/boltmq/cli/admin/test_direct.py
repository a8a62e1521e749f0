"""queryMsgById / queryMsgByUniqueKey -g -d: a found message pushed to one live consumer.

The broker relays CONSUME_MESSAGE_DIRECTLY to the push consumer, whose listener gets the
message once more; the verb prints how the listener took it.
"""

from __future__ import annotations

from typing import Any

import pytest

from client import BlockingPushConsumer
from protocol.bodies import ConsumeFromWhere
from tests.boltmq.cli.admin.helpers import admin_json, make_topic, run_admin, wait_for
from tests.boltmq.cli.admin.test_offsets import Received


def test_push_a_found_message_to_a_live_consumer(
    cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    topic, group = unique("DirectT"), unique("direct-cg")
    make_topic(cluster.namesrv, topic, 1)
    sent = [
        admin_json(capsys, cluster.namesrv, "sendMessage", "-t", topic, "-p", body)
        for body in ("first", "second")
    ]
    received = Received()
    consumer = BlockingPushConsumer(
        group, received, namesrv_addr=cluster.namesrv,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        persist_consumer_offset_interval=0.2, offset_store_dir=str(tmp_path),
    )  # fmt: skip
    consumer.subscribe(topic)
    with consumer:
        wait_for(lambda: [received.count(b) for b in ("first", "second")], lambda c: c == [1, 1])
        client_id = consumer.consumer.instance.client_id

        # By offset msgId: the listener gets "first" again, the verb shows its answer.
        offset_id = sent[0]["offsetMsgId"]
        rows = admin_json(capsys, cluster.namesrv, "queryMsgById", "-i", offset_id,
                          "-g", group, "-d", client_id)  # fmt: skip
        assert rows[0].pop("spentTimeMills") >= 0
        assert rows == [{"msgId": offset_id, "order": False, "autoCommit": True,
                         "consumeResult": "CR_SUCCESS", "remark": None}]  # fmt: skip
        assert received.count("first") == 2  # answered after the listener ran
        assert received.count("second") == 1

        # By client msgId (UNIQ_KEY): the stored copy's offset msgId is what the broker gets.
        rows = admin_json(capsys, cluster.namesrv, "queryMsgByUniqueKey", "-t", topic,
                          "-i", sent[1]["msgId"], "-g", group, "-d", client_id)  # fmt: skip
        assert [(r["msgId"], r["consumeResult"]) for r in rows] == [
            (sent[1]["offsetMsgId"], "CR_SUCCESS")
        ]
        assert received.count("second") == 2

        # The table mode.
        code, out, _ = run_admin(capsys, cluster.namesrv, "queryMsgById", "-i", offset_id,
                                 "-g", group, "-d", client_id)  # fmt: skip
        assert code == 0
        for title in ("MsgId", "Order", "Auto Commit", "Consume Result", "Remark", "Spent (ms)",
                      "CR_SUCCESS", offset_id):  # fmt: skip
            assert title in out
        assert received.count("first") == 3

        # A client id that is not connected: one line naming it and where to look.
        code, out, err = run_admin(capsys, cluster.namesrv, "queryMsgById", "-i", offset_id,
                                   "-g", group, "-d", "10.9.9.9@1")  # fmt: skip
        assert (code, out) == (1, "")
        assert err == (
            f"boltmq admin queryMsgById: consumer 10.9.9.9@1 of group {group} is not connected "
            f"to the broker that stores {offset_id}; consumerConnection -g {group} lists the "
            "live client ids\n"
        )
    assert received.count("first") == 3


def test_direct_flags_go_together(cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_admin(capsys, cluster.namesrv, "queryMsgByUniqueKey", "-t", "T",
                               "-i", "ABC", "-g", "cg")  # fmt: skip
    assert (code, out) == (2, "")
    assert err == (
        "boltmq admin queryMsgByUniqueKey: -g and -d go together: the group and the client id "
        "to push to\n"
    )
    code, out, _ = run_admin(capsys, None, "queryMsgById", "--help")
    assert code == 0 and "[-g OrderConsumers -d 10.0.0.5@4242]" in out
