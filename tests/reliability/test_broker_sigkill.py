"""A broker process SIGKILLed under send load, then started again on the same store.

SYNC_FLUSH: every message answered SEND_OK is there after the restart, at the queue and
offset it was answered with; no message is stored twice; every queue's offsets are dense.
ASYNC_FLUSH: the store recovers without corruption and what is lost is only a tail, counted
and reported. A killed process leaves its written pages in the page cache, so a plain
SIGKILL loses nothing even under ASYNC_FLUSH; the power-cut case (the unflushed pages gone
too) is made by cutting the commit log after the kill, at a point inside the last records.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import trio

import boltmq
from boltmq import Message, Producer, SendStatus
from protocol import RemotingClient
from protocol.message import MessageExt
from tests.reliability.nodes import Node, broker_node, read_queue, registry_node
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(150)
log = logging.getLogger("tests.reliability")

TOPIC = "KillTopic"
QUEUES = 4
SENDERS = 16
ACKED_BEFORE_KILL = 1500


class Acks:
    """What the producers were told: key -> (queue id, queue offset, commit-log offset)."""

    def __init__(self) -> None:
        self.acked: dict[str, tuple[int, int, int]] = {}
        self.failed = 0


async def send_load(namesrv: str, acks: Acks, stop: trio.Event) -> None:
    """SENDERS producers' worth of sends until ``stop``; failures are counted, not retried."""
    async with Producer(
        "KillProducer", namesrv_addr=namesrv, retry_times_when_send_failed=0,
        send_msg_timeout=5.0,
    ) as producer:  # fmt: skip

        async def sender(number: int) -> None:
            sequence = 0
            while not stop.is_set():
                key = f"s{number}-{sequence}"
                sequence += 1
                try:
                    result = await producer.send(Message(TOPIC, key.encode() * 20, keys=key))
                except Exception:  # the broker died under the send: not acknowledged
                    acks.failed += 1
                    await trio.sleep(0.01)
                    continue
                if result.status is SendStatus.SEND_OK:
                    physical = int(result.offset_msg_id[-16:], 16)
                    acks.acked[key] = (result.queue.queue_id, result.queue_offset, physical)

        async with trio.open_nursery() as nursery:
            for number in range(SENDERS):
                nursery.start_soon(sender, number)


async def start_cluster(tmp_path: Path, flush: str) -> tuple[Node, Node]:
    registry = registry_node(tmp_path)
    await registry.start()
    broker = broker_node(tmp_path, "broker-a-0", registry.address, flushDiskType=flush)
    await broker.start()
    async with boltmq.Admin(namesrv_addr=registry.address) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker.address, queue_nums=QUEUES)

        async def routed() -> bool:
            try:
                await admin.route(TOPIC)
            except Exception:
                return False
            return True

        await wait_until(routed, 30, "route of the topic")
    return registry, broker


async def kill_under_load(registry: Node, broker: Node) -> Acks:
    """Send until ACKED_BEFORE_KILL acks, SIGKILL the broker with sends in flight."""
    acks = Acks()
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_load, registry.address, acks, stop)
        await wait_until(lambda: len(acks.acked) >= ACKED_BEFORE_KILL, 90, "acks before kill")
        await broker.kill()
        stop.set()
    return acks


async def read_back(broker: Node) -> dict[int, list[MessageExt]]:
    async with RemotingClient() as client:
        return {q: await read_queue(client, broker.address, TOPIC, q) for q in range(QUEUES)}


def check_store(stored: dict[int, list[MessageExt]]) -> dict[str, MessageExt]:
    """Dense offsets per queue, no key stored twice; the stored messages by key."""
    by_key: dict[str, MessageExt] = {}
    for queue_id, messages in stored.items():
        assert [m.queue_offset for m in messages] == list(range(len(messages))), queue_id
        for message in messages:
            key = message.properties["KEYS"]
            assert key not in by_key, f"{key} stored twice"
            assert message.body == key.encode() * 20
            by_key[key] = message
    return by_key


async def test_sync_flush_loses_no_acknowledged_message(
    tmp_path: Path, record_property: Any
) -> None:
    registry, broker = await start_cluster(tmp_path, "SYNC_FLUSH")
    try:
        acks = await kill_under_load(registry, broker)
        assert (broker.store / "abort").exists()
        await broker.start()
        by_key = check_store(await read_back(broker))
        missing = [key for key in acks.acked if key not in by_key]
        assert not missing, f"{len(missing)} acknowledged messages lost: {missing[:5]}"
        for key, (queue_id, queue_offset, physical) in acks.acked.items():
            message = by_key[key]
            assert (message.queue_id, message.queue_offset) == (queue_id, queue_offset), key
            assert message.commit_log_offset == physical, key
        # Sends in flight at the kill may be stored without their answer: at most those.
        unacked = len(by_key) - len(acks.acked)
        assert 0 <= unacked <= SENDERS
        record_property("acked", len(acks.acked))
        record_property("stored_unacked", unacked)
        assert "recover" in broker.log_text().lower()
    finally:
        await broker.stop()
        await registry.stop()


@pytest.mark.parametrize("power_cut", [False, True], ids=["sigkill", "sigkill+power-cut"])
async def test_async_flush_loses_only_the_unflushed_tail(
    tmp_path: Path, record_property: Any, power_cut: bool
) -> None:
    registry, broker = await start_cluster(tmp_path, "ASYNC_FLUSH")
    try:
        acks = await kill_under_load(registry, broker)
        cut = None
        if power_cut:
            # The newest acknowledged records never reached the disk: zero the commit log
            # from the middle of the 100th-newest record on, as a lost page cache would.
            newest = sorted(physical for _, _, physical in acks.acked.values())
            cut = newest[-100] + 50
            zero_commit_log_from(broker.store / "commitlog", cut)
        await broker.start()
        by_key = check_store(await read_back(broker))
        lost = sorted(
            (physical, key) for key, (_, _, physical) in acks.acked.items() if key not in by_key
        )
        kept = [physical for key, (_, _, physical) in acks.acked.items() if key in by_key]
        # Only a tail is lost: every lost record lies after every kept one.
        assert not lost or lost[0][0] > max(kept)
        for key, (queue_id, queue_offset, _) in acks.acked.items():
            if key in by_key:
                assert (by_key[key].queue_id, by_key[key].queue_offset) == (queue_id, queue_offset)
        if cut is None:
            assert not lost  # the page cache outlived the process
        else:
            assert 100 <= len(lost) <= 100 + SENDERS
            assert all(physical >= cut - 50 for physical, _ in lost)
            assert "torn tail" in broker.log_text()
        print(f"ASYNC_FLUSH {'power cut' if power_cut else 'SIGKILL'}: {len(lost)} of "
              f"{len(acks.acked)} acknowledged messages lost (the unflushed tail)")  # fmt: skip
        record_property("acked", len(acks.acked))
        record_property("lost", len(lost))
    finally:
        await broker.stop()
        await registry.stop()


def zero_commit_log_from(directory: Path, offset: int) -> None:
    """Zero every commit-log byte from ``offset`` on (files named by their start offset;
    the spare next file holds nothing of the log)."""
    for path in sorted(directory.iterdir()):
        if not path.name.isdigit():
            continue
        start = int(path.name)
        size = path.stat().st_size
        if start + size <= offset:
            continue
        begin = max(0, offset - start)
        with path.open("r+b") as f:
            f.seek(begin)
            f.write(bytes(size - begin))
