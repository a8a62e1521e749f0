"""LOCK_BATCH_MQ / UNLOCK_BATCH_MQ (sheet 9.4): grant, renew, expiry, unlock, refusals.

Loopback only, port 0, a deadline on every call; the lease expiry is checked on the plain
table with explicit times.
"""

from __future__ import annotations

from pathlib import Path

import trio

import boltmq
from actors.broker.tables.locks import LockBatch, LockTable
from protocol import RemotingClient, ResponseCode
from protocol.bodies import LockBatchResponseBody, MessageQueue
from tests.actors.broker.helpers import SMALL_FILES, call
from tests.actors.broker.transactions_helpers import lock_request, unlock_request

GROUP = "OrderlyGroup"


def queues(n: int, topic: str = "OrderTopic") -> list[MessageQueue]:
    return [MessageQueue(topic=topic, broker_name="broker-a", queue_id=i) for i in range(n)]


def granted(answer_body: bytes | bytearray | memoryview | None) -> set[MessageQueue]:
    assert answer_body is not None
    return set(LockBatchResponseBody.from_json(answer_body).lock_ok_mq_set)


async def test_lock_grant_renew_refuse_and_unlock(tmp_path: Path) -> None:
    mqs = queues(4)
    async with boltmq.embedded(tmp_path, **SMALL_FILES) as cluster, RemotingClient() as client:
        address = cluster.broker_address
        locks = cluster.broker.locks

        answer = await call(client, address, lock_request(GROUP, "client-A", mqs[:2]))
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        assert granted(answer.body) == set(mqs[:2])
        first = locks.mq_lock_table[GROUP][mqs[0]].last_update

        # B asks for all four: only the two nobody holds.
        answer = await call(client, address, lock_request(GROUP, "client-B", mqs))
        assert granted(answer.body) == set(mqs[2:])
        assert [locks.locked_by(GROUP, mq) for mq in mqs] == ["client-A"] * 2 + ["client-B"] * 2

        # A renews its own: granted again, timestamp moves on; B's stay B's.
        await trio.sleep(0.01)
        answer = await call(client, address, lock_request(GROUP, "client-A", mqs))
        assert granted(answer.body) == set(mqs[:2])
        assert locks.mq_lock_table[GROUP][mqs[0]].last_update > first

        # Another group is a separate table.
        answer = await call(client, address, lock_request("OtherGroup", "client-C", mqs))
        assert granted(answer.body) == set(mqs)

        # A unlocking everything releases only its own entries.
        answer = await call(client, address, unlock_request(GROUP, "client-A", mqs))
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        assert [locks.locked_by(GROUP, mq) for mq in mqs] == [None, None] + ["client-B"] * 2

        # Now B can take A's old queues.
        answer = await call(client, address, lock_request(GROUP, "client-B", mqs))
        assert granted(answer.body) == set(mqs)


async def test_unknown_group_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    mqs = queues(2)
    async with (
        boltmq.embedded(tmp_path, auto_create_subscription_group=False, **SMALL_FILES) as cluster,
        RemotingClient() as client,
    ):
        await cluster.broker.locks.call(LockBatch("NoSuchGroup", tuple(mqs[:1]), "client-A"))
        before = {g: dict(t) for g, t in cluster.broker.locks.mq_lock_table.items()}
        for request in (
            lock_request("NoSuchGroup", "client-B", mqs),
            unlock_request("NoSuchGroup", "client-A", mqs),
        ):
            answer = await call(client, cluster.broker_address, request)
            assert answer.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
            assert answer.remark is not None and "NoSuchGroup" in answer.remark
        assert cluster.broker.locks.mq_lock_table == before
        assert "NoSuchGroup" not in cluster.broker.groups.table

        # A known group is served.
        answer = await call(
            client, cluster.broker_address, lock_request("TOOLS_CONSUMER", "c", mqs)
        )
        assert granted(answer.body) == set(mqs)


async def test_bad_body_is_refused(tmp_path: Path) -> None:
    from protocol import RemotingCommand, RequestCode

    async with boltmq.embedded(tmp_path, **SMALL_FILES) as cluster, RemotingClient() as client:
        request = RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, None, b"{not json")
        answer = await call(client, cluster.broker_address, request)
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert answer.remark is not None and "LOCK_BATCH_MQ" in answer.remark
        assert cluster.broker.locks.mq_lock_table == {}


def test_lease_expiry_hands_the_queue_over() -> None:
    mqs = queues(2)
    locks = LockTable(lock_max_live_time=60.0)
    assert locks.try_lock_batch(GROUP, mqs, "client-A", 0.0) == mqs

    assert locks.try_lock_batch(GROUP, mqs, "client-B", 59.0) == []
    assert locks.try_lock_batch(GROUP, mqs[:1], "client-A", 59.0) == mqs[:1]  # renew queue 0

    # At 61 s queue 1's lease (61 s old) ran out; queue 0's (2 s) did not.
    assert locks.locked_by(GROUP, mqs[1], 61.0) is None
    assert locks.try_lock_batch(GROUP, mqs, "client-B", 61.0) == mqs[1:]
    assert locks.locked_by(GROUP, mqs[0], 61.0) == "client-A"
    assert locks.is_locked(GROUP, mqs[1], "client-B", 61.0)

    # An expired holder unlocking does not release the new holder's lock.
    assert locks.unlock_batch(GROUP, mqs, "client-A") == 1
    assert locks.locked_by(GROUP, mqs[1], 61.0) == "client-B"
    assert locks.statistics().locked_queues == 1


async def test_lease_is_configurable(tmp_path: Path) -> None:
    mqs = queues(1)
    async with (
        boltmq.embedded(tmp_path, rebalance_lock_max_live_time=200, **SMALL_FILES) as cluster,
        RemotingClient() as client,
    ):
        assert cluster.broker.locks.lock_max_live_time == 0.2
        answer = await call(client, cluster.broker_address, lock_request(GROUP, "client-A", mqs))
        assert granted(answer.body) == set(mqs)
        answer = await call(client, cluster.broker_address, lock_request(GROUP, "client-B", mqs))
        assert granted(answer.body) == set()
        with trio.fail_after(5):
            while True:
                answer = await call(
                    client, cluster.broker_address, lock_request(GROUP, "client-B", mqs)
                )
                if granted(answer.body):
                    break
                await trio.sleep(0.05)
        assert cluster.broker.locks.locked_by(GROUP, mqs[0]) == "client-B"
