"""Master down: the push consumer keeps consuming from the slave and commits its offsets there.

Registry, master and slave (slaveReadEnable) run in this process on loopback (trio); the
master stops cleanly (it unregisters, so the route lists only the slave). The listener holds
after the first messages, so the consumer stops pulling once its cache is full: what it has
not pulled when the master stops can only come from the slave.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import trio

from actors.broker.broker import Broker
from client import ConsumeConcurrentlyStatus, PushConsumer
from protocol import ResponseCode
from protocol.bodies import ConsumeFromWhere
from protocol.message import MessageExt
from tests.actors.broker.ha.helpers import (
    master_slave_for_failover,
    wait_caught_up,
    wait_for,
)
from tests.actors.broker.helpers import send_request
from tests.support.remoting import call

pytestmark = pytest.mark.timeout(60)

TOPIC = "PushFailoverT"
GROUP = "CG_push_failover"
TOTAL = 300
HOLD_AFTER = 10
THRESHOLD = 50


def served(broker: Broker) -> int:
    """Messages of TOPIC the broker has answered pulls of GROUP with."""
    return broker.stats.group_get.get(TOPIC, {}).get(GROUP, [0])[0]


async def test_push_consumer_reads_from_the_slave_while_the_master_is_down(
    tmp_path: Path,
) -> None:
    gate = trio.Event()
    bodies: list[bytes] = []

    async def listener(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        if len(bodies) >= HOLD_AFTER:
            await gate.wait()
        bodies.extend(m.body for m in messages)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    async with master_slave_for_failover(tmp_path) as (registry, client, runner, master, slave):
        for i in range(TOTAL):
            request = send_request(TOPIC, f"m-{i:04d}".encode(), queue_id=0)
            assert (await call(client, master.address, request)).code == ResponseCode.SUCCESS
        await wait_caught_up(master, slave)
        assert slave.ha.sync is not None and await slave.ha.sync.sync_all()

        push = PushConsumer(GROUP, listener, namesrv_addr=registry.address,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                            pull_batch_size=8, pull_threshold_for_queue=THRESHOLD,
                            persist_consumer_offset_interval=0.2)  # fmt: skip
        push.subscribe(TOPIC)
        async with push:
            await wait_for(lambda: push.statistics().flow_control_pauses > 0, 20)
            pulled_from_master = served(master)
            assert pulled_from_master < TOTAL

            await runner.stop()
            gate.set()
            await wait_for(lambda: len(set(bodies)) >= TOTAL, 30)
            assert served(slave) >= TOTAL - pulled_from_master
            # Offsets go to the slave while the master is away.
            await wait_for(lambda: slave.offsets.query_offset(GROUP, TOPIC, 0) == TOTAL, 15)

    assert set(bodies) == {f"m-{i:04d}".encode() for i in range(TOTAL)}
    assert max(Counter(bodies).values()) == 1
