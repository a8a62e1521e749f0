"""A SYNC_FLUSH broker SIGKILLed with popped messages in flight, then started again on the
same store: every message not acked comes back once its invisible time ends, exactly once;
none is lost, and none acked before the kill comes back."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode, names
from protocol.headers import CreateTopicRequestHeader, encode_header
from tests.actors.broker.helpers import send_request
from tests.actors.broker.pop_helpers import Popped, ack_request, pop
from tests.reliability.nodes import broker_node, call

pytestmark = pytest.mark.timeout(150)

TOPIC = "PopKill"
COUNT = 40


async def test_pop_state_survives_sigkill(tmp_path: Path) -> None:
    broker = broker_node(tmp_path, "broker", "", flushDiskType="SYNC_FLUSH")
    await broker.start()
    try:
        async with RemotingClient() as client:
            # Created by the operator's request, which the broker answers once topics.json
            # has it (a topic a send creates is written in a batch, which a kill may lose).
            header = CreateTopicRequestHeader(
                topic=TOPIC, default_topic=names.AUTO_CREATE_TOPIC_KEY_TOPIC,
                read_queue_nums=4, write_queue_nums=4, perm=6, topic_filter_type="SINGLE_TAG",
                topic_sys_flag=0, order=False,
            )  # fmt: skip
            request = RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_TOPIC, encode_header(header)
            )
            answer = await call(client, broker.address, request)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            for i in range(COUNT):
                request = send_request(TOPIC, f"m{i}".encode(), queue_id=i % 4)
                answer = await call(client, broker.address, request)
                assert answer.code == ResponseCode.SUCCESS, answer.remark
            popped: list[Popped] = []
            with trio.fail_after(30):
                while len(popped) < COUNT:
                    popped += await pop(client, broker.address, TOPIC, invisible_ms=3000,
                                        max_msgs=8)  # fmt: skip
            acked = popped[::3]
            for done in acked:
                answer = await call(client, broker.address, ack_request(TOPIC, done))
                assert answer.code == ResponseCode.SUCCESS, answer.remark
            await broker.kill()
        await broker.start()
        async with RemotingClient() as client:
            back: list[Popped] = []
            # Long enough for every invisible time to end and the revive to run, and then
            # some, so a second revival of anything would show.
            with trio.move_on_after(12):
                while True:
                    back += await pop(client, broker.address, TOPIC, poll_ms=300,
                                      invisible_ms=120_000)  # fmt: skip
        expected = sorted(p.message.body for p in popped if p not in acked)
        assert sorted(p.message.body for p in back) == expected
        assert all(p.message.reconsume_times == 1 for p in back)
    finally:
        await broker.stop()
