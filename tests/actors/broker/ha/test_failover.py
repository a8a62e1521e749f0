"""Master down: the project's PullConsumer keeps reading from the slave and resumes on the
master when it returns, without loss.

Real registry, master and slave (slaveReadEnable) on loopback. The master stops cleanly (it
unregisters, so the route lists only the slave at once) and comes back on the same ports and
store. Offsets committed during the outage go to the slave; once the master is back in the
route they are committed to it again. Every wait has a deadline.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path

import trio

from actors.broker.broker import Broker
from client.instance import ClientInstance
from client.pull_consumer import PullConsumer
from protocol import RemotingClient, ResponseCode
from protocol.bodies import ConsumeFromWhere
from protocol.command import RemotingError
from tests.actors.broker.ha.helpers import (
    master_slave_for_failover,
    wait_caught_up,
    wait_for,
    wait_slave_linked,
)
from tests.actors.broker.helpers import call, send_request

TOPIC = "FailoverT"
GROUP = "CG_failover"
QUEUES = 4


async def send_range(
    client: RemotingClient, master: Broker, first: int, end: int, queues: int = QUEUES
) -> None:
    """Send bodies ``m-<i>`` for i in [first, end), spread over the first ``queues`` queues."""
    for i in range(first, end):
        request = send_request(TOPIC, f"m-{i:04d}".encode(), queue_id=i % queues)
        assert (await call(client, master.address, request)).code == ResponseCode.SUCCESS


async def poll_until(
    consumer: PullConsumer, received: list[str], condition: Callable[[], bool]
) -> None:
    """Poll into ``received`` until ``condition`` holds; a failed poll (the master just went
    away) is retried, as an application would."""
    with trio.fail_after(20):
        while not condition():
            try:
                messages = await consumer.poll(timeout=0.5)
            except RemotingError:
                await trio.sleep(0.05)
                continue
            received.extend(m.body.decode() for m in messages)


def read_broker_id(instance: ClientInstance) -> int | None:
    found = instance.read_address("broker-a")
    return None if found is None else found[1]


async def test_pull_consumer_reads_from_the_slave_while_the_master_is_down(
    tmp_path: Path,
) -> None:
    received: list[str] = []
    async with AsyncExitStack() as stack:
        registry, client, runner, master, slave = await stack.enter_async_context(
            master_slave_for_failover(tmp_path)
        )
        await send_range(client, master, 0, 40)
        await wait_caught_up(master, slave)
        assert slave.ha.sync is not None and await slave.ha.sync.sync_all()  # the topic

        instance = await stack.enter_async_context(
            ClientInstance(registry.address, poll_name_server_interval=0.3)
        )
        first = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        consumer = await stack.enter_async_context(
            PullConsumer(GROUP, instance=instance, auto_commit=False, consume_from_where=first)
        )
        queues = await consumer.subscribe(TOPIC)
        assert len(queues) == QUEUES
        await poll_until(consumer, received, lambda: len(received) >= 10)
        await consumer.commit()
        committed = {q: consumer.position(q) for q in queues}
        assert {q: master.offsets.query_offset(GROUP, TOPIC, q.queue_id) for q in queues} == (
            committed
        )

        # The master stops: it unregisters, the route keeps the topic and lists the slave.
        await runner.stop()
        route = await instance.update_route(TOPIC)
        assert route is not None
        assert [b.broker_addrs for b in route.broker_datas] == [{1: slave.address}]
        assert route.queue_datas and route.queue_datas[0].read_queue_nums == QUEUES
        assert read_broker_id(instance) == 1

        await poll_until(consumer, received, lambda: len(received) >= 40)
        # Offsets committed now go to the slave, which keeps them.
        await consumer.commit()
        positions = {q: consumer.position(q) for q in queues}
        assert sum(p or 0 for p in positions.values()) == 40
        assert {q: slave.offsets.query_offset(GROUP, TOPIC, q.queue_id) for q in queues} == (
            positions
        )

        # The master comes back with its own (older) offsets; new sends go to it.
        master = await runner.start()
        assert {q: master.offsets.query_offset(GROUP, TOPIC, q.queue_id) for q in queues} == (
            committed
        )
        await wait_slave_linked(master)
        await send_range(client, master, 40, 60, queues=2)  # queues 2 and 3 stay put
        await poll_until(consumer, received, lambda: len(received) >= 60)
        # Back in the route, the master is read again and takes the offsets the slave had.
        await wait_for(lambda: read_broker_id(instance) == 0)
        await consumer.commit()
        final = {q: master.offsets.query_offset(GROUP, TOPIC, q.queue_id) for q in queues}
        assert sum(final.values()) == 60

        # The slave's config sync now copies the master's offsets: never older than these.
        await wait_caught_up(master, slave)
        assert await slave.ha.sync.sync_all()
        assert {q: slave.offsets.query_offset(GROUP, TOPIC, q.queue_id) for q in queues} == final

    # Everything arrived; this consumer kept its positions in memory, so nothing came twice
    # (a restarted one would repeat at most what was consumed after its last commit).
    assert sorted(set(received)) == [f"m-{i:04d}" for i in range(60)]
    assert len(received) == 60
