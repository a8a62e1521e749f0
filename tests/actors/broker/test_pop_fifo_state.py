"""FIFO pop state: the delivery counts of an orderly group's queue survive a broker restart
(a message that came back N times is shown with N reconsume times after it), and NOTIFICATION
says a FIFO queue held by an unacked message has nothing until that message is acked.

Loopback only, a real file store; invisible times of 1 s, every wait has a deadline."""

from __future__ import annotations

from pathlib import Path

import trio

from protocol import RemotingClient, ResponseCode
from tests.actors.broker.delays import open_cluster, send
from tests.actors.broker.pop_helpers import Popped, ack_request, notification_request, pop
from tests.support.remoting import call

FIFO = {"queue_id": 0, "max_msgs": 1, "order": True}


async def pop_fifo(client: RemotingClient, address: str, topic: str, attempt: str) -> Popped:
    """The queue's next FIFO message, once its hold has ended."""
    with trio.fail_after(15):
        while True:
            found = await pop(
                client, address, topic, **FIFO, attempt_id=attempt, invisible_ms=1000, poll_ms=300
            )
            if found:
                return found[0]


async def test_fifo_delivery_counts_survive_a_restart(tmp_path: Path) -> None:
    topic = "PopFifoCounts"
    async with RemotingClient() as client:
        async with open_cluster(tmp_path) as cluster:
            address = cluster.broker_address
            await send(client, address, topic, b"m0", queue_id=0)
            first = await pop_fifo(client, address, topic, "a1")
            assert (first.message.body, first.message.reconsume_times) == (b"m0", 0)
            second = await pop_fifo(client, address, topic, "a2")
            assert second.message.reconsume_times == 1
            # Its second invisible time ends before the stop: two deliveries counted.
            pop_service = cluster.broker.pop
            with trio.fail_after(15):
                while 2 not in pop_service._order_counts(("CG_pop", topic, 0)).values():
                    await trio.sleep(0.05)
        async with open_cluster(tmp_path) as cluster:
            third = await pop_fifo(client, cluster.broker_address, topic, "a3")
            assert (third.message.body, third.message.reconsume_times) == (b"m0", 2)
            answer = await call(client, cluster.broker_address, ack_request(topic, third))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            assert cluster.broker.pop.order_deliveries == {}


async def has_msg(client: RemotingClient, address: str, topic: str, order: bool) -> bool:
    request = notification_request(topic, queue_id=0, order=order)
    answer = await call(client, address, request)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return (answer.ext_fields or {})["hasMsg"] == "true"


async def test_notification_of_a_fifo_queue_held_by_an_unacked_message(tmp_path: Path) -> None:
    topic = "PopFifoNotify"
    async with RemotingClient() as client, open_cluster(tmp_path) as cluster:
        address = cluster.broker_address
        for i in range(2):
            await send(client, address, topic, f"m{i}".encode(), queue_id=0)
        assert await has_msg(client, address, topic, order=True)
        (held,) = await pop(client, address, topic, **FIFO, attempt_id="n1", invisible_ms=60_000)
        # m1 waits behind m0: a FIFO pop would find nothing.
        assert not await has_msg(client, address, topic, order=True)
        assert await pop(client, address, topic, **FIFO, attempt_id="n2") == []
        answer = await call(client, address, ack_request(topic, held))
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        assert await has_msg(client, address, topic, order=True)
        (after,) = await pop(client, address, topic, **FIFO, attempt_id="n3")
        assert after.message.body == b"m1"


async def test_a_held_fifo_queue_wakes_its_long_polls_when_acked(tmp_path: Path) -> None:
    topic = "PopFifoWake"
    async with RemotingClient() as client, open_cluster(tmp_path) as cluster:
        address = cluster.broker_address
        for i in range(3):
            await send(client, address, topic, f"m{i}".encode(), queue_id=0)
        answers: list[object] = []

        async def notify() -> None:
            request = notification_request(topic, queue_id=0, order=True, poll_ms=20_000)
            answer = await call(client, address, request, 30)
            answers.append((answer.ext_fields or {}).get("hasMsg"))

        async def long_pop() -> None:
            found = await pop(client, address, topic, **FIFO, attempt_id="w9", poll_ms=20_000)
            answers.append([p.message.body for p in found])

        for attempt, waiter, woken in (("w1", notify, "true"), ("w2", long_pop, [b"m2"])):
            (held,) = await pop(
                client, address, topic, **FIFO, attempt_id=attempt, invisible_ms=60_000
            )
            answers.clear()
            with trio.fail_after(10):  # well inside the 20 s poll: the ack wakes it
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(waiter)
                    await trio.sleep(0.3)
                    assert answers == []  # held behind the unacked message
                    answer = await call(client, address, ack_request(topic, held))
                    assert answer.code == ResponseCode.SUCCESS, answer.remark
            assert answers == [woken]
