"""The group drill-down's client column: read from the members themselves
(GET_CONSUMER_RUNNING_INFO relayed by the broker) for the drilled-into group only, and the
computed guess, marked, when a member does not answer (a pull consumer has no queue table).

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
from monitor.model import GUESS_MARK, Model, Thresholds
from monitor.snapshot import QueueRow
from protocol.bodies import ConsumeFromWhere
from protocol.message import MessageExt

from .helpers import LIVE_GROUP, LIVE_TOPIC, TOPICS, consume_live, make_traffic, wait_for_route

pytestmark = pytest.mark.timeout(180)

TOPIC, GROUP, QUEUES = "MonOwned", "cg_mon_owned", 4


def consumed(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


async def drilled_rows(
    collector: Collector,
    model: Model,
    group: str,
    topic: str,
    done: Callable[[list[QueueRow]], bool],
) -> list[QueueRow]:
    """Refresh with ``group`` drilled into until ``done(rows)``."""
    collector.wanted = {group}
    with trio.fail_after(60):
        while True:
            model.update(await collector.sample())
            rows = model.group_queues(group, topic)
            if done(rows):
                return rows
            await trio.sleep(0.2)


async def test_the_client_column_is_what_each_member_holds(tmp_path: Path) -> None:
    async with boltmq.embedded() as cluster:
        namesrv = cluster.registry_address
        async with Admin(namesrv_addr=namesrv) as admin:
            await admin.create_topic(TOPIC, broker_addr=cluster.broker_address, queue_nums=QUEUES)
            await wait_for_route(admin, TOPIC)
        async with Producer("pg_mon_owned", namesrv_addr=namesrv) as producer:
            for n in range(4 * QUEUES):
                await producer.send(Message(TOPIC, f"m{n}".encode()))
        members = [
            PushConsumer(
                GROUP,
                consumed,
                namesrv_addr=namesrv,
                instance_name=name,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                persist_consumer_offset_interval=0.2,
                offset_store_dir=tmp_path / name,
            )
            for name in ("one", "two")
        ]
        for member in members:
            member.subscribe(TOPIC)
        async with members[0], members[1]:

            def held() -> dict[tuple[str, str, int], str]:
                owners = {}
                for member in members:
                    for mq in member.running_info(False).mq_table:
                        if mq.topic != TOPIC:
                            continue  # the member's %RETRY% queue
                        owners[(mq.topic, mq.broker_name, mq.queue_id)] = member.instance.client_id
                return owners

            # Both members share the queues once the second one's arrival was rebalanced.
            with trio.fail_after(60):
                while len(held()) != QUEUES or len(set(held().values())) != 2:
                    await trio.sleep(0.1)
            async with ClientInstance(namesrv, timeout=5) as instance:
                collector, model = Collector(instance, timeout=5), Model(Thresholds(disk_ratio=1.0))

                def said(rows: list[QueueRow]) -> bool:
                    return len(rows) == QUEUES and all(
                        r.client is not None and GUESS_MARK not in r.client for r in rows
                    )

                rows = await drilled_rows(collector, model, GROUP, TOPIC, said)
                owners = held()
                sample = model.latest
    assert {(r.topic, r.broker_name, r.queue_id): r.client for r in rows} == owners
    assert sample is not None and sample.queue_owners[GROUP].unanswered == frozenset()
    # Only the drilled-into group's members were asked.
    assert set(sample.queue_owners) == {GROUP}


async def test_a_member_that_does_not_answer_gets_the_marked_guess() -> None:
    async with boltmq.embedded() as cluster, trio.open_nursery() as nursery:
        namesrv = cluster.registry_address
        await make_traffic(namesrv, cluster.broker_address)
        stop = trio.Event()
        await nursery.start(consume_live, namesrv, stop)  # a pull consumer: no queue table
        async with ClientInstance(namesrv, timeout=5) as instance:
            collector, model = Collector(instance, timeout=5), Model(Thresholds(disk_ratio=1.0))

            def guessed(rows: list[QueueRow]) -> bool:
                return len(rows) == TOPICS[LIVE_TOPIC][0] and all(r.client for r in rows)

            rows = await drilled_rows(collector, model, LIVE_GROUP, LIVE_TOPIC, guessed)
            sample = model.latest
        stop.set()
    assert sample is not None
    (member,) = sample.queue_owners[LIVE_GROUP].unanswered
    # One member: the averagely guess gives it every queue, marked as computed.
    assert {r.client for r in rows} == {f"{member} {GUESS_MARK}"}
