"""Async sends against a real BoltMQ cluster on loopback, on trio and on asyncio.

Sends that must stay pending go to a `SilentPeer` (a loopback TCP server that never answers)
entered in the producer's broker table under a broker name of its own. Every wait has a
deadline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from client import Message, MQClientError, Producer, PullConsumer, SendResult, SendStatus
from protocol.bodies import ConsumeFromWhere, MessageQueue

from .helpers import SilentPeer, poll_until, wait_for_route

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
Unique = Callable[[str], str]
Outcome = tuple[SendResult | None, BaseException | None]


def silent_queue(producer: Producer, peer: SilentPeer, topic: str) -> MessageQueue:
    """A queue whose broker takes requests and never answers."""
    producer.instance.broker_addrs["silent-broker"] = {0: peer.address}
    return MessageQueue(topic=topic, broker_name="silent-broker", queue_id=0)


async def test_async_sends_answer_callbacks_and_handles(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("AsyncTopic")
    outcomes: list[Outcome] = []
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        await producer.send(Message(topic, b"first"))  # creates the topic
        with anyio.fail_after(10):
            handles = [
                await producer.send_async(
                    Message(topic, f"async {i}".encode()),
                    lambda result, error: outcomes.append((result, error)),
                )
                for i in range(20)
            ]
            results = [await handle for handle in handles]
        stats = producer.statistics()
    assert len(outcomes) == 20 and all(error is None for _, error in outcomes)
    assert {r.msg_id for r, _ in outcomes if r} == {r.msg_id for r in results}
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert all(h.done() for h in handles)
    assert stats.async_started == 20 and stats.async_in_flight == 0
    async with PullConsumer(unique("CG"), namesrv_addr=cluster.namesrv,
                            consume_from_where=FIRST) as consumer:  # fmt: skip
        await wait_for_route(consumer.instance, topic)
        await consumer.subscribe(topic)
        got = await poll_until(consumer, 21)
    assert {m.msg_id for m in got} >= {r.msg_id for r in results}
    assert sorted(m.body for m in got if m.body != b"first") == sorted(
        f"async {i}".encode() for i in range(20)
    )


async def test_async_send_errors_reach_the_callback_and_the_handle(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("AsyncErrTopic")
    outcomes: list[Outcome] = []
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        with pytest.raises(ValueError, match="body is empty"):
            await producer.send_async(Message(topic, b""))  # bad input fails at once
        nowhere = MessageQueue(topic=topic, broker_name="no-such-broker", queue_id=0)
        with anyio.fail_after(10):
            handle = await producer.send_async(
                Message(topic, b"lost?"), lambda r, e: outcomes.append((r, e)), queue=nowhere
            )
            with pytest.raises(MQClientError, match="no-such-broker"):
                await handle
    [(result, error)] = outcomes
    assert result is None and isinstance(error, MQClientError)


async def test_closing_waits_for_pending_async_sends(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("AsyncCloseTopic")
    outcomes: list[Outcome] = []
    with anyio.fail_after(15):
        async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
            for i in range(30):
                await producer.send_async(
                    Message(topic, f"{i}".encode()), lambda r, e: outcomes.append((r, e))
                )
            pending_at_close = producer.statistics().async_in_flight
    assert pending_at_close > 0  # the close really had something to wait for
    assert len(outcomes) == 30
    assert all(r is not None and r.status is SendStatus.SEND_OK for r, _ in outcomes)


async def test_leaving_on_an_error_cancels_pending_sends_with_a_clear_error(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    outcomes: list[Outcome] = []
    peer = SilentPeer()
    async with anyio.create_task_group() as tg:
        await tg.start(peer.serve)
        with anyio.fail_after(10), pytest.raises(RuntimeError, match="application failed"):
            async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
                queue = silent_queue(producer, peer, unique("SilentTopic"))
                handle = await producer.send_async(
                    Message(queue.topic, b"never answered"),
                    lambda r, e: outcomes.append((r, e)),
                    queue=queue,
                    timeout=30,
                )
                while not peer.received:
                    await anyio.sleep(0.01)
                del producer.instance.broker_addrs["silent-broker"]  # no unregister there
                raise RuntimeError("application failed")
        tg.cancel_scope.cancel()
    assert handle.done()
    with pytest.raises(MQClientError, match=r"cancelled: the producer .* closed"):
        await handle
    [(result, error)] = outcomes
    assert result is None and isinstance(error, MQClientError)


async def test_in_flight_limit_holds_new_sends_until_pending_ones_fail(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    peer = SilentPeer()
    async with anyio.create_task_group() as tg:
        await tg.start(peer.serve)
        async with Producer(unique("PG"), namesrv_addr=cluster.namesrv,
                            max_async_in_flight=2) as producer:  # fmt: skip
            queue = silent_queue(producer, peer, unique("LimitTopic"))
            handles = [
                await producer.send_async(Message(queue.topic, b"x"), queue=queue, timeout=30)
                for _ in range(2)
            ]
            with anyio.move_on_after(0.3) as held:
                await producer.send_async(Message(queue.topic, b"third"), queue=queue)
            assert held.cancelled_caught  # no room: the third send waited
            with anyio.fail_after(5):
                while peer.received == 0:
                    await anyio.sleep(0.01)
                producer.instance.remoting.close(peer.address)  # the pending calls fail now
                for handle in handles:
                    with pytest.raises(MQClientError, match="closed by the client"):
                        await handle
                third = await producer.send_async(
                    Message(queue.topic, b"third"), queue=queue, timeout=0.2
                )
                with pytest.raises(MQClientError, match="no response"):
                    await third  # the peer never answers: a timeout, not a hang
            del producer.instance.broker_addrs["silent-broker"]  # no unregister there
        tg.cancel_scope.cancel()
