"""Master down: the official C++ push consumer (PyPI ``rocketmq`` 0.4.4) keeps receiving from
the slave and goes on, without loss, when the master returns.

Registry, master and slave (slaveReadEnable) run in this process on loopback; the master stops
cleanly (it unregisters, so the route lists only the slave) and comes back on the same ports
and store. The consumer's callback holds after the first messages, so the client stops pulling
once its cache is full: what it has not pulled by the time the master stops can only come
from the slave. Offsets the client commits during the outage land on the slave; the returning
master has older ones (duplicates for a consumer that starts then, never a loss). The C++
client runs its own threads: its calls go through ``trio.to_thread`` and what the callback
sees is collected under a lock and waited for with a deadline.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio

from actors.broker.broker import Broker
from protocol import RemotingClient, ResponseCode
from tests.actors.broker.ha.helpers import (
    master_slave_for_failover,
    wait_caught_up,
    wait_slave_linked,
)
from tests.actors.broker.helpers import send_request
from tests.support.remoting import call
from tests.support.waiting import wait_until

from .cpp_client import rocketmq

pytestmark = pytest.mark.timeout(300)

TOPIC = "CppFailoverT"
GROUP = "CG_cpp_failover"
#: More than the client caches per queue (1000), all in queue 0.
BEFORE_STOP = 1300
AFTER_RETURN = 50
HOLD_AFTER = 20
#: The C++ client's route refresh period (s).
ROUTE_REFRESH = 30


class GatedInbox:
    """A push-consumer callback recording bodies; it holds after ``hold_after`` messages until
    the gate opens."""

    def __init__(self, hold_after: int) -> None:
        self.lock = threading.Lock()
        self.bodies: list[str] = []
        self.hold_after = hold_after
        self.gate = threading.Event()

    def __call__(self, msg: Any) -> None:
        body = msg.body.decode() if isinstance(msg.body, bytes) else str(msg.body)
        with self.lock:
            self.bodies.append(body)
            held = len(self.bodies) >= self.hold_after
        if held:
            self.gate.wait(60)

    def count(self) -> int:
        with self.lock:
            return len(self.bodies)

    def snapshot(self) -> list[str]:
        with self.lock:
            return list(self.bodies)


async def send_range(client: RemotingClient, master: Broker, first: int, end: int) -> None:
    """Bodies ``m-<i>`` for i in [first, end) into queue 0, 16 sends at a time."""

    async def sender(start: int) -> None:
        for i in range(start, end, 16):
            request = send_request(TOPIC, f"m-{i:05d}".encode(), queue_id=0)
            assert (await call(client, master.address, request)).code == ResponseCode.SUCCESS

    async with trio.open_nursery() as nursery:
        for s in range(16):
            nursery.start_soon(sender, first + s)


def served(broker: Broker) -> int:
    """Messages of TOPIC the broker has answered pulls of GROUP with."""
    return broker.stats.group_get.get(TOPIC, {}).get(GROUP, [0])[0]


async def test_cpp_push_consumer_reads_from_the_slave_while_the_master_is_down(
    tmp_path: Path,
) -> None:
    async with master_slave_for_failover(tmp_path) as (registry, client, runner, master, slave):
        await send_range(client, master, 0, BEFORE_STOP)
        await wait_caught_up(master, slave)
        assert slave.ha.sync is not None and await slave.ha.sync.sync_all()

        inbox = GatedInbox(HOLD_AFTER)
        consumer = rocketmq.PushConsumer(GROUP)
        consumer.set_namesrv_addr(registry.address)
        # Its own client instance: the library shares one per process and name, and an
        # instance re-reads its routes 3 s after it starts, then every 30 s. A fresh one
        # sees the route without the master at the first of those, well inside the waits.
        consumer.set_instance_name(f"failover-{uuid.uuid4().hex[:8]}")
        consumer.set_thread_count(1)
        consumer.subscribe(TOPIC, inbox, "*")
        await trio.to_thread.run_sync(consumer.start)
        try:
            # The callback holds; the client pulls until its cache is full, then waits.
            await wait_until(lambda: inbox.count() >= HOLD_AFTER, 30, "the first messages")
            await wait_until(lambda: served(master) >= 1000, 30, "a full client cache")
            assert served(master) < BEFORE_STOP

            # The client turns to the slave only once its route lacks the master, and it
            # reads routes 3 s after it starts, then every 30 s: depending on where the stop
            # falls in that cycle the switch comes at once or up to 30 s later (on a loaded
            # machine the cache fills after the 3 s read), and under load the client's timer
            # thread runs late too. So the wait for the slave's messages starts at the first
            # route read after the stop (the registry counts them), not at the stop.
            await runner.stop()
            # Both read once the master has unregistered: any later route read lacks it, and
            # the client may have pulled once more while the stop began.
            route_reads = registry.actor.route_table.route_queries
            pulled_from_master = served(master)
            inbox.gate.set()

            def rest_arrived() -> bool:
                return len(set(inbox.snapshot())) >= BEFORE_STOP

            await wait_until(
                lambda: registry.actor.route_table.route_queries > route_reads or rest_arrived(),
                3 * ROUTE_REFRESH,
                "the client's first route read after the stop",
            )
            await wait_until(rest_arrived, 60, "the rest from the slave")
            assert served(slave) >= BEFORE_STOP - pulled_from_master
            # Its offsets go to the slave meanwhile (persisted every 5 s), which keeps them.
            await wait_until(
                lambda: slave.offsets.query_offset(GROUP, TOPIC, 0) == BEFORE_STOP,
                30,
                "the offset committed to the slave",
            )

            # The master returns with the offset it last heard of, not ahead of what had
            # been consumed when it stopped: a consumer starting now would repeat messages,
            # never skip any. (The slave's config sync copies that older offset back; the
            # client, still committing to the slave, may overwrite it at any moment, so
            # tests/actors/broker/ha/test_failover.py checks that step.)
            master = await runner.start()
            assert master.offsets.query_offset(GROUP, TOPIC, 0) <= HOLD_AFTER
            await wait_slave_linked(master)

            # New sends go to the master; the running consumer goes on from its own
            # offsets (from the slave until its route lists the master again).
            total = BEFORE_STOP + AFTER_RETURN
            await send_range(client, master, BEFORE_STOP, total)
            await wait_until(lambda: len(set(inbox.snapshot())) >= total, 60, "the new sends")
        finally:
            inbox.gate.set()
            await trio.to_thread.run_sync(consumer.shutdown)

    bodies = inbox.snapshot()
    assert set(bodies) == {f"m-{i:05d}" for i in range(total)}
    # One consumer that never restarted keeps its offsets in memory: nothing comes twice.
    duplicates = sum(n - 1 for n in Counter(bodies).values())
    assert duplicates == 0
