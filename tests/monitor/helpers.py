"""Shared traffic of the monitor tests: topics with known message counts, a stalled group
(offsets committed, lag, no consumer online) and a live consumer at a throttled rate.

Loopback only, ephemeral ports; every wait has a deadline.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import trio

from client import Admin, Message, Producer, PullConsumer
from protocol.bodies import MessageQueue

ROOT = Path(__file__).resolve().parents[2]
#: Topic -> (queues, messages sent).
TOPICS = {"MonOrders": (4, 100), "MonAudit": (1, 30), "MonStream": (4, 6000)}
STALLED_GROUP, STALLED_TOPIC, STALLED_OFFSET = "cg_mon_stalled", "MonAudit", 10
LIVE_GROUP, LIVE_TOPIC = "cg_mon_live", "MonStream"
#: Messages per second the live consumer aims at.
LIVE_RATE = 200


def monitor_command(*args: str) -> list[str]:
    """`boltmq monitor ARGS` as a subprocess command line."""
    return [sys.executable, "-m", "boltmq.cli", "monitor", *args]


def monitor_env() -> dict[str, str]:
    """The environment for the monitor subprocess (the checkout importable)."""
    return {**os.environ, "PYTHONPATH": str(ROOT)}


async def wait_for_route(admin: Admin, topic: str) -> None:
    """Wait until a registry routes ``topic``."""
    with trio.fail_after(30):
        while await admin.instance.fetch_route(topic) is None:
            await trio.sleep(0.1)


async def make_traffic(namesrv: str, broker_address: str) -> None:
    """Create the topics, send their messages, and leave the stalled group's offset."""
    async with Admin(namesrv_addr=namesrv) as admin:
        for topic, (queues, _) in TOPICS.items():
            await admin.create_topic(topic, broker_addr=broker_address, queue_nums=queues)
        for topic in TOPICS:
            await wait_for_route(admin, topic)
    async with Producer("pg_mon", namesrv_addr=namesrv) as producer:
        for topic, (_, count) in TOPICS.items():
            for start in range(0, count, 100):
                batch = [
                    Message(topic, f"{topic}-{n}".encode())
                    for n in range(start, min(start + 100, count))
                ]
                await producer.send_batch(batch)
    async with PullConsumer(STALLED_GROUP, namesrv_addr=namesrv, auto_commit=False) as stalled:
        route = await stalled.instance.update_route(STALLED_TOPIC)
        assert route is not None
        broker_name = route.broker_datas[0].broker_name
        queue = MessageQueue(topic=STALLED_TOPIC, broker_name=broker_name, queue_id=0)
        await stalled.assign([queue])
        await stalled.commit({queue: STALLED_OFFSET})


async def consume_live(
    namesrv: str, stop: trio.Event, *, task_status: trio.TaskStatus[None]
) -> None:
    """Consume LIVE_TOPIC as LIVE_GROUP at about LIVE_RATE msgs/s, committing every poll,
    until ``stop`` is set (then it leaves the group cleanly)."""
    async with PullConsumer(LIVE_GROUP, namesrv_addr=namesrv, pull_batch_size=8) as consumer:
        await consumer.subscribe(LIVE_TOPIC)
        for queue in consumer.assignment():
            await consumer.seek_to_begin(queue)
        task_status.started()
        while not stop.is_set():
            got = await consumer.poll(timeout=1.0)
            await consumer.commit()
            await trio.sleep(len(got) / LIVE_RATE)
