"""Failures with real processes on loopback: a dead registry, a broker stopped mid-stream and
back again, a connection cut under the client's feet.

Loopback only, ephemeral ports (a "closed port" is one bound and released), real stores in
tmp dirs, a deadline on every wait. The two-broker test runs its own processes: a cluster
(registry + broker-a) and a lone broker-b registered with the same registry.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from client import (
    Admin,
    Message,
    MQClientError,
    Producer,
    PullConsumer,
    SendResult,
    SendStatus,
)
from client.producer import SendHandle
from protocol.bodies import ConsumeFromWhere, MessageQueue
from protocol.client import RemotingClient
from protocol.codes import RequestCode
from protocol.command import ConnectionClosedError, RemotingCommand
from protocol.message import MessageExt

from .helpers import BoltProcess, SilentPeer, free_port, poll_until, wait_for_route

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
Unique = Callable[[str], str]
N_CUT = 300
STORE_ARGS = ("--bindAddress", "127.0.0.1", "--fastPortEnable", "false",
              "--mapedFileSizeCommitLog", str(16 << 20))  # fmt: skip


async def test_first_registry_down_producer_and_consumer_use_the_second(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("TwoRegistryTopic")
    registries = f"127.0.0.1:{free_port()};{cluster.namesrv}"
    with anyio.fail_after(15):
        async with Producer(unique("PG"), namesrv_addr=registries) as producer:
            sent = [await producer.send(Message(topic, f"m{i}".encode())) for i in range(4)]
        async with PullConsumer(unique("CG"), namesrv_addr=registries,
                                consume_from_where=FIRST) as consumer:  # fmt: skip
            await wait_for_route(consumer.instance, topic)
            await consumer.subscribe(topic)
            got = await poll_until(consumer, 4)
    assert sorted(m.msg_id for m in got) == sorted(r.msg_id for r in sent)


async def test_connection_cut_mid_stream_the_sends_reconnect(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("CutTopic")
    # The held pull reads a topic of its own: a send landing in its queue would answer it.
    held_topic = unique("CutHeld")
    held_errors: list[BaseException] = []
    async with (
        Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer,
        PullConsumer(unique("CG"), instance=producer.instance, auto_commit=False) as holder,
        anyio.create_task_group() as tg,
    ):
        await producer.send(Message(topic, b"before"))
        await producer.send(Message(held_topic, b"held"))
        remoting = producer.instance.remoting

        async def cut_if_busy() -> bool:
            # Cut once sends wait for answers (more than the held pull and a heartbeat).
            # Calls whose answer was already read still complete, so how many sends fail
            # varies; the held pull fails every time.
            connection = await remoting.connection(cluster.broker)
            if connection.statistics().pending_calls <= 3:
                return False
            remoting.close(cluster.broker)
            return True

        async def held_pull(queue: MessageQueue) -> None:
            try:
                await holder.pull(queue, suspend=10)  # the broker holds it: nothing new
            except ConnectionClosedError as exc:
                held_errors.append(exc)

        with anyio.fail_after(15):
            queue = (await producer.queues(held_topic))[0]
            await holder.assign([queue])
            await holder.seek_to_end(queue)
            tg.start_soon(held_pull, queue)
            while not (await remoting.connection(cluster.broker)).statistics().pending_calls:
                await anyio.sleep(0.01)
            handles: list[SendHandle] = []
            cut = False
            for i in range(N_CUT):
                handles.append(await producer.send_async(Message(topic, f"m{i}".encode())))
                cut = cut or (i >= 20 and await cut_if_busy())
            while not cut and not all(h.done() for h in handles):
                cut = await cut_if_busy()
                await anyio.sleep(0)
            results: list[SendResult] = [await handle for handle in handles]
            after = await producer.send(Message(topic, b"after"))
        with anyio.fail_after(2):  # far less than the 10 s hold: the cut ended it
            while not held_errors:
                await anyio.sleep(0.01)
        stats = producer.statistics()
        assert cut and stats.retries == stats.failed_attempts  # every failed attempt retried
        assert cluster.broker in remoting.addresses()  # a new connection
    [held_error] = held_errors
    assert f"connection to {cluster.broker} closed (closed by the client)" in str(held_error)
    assert all(r.status is SendStatus.SEND_OK for r in [*results, after])
    async with PullConsumer(unique("CG"), namesrv_addr=cluster.namesrv,
                            consume_from_where=FIRST) as consumer:  # fmt: skip
        await wait_for_route(consumer.instance, topic)
        await consumer.subscribe(topic)
        got: list[MessageExt] = []
        with anyio.fail_after(10):
            # A send cut after the broker stored it is stored again by its retry, so count
            # distinct bodies: every one sent must arrive.
            while len({m.body for m in got}) < N_CUT + 2:
                got.extend(await consumer.poll(timeout=1.0))
    assert {m.body for m in got} == {b"before", b"after", *(f"m{i}".encode() for i in range(N_CUT))}


async def test_a_pending_request_fails_when_the_peer_cuts_the_connection(
    anyio_backend: str,
) -> None:
    peer = SilentPeer()
    async with anyio.create_task_group() as tg, RemotingClient() as client:
        await tg.start(peer.serve)
        outcome: list[BaseException] = []

        async def call() -> None:
            try:
                await client.invoke(
                    peer.address, RemotingCommand.request(RequestCode.HEART_BEAT), 30
                )
            except ConnectionClosedError as exc:
                outcome.append(exc)

        with anyio.fail_after(5):
            async with anyio.create_task_group() as calls:
                calls.start_soon(call)
                while not peer.received:
                    await anyio.sleep(0.01)
                await peer.connections[0].aclose()  # the server side hangs up
        tg.cancel_scope.cancel()
    [error] = outcome
    assert "peer closed the connection" in str(error) and peer.address in str(error)


async def test_broker_stopped_mid_stream_then_back(
    tmp_path: Path, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("TwoBrokerTopic"), unique("CG")
    home_a, home_b = tmp_path / "a", tmp_path / "b"
    port_b = free_port()
    a = BoltProcess(home_a, "cluster", "--home", str(home_a), "--registryPort", "0",
                    "--listenPort", "0", "--brokerName", "broker-a", *STORE_ARGS)  # fmt: skip

    def start_b() -> BoltProcess:
        return BoltProcess(
            home_b, "broker", "-n", a.registry, "--listenPort", str(port_b),
            "--brokerName", "broker-b", "--storePathRootDir", str(home_b / "store"), *STORE_ARGS,
        )  # fmt: skip

    b = start_b()
    try:
        async with Admin(namesrv_addr=a.registry) as admin:
            [cluster_name] = (await admin.cluster_info()).cluster_addr_table
            await admin.create_topic(topic, cluster=cluster_name, queue_nums=2)
        async with Producer(unique("PG"), namesrv_addr=a.registry, send_msg_timeout=2,
                            send_latency_fault_enable=True) as producer:  # fmt: skip
            with anyio.fail_after(10):
                while {q.broker_name for q in await producer.queues(topic)} != {
                    "broker-a",
                    "broker-b",
                }:
                    await producer.instance.update_route(topic)
            async with PullConsumer(group, namesrv_addr=a.registry, consume_from_where=FIRST,
                                    auto_commit=False) as consumer:  # fmt: skip
                await consumer.subscribe(topic)
                first = [await producer.send(Message(topic, f"a{i}".encode())) for i in range(8)]
                assert {r.queue.broker_name for r in first} == {"broker-a", "broker-b"}
                await poll_until(consumer, 8)
                await consumer.commit()

                b.stop()  # mid-stream: the producer's route still names broker-b
                with anyio.fail_after(15):
                    during = [
                        await producer.send(Message(topic, f"b{i}".encode())) for i in range(12)
                    ]
                stats = producer.statistics()
                assert {r.queue.broker_name for r in during} == {"broker-a"}
                assert stats.failed_attempts == 1 and stats.retries == 1  # then avoided
                assert not producer.fault_strategy.tolerance.is_available("broker-b")
                got = await poll_until(consumer, 12)  # the survivor's queues still answer
                assert sorted(m.body for m in got) == sorted(f"b{i}".encode() for i in range(12))
                await consumer.commit()

            b = start_b()  # same port, same store
            with anyio.fail_after(15):
                while "broker-b" not in {q.broker_name for q in await producer.queues(topic)}:
                    await producer.instance.update_route(topic)
                back: list[SendResult] = []
                while len(back) < 4:  # the old connection's backoff may refuse a first try
                    queue = MessageQueue(
                        topic=topic, broker_name="broker-b", queue_id=len(back) % 2
                    )
                    try:
                        back.append(await producer.send(Message(topic, b"c"), queue=queue))
                    except MQClientError:
                        await anyio.sleep(0.1)
        # A new member of the group starts from the offsets committed before the stop.
        async with PullConsumer(group, namesrv_addr=a.registry, consume_from_where=FIRST,
                                auto_commit=False) as consumer:  # fmt: skip
            await consumer.subscribe(topic)
            got = await poll_until(consumer, 4)
            assert await consumer.poll(timeout=0.3) == []
        assert sorted(m.msg_id for m in got) == sorted(r.msg_id for r in back)
    finally:
        b.stop()
        a.stop()
