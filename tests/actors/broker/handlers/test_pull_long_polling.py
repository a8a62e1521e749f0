"""Long polling: a held pull is answered as soon as a message arrives, at its timeout when none
does, at once when the hold limit is reached, and before the broker shuts down."""

from __future__ import annotations

import trio

import boltmq
from boltmq import EmbeddedCluster
from protocol import RemotingClient, RemotingCommand, ResponseCode
from protocol.message import iter_records
from tests.actors.broker.helpers import pull_request, send_request


async def held_pull(
    client: RemotingClient, address: str, request: RemotingCommand, out: list[RemotingCommand]
) -> None:
    out.append(await client.invoke(address, request, 30))


async def test_held_pull_is_answered_within_milliseconds_of_a_send(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    broker = cluster.broker_address
    assert (await client.invoke(broker, send_request("Held"))).code == ResponseCode.SUCCESS
    answers: list[RemotingCommand] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                held_pull, client, broker, pull_request("Held", 1, suspend_ms=15_000), answers
            )
            # Wait until the broker holds it, then send.
            while cluster.broker.pull_hold.held == 0:
                await trio.sleep(0.001)
            sent_at = trio.current_time()
            sent = await client.invoke(broker, send_request("Held", b"wake up"))
            assert sent.code == ResponseCode.SUCCESS
        answered_after = trio.current_time() - sent_at
    (answer,) = answers
    assert answer.code == ResponseCode.SUCCESS
    assert answer.body is not None
    assert [r.body for r in iter_records(answer.body)] == [b"wake up"]
    assert answered_after < 1.0, f"held pull answered {answered_after:.3f}s after the send"
    assert cluster.broker.pull_hold.statistics().woken == 1


async def test_held_pull_times_out_with_not_found(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    broker = cluster.broker_address
    await client.invoke(broker, send_request("Quiet"))
    start = trio.current_time()
    with trio.fail_after(10):
        answer = await client.invoke(broker, pull_request("Quiet", 1, suspend_ms=400), 10)
    waited = trio.current_time() - start
    assert answer.code == ResponseCode.PULL_NOT_FOUND
    assert 0.4 <= waited < 3
    # Without the suspend bit the answer comes at once, whatever the timeout says.
    start = trio.current_time()
    answer = await client.invoke(
        broker, pull_request("Quiet", 1, suspend_ms=8000, allow_suspend=False), 10
    )
    assert answer.code == ResponseCode.PULL_NOT_FOUND
    assert trio.current_time() - start < 4


async def test_message_for_another_queue_does_not_answer_the_hold(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    broker = cluster.broker_address
    await client.invoke(broker, send_request("Two", queue_id=0))
    answers: list[RemotingCommand] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                held_pull, client, broker, pull_request("Two", 1, suspend_ms=600), answers
            )
            while cluster.broker.pull_hold.held == 0:
                await trio.sleep(0.001)
            await client.invoke(broker, send_request("Two", b"other", queue_id=1))
    assert answers[0].code == ResponseCode.PULL_NOT_FOUND


async def test_hold_limit_answers_at_once(tmp_path: object) -> None:
    async with boltmq.embedded(max_held_pulls=1) as cluster, RemotingClient() as client:
        broker = cluster.broker_address
        await client.invoke(broker, send_request("Limited"))
        answers: list[RemotingCommand] = []
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    held_pull, client, broker, pull_request("Limited", 1, suspend_ms=8000), answers
                )
                while cluster.broker.pull_hold.held == 0:
                    await trio.sleep(0.001)
                start = trio.current_time()
                second = await client.invoke(broker, pull_request("Limited", 1, suspend_ms=8000))
                assert second.code == ResponseCode.PULL_NOT_FOUND
                assert trio.current_time() - start < 4
                assert cluster.broker.pull_hold.statistics().refused == 1
                nursery.cancel_scope.cancel()


async def test_shutdown_answers_held_pulls(tmp_path: object) -> None:
    answers: list[RemotingCommand] = []
    async with RemotingClient() as client:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery, boltmq.embedded() as cluster:
                broker = cluster.broker_address
                await client.invoke(broker, send_request("Closing"))
                nursery.start_soon(
                    held_pull,
                    client,
                    broker,
                    pull_request("Closing", 1, suspend_ms=20_000),
                    answers,
                )
                while cluster.broker.pull_hold.held == 0:
                    await trio.sleep(0.001)
                # The broker has stopped; the held pull got an answer, not a reset.
    assert [a.code for a in answers] == [ResponseCode.PULL_NOT_FOUND]
