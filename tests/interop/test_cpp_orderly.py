"""Orderly messaging with the official C++ client (PyPI ``rocketmq`` 0.4.4) against our broker.

A producer picks the queue by a sharding key (``send_orderly``); an orderly push consumer locks
its queues on the broker (LOCK_BATCH_MQ) and receives each queue's messages in send order,
while another client of the same group, asking for the same queues, is granted none.

The C++ client blocks and runs its own threads: its calls go through ``trio.to_thread`` and
what its callbacks deliver is collected under a lock and waited for with a deadline.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
import trio

import boltmq
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode, names
from protocol.bodies import (
    GetConsumerListByGroupResponseBody,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
)
from protocol.headers import (
    CreateTopicRequestHeader,
    GetConsumerListByGroupRequestHeader,
    encode_header,
)
from tests.support.waiting import wait_until

from .cpp_client import rocketmq

pytestmark = pytest.mark.timeout(180)

QUEUES = 4
KEYS = 4
PER_KEY = 10


class Inbox:
    """(queue id, queue offset, body) of every message a C++ consumer delivered, in order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[tuple[int, int, str]] = []

    def __call__(self, msg: Any) -> None:
        body = msg.body.decode() if isinstance(msg.body, bytes) else msg.body
        with self.lock:
            self.items.append((msg.queue_id, msg.queue_offset, body))

    def snapshot(self) -> list[tuple[int, int, str]]:
        with self.lock:
            return list(self.items)


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


async def test_cpp_orderly_consumer_holds_its_queues_and_gets_send_order(tmp_path: Any) -> None:
    topic = unique("CppOrderTopic")
    group = unique("CG_orderly")
    async with boltmq.embedded(tmp_path) as cluster, RemotingClient() as client:
        namesrv = cluster.registry_address
        broker = cluster.broker
        header = CreateTopicRequestHeader(
            topic=topic, default_topic=names.AUTO_CREATE_TOPIC_KEY_TOPIC, read_queue_nums=QUEUES,
            write_queue_nums=QUEUES, perm=6, topic_filter_type="SINGLE_TAG", order=False,
        )  # fmt: skip
        with trio.fail_after(10):
            answer = await client.invoke(
                cluster.broker_address,
                RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, encode_header(header)),
            )
        assert answer.code == ResponseCode.SUCCESS, answer.remark

        producer = rocketmq.Producer(unique("PG"))
        producer.set_namesrv_addr(namesrv)
        await trio.to_thread.run_sync(producer.start)
        sent_queue: dict[int, int] = {}

        async def send_round(seqs: range) -> None:
            for seq in seqs:
                for key in range(KEYS):
                    msg = rocketmq.Message(topic)
                    msg.set_keys(f"key-{key}")
                    msg.set_body(f"{key}:{seq}".encode())
                    result = await trio.to_thread.run_sync(producer.send_orderly, msg, key)
                    assert result.status == rocketmq.SendStatus.OK

        try:
            await send_round(range(PER_KEY // 2))

            inbox = Inbox()
            consumer = rocketmq.PushConsumer(group, orderly=True)
            consumer.set_namesrv_addr(namesrv)
            consumer.subscribe(topic, inbox)
            await trio.to_thread.run_sync(consumer.start)
            try:
                mqs = [MessageQueue(topic=topic, broker_name="broker-a", queue_id=q)
                       for q in range(QUEUES)]  # fmt: skip

                # The orderly consumer locks every queue on the broker before it consumes.
                def holders() -> set[str | None]:
                    return {broker.locks.locked_by(group, mq) for mq in mqs}

                await wait_until(lambda: len(holders()) == 1 and None not in holders(), 60,
                               "the C++ consumer to lock all queues")  # fmt: skip
                [holder] = holders()
                ids = await client.invoke(
                    cluster.broker_address,
                    RemotingCommand.request(
                        RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                        encode_header(GetConsumerListByGroupRequestHeader(consumer_group=group)),
                    ),
                )
                assert ids.body is not None
                member_ids = GetConsumerListByGroupResponseBody.from_json(ids.body).consumer_id_list
                assert holder in member_ids

                # Another client of the group asking for the same queues gets none of them.
                intruder = LockBatchRequestBody(
                    consumer_group=group, client_id="127.0.0.1@intruder", mq_set=mqs
                )
                with trio.fail_after(10):
                    answer = await client.invoke(
                        cluster.broker_address,
                        RemotingCommand.request(
                            RequestCode.LOCK_BATCH_MQ, None, intruder.to_json()
                        ),
                    )
                assert answer.code == ResponseCode.SUCCESS and answer.body is not None
                assert LockBatchResponseBody.from_json(answer.body).lock_ok_mq_set == []
                assert holders() == {holder}

                await send_round(range(PER_KEY // 2, PER_KEY))
                await wait_until(lambda: len(inbox.snapshot()) >= KEYS * PER_KEY, 60,
                               f"{KEYS * PER_KEY} messages")  # fmt: skip
            finally:
                await trio.to_thread.run_sync(consumer.shutdown)
        finally:
            await trio.to_thread.run_sync(producer.shutdown)

        got = inbox.snapshot()
        assert sorted(body for _, _, body in got) == sorted(
            f"{key}:{seq}" for key in range(KEYS) for seq in range(PER_KEY)
        )
        for key in range(KEYS):
            mine = [(queue, offset, body) for queue, offset, body in got
                    if body.startswith(f"{key}:")]  # fmt: skip
            # One key, one queue (the hashing selector: key % queues), delivered in send order.
            assert {queue for queue, _, _ in mine} == {key % QUEUES}
            assert [body for _, _, body in mine] == [f"{key}:{seq}" for seq in range(PER_KEY)]
            assert [offset for _, offset, _ in mine] == list(range(PER_KEY))
            sent_queue[key] = key % QUEUES
        assert sorted(sent_queue.values()) == list(range(QUEUES))
