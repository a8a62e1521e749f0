"""Alerts on a live cluster: a group's DLQ that gets dead letters while the monitor runs (a
push consumer fails them with RECONSUME_LATER, one retry after 1 s, then the DLQ).

Loopback only, ephemeral ports; every wait has a deadline.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import trio

import boltmq
from client import Admin, ConsumeConcurrentlyStatus, Message, Producer, PushConsumer
from client.instance import ClientInstance
from monitor.collector import Collector
from monitor.model import Model, Thresholds
from monitor.snapshot import Snapshot
from protocol import names
from protocol.bodies import ConsumeFromWhere
from protocol.message import MessageExt

from .helpers import wait_for_route

pytestmark = pytest.mark.timeout(180)

TOPIC, GROUP = "MonDead", "cg_mon_dead"


def fail_poison(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
    if any(m.body.startswith(b"poison") for m in messages):
        return ConsumeConcurrentlyStatus.RECONSUME_LATER
    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


async def refresh_until(
    collector: Collector, model: Model, what: str, done: Callable[[Snapshot], bool]
) -> Snapshot:
    with trio.move_on_after(90):
        while True:
            snapshot = model.update(await collector.sample())
            if done(snapshot):
                return snapshot
            await trio.sleep(0.3)
    pytest.fail(f"the monitor never showed {what}")


async def test_dlq_got_new_messages(tmp_path: Path) -> None:
    async with boltmq.embedded() as cluster:
        namesrv = cluster.registry_address
        async with Admin(namesrv_addr=namesrv) as admin:
            await admin.create_topic(TOPIC, broker_addr=cluster.broker_address, queue_nums=1)
            await wait_for_route(admin, TOPIC)
        consumer = PushConsumer(
            GROUP,
            fail_poison,
            namesrv_addr=namesrv,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            max_reconsume_times=1,
            delay_level_when_next_consume=1,
            persist_consumer_offset_interval=0.2,
            offset_store_dir=tmp_path,
        )
        consumer.subscribe(TOPIC)
        async with (
            consumer,
            Producer("pg_mon_dead", namesrv_addr=namesrv) as producer,
            ClientInstance(namesrv, timeout=5) as instance,
        ):
            collector, model = Collector(instance, timeout=5), Model(Thresholds(disk_ratio=1.0))
            await producer.send(Message(TOPIC, b"fine"))

            def group_seen(s: Snapshot) -> bool:
                return any(g.group == GROUP and g.lag == 0 for g in s.groups)

            # The monitor knows the group before anything dies: no DLQ, no alert.
            snapshot = await refresh_until(collector, model, "the group", group_seen)
            assert not [a for a in snapshot.alerts if a.kind == "DLQ got new messages"]
            for n in range(2):
                await producer.send(Message(TOPIC, f"poison-{n}".encode()))

            def dlq_alert(s: Snapshot) -> bool:
                return any(a.kind == "DLQ got new messages" for a in s.alerts)

            snapshot = await refresh_until(collector, model, "the DLQ alert", dlq_alert)
    (alert,) = [a for a in snapshot.alerts if a.kind == "DLQ got new messages"]
    assert alert.subject == names.dlq_topic(GROUP)
    assert alert.message.startswith(("1 new", "2 new"))
    (row,) = [g for g in snapshot.groups if g.group == GROUP]
    assert row.dlq_depth in (1, 2)
