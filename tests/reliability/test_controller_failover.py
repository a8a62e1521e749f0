"""Automatic failover in controller mode: the master of a 3-broker group SIGKILLed under load.

A registry, controllers and three controller-mode brokers (SYNC_MASTER flavour, SYNC_FLUSH,
allAckInSyncStateSet) run as processes on loopback, with the heartbeat keys short (1 s beats,
a 5 s timeout, a 1 s scan). Two producers of BoltMQ's client send without retries of their own
and record every acknowledged send. The master is killed: the controller elects another within
10 s, sends resume once the client has refreshed its route, the old master comes back as a
slave, and every acknowledged message is on the new master at the offset it was acknowledged
with, exactly once, and reaches a push consumer group. The same holds when the controller
leader of a 3-controller group dies with the master.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from boltmq import ConsumeConcurrentlyStatus, ConsumeFromWhere, Producer, PushConsumer
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.headers import GetMetaDataResponseHeader, decode_header
from protocol.message import MessageExt
from tests.reliability.failover import (
    ControllerGroup,
    SendLog,
    check_acked_exactly_once,
    produce_steadily,
    send_to,
    start_group,
)
from tests.reliability.nodes import Node, call, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "ControllerFailoverTopic"
QUEUES = 2
#: The issue's bound with 1 s heartbeats and a 5 s heartbeat timeout.
ELECTION_BOUND = 10.0
SAFE = {"allAckInSyncStateSet": "true"}


def producer(group: ControllerGroup, name: str) -> Producer:
    """A producer that never repeats a send itself (so each body is sent once)."""
    return Producer(
        name, namesrv_addr=group.registry.address, send_msg_timeout=3.0,
        retry_times_when_send_failed=0,
    )  # fmt: skip


async def kill_master_under_load(
    group: ControllerGroup, client: RemotingClient, *, also_kill: tuple[Node, ...] = ()
) -> tuple[Node, Node, SendLog]:
    """Load from two producers, SIGKILL the master (and ``also_kill``), wait for the new
    master and for sends to resume; the old and new master and the log, load stopped."""
    master, before = await group.wait_master(client)
    await group.wait_in_sync(client, len(group.brokers))
    await group.create_topic(client, TOPIC, master, QUEUES)
    log = SendLog()
    async with (
        producer(group, "FailoverPG1") as one,
        producer(group, "FailoverPG2") as two,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(produce_steadily, one, TOPIC, "one", log)
        nursery.start_soon(produce_steadily, two, TOPIC, "two", log)
        await wait_until(lambda: len(log.acked) >= 60, 60, "60 sends acknowledged")

        killed_at = time.monotonic()
        await master.kill()
        for node in also_kill:
            await node.kill()
        new_master, after = await group.wait_master(
            client, not_address=master.address, above_epoch=before.master_epoch,
            timeout=3 * ELECTION_BOUND,
        )  # fmt: skip
        elected_in = time.monotonic() - killed_at
        await wait_until(
            lambda: log.first_ack_after(killed_at, master.address) is not None, 60,
            "a send acknowledged after the kill",
        )  # fmt: skip
        first_ack = log.first_ack_after(killed_at, master.address)
        assert first_ack is not None
        print(
            f"\nmaster {master.address} killed: new master {new_master.address} (epoch "
            f"{before.master_epoch} -> {after.master_epoch}) in {elected_in:.2f} s; first "
            f"acknowledged send after the kill in {first_ack - killed_at:.2f} s; "
            f"{len(log.failures)} sends failed meanwhile"
        )
        assert elected_in < ELECTION_BOUND, f"new master after {elected_in:.2f} s"
        assert after.sync_state_set >= {after.master_broker_id}
        resumed = len(log.acked)
        await wait_until(lambda: len(log.acked) >= resumed + 60, 60, "60 more sends")
        nursery.cancel_scope.cancel()
    return master, new_master, log


async def consume_all(group: ControllerGroup, log: SendLog, tmp_path: Path) -> None:
    """A push consumer group starting from the first offset gets every acknowledged body."""
    received: set[bytes] = set()

    def on_messages(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        received.update(m.body for m in messages)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        "FailoverCG", on_messages, namesrv_addr=group.registry.address,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, rebalance_interval=1.0,
        offset_store_dir=tmp_path / "offsets",
    )  # fmt: skip
    consumer.subscribe(TOPIC)
    wanted = {a.body for a in log.acked}
    async with consumer:
        await wait_until(lambda: received >= wanted, 60, "every acknowledged body consumed")


async def test_master_killed_under_load_a_slave_takes_over_without_loss(tmp_path: Path) -> None:
    group = await start_group(tmp_path, brokers=3, broker_settings=SAFE)
    try:
        async with RemotingClient() as client:
            old, new, log = await kill_master_under_load(group, client)
            # The old master returns as a slave of the new one and catches up.
            await old.start()
            info = await group.replica_info(client)
            assert info is not None and info.master_address == new.address
            await group.wait_same_log(client, old, new)
            # A slave now: it refuses sends, and the route's master is still the new one.
            refused = SendLog()
            code = await send_to(client, old.address, TOPIC, b"to-the-old-master", 0, refused)
            assert code != ResponseCode.SUCCESS and not refused.acked, code
            await group.wait_routed(client, TOPIC, new)
            check_acked_exactly_once(log.acked, await group.read_topic(client, new, TOPIC))
            await consume_all(group, log, tmp_path)
    finally:
        await group.stop()


async def controller_leader(client: RemotingClient, group: ControllerGroup) -> Node:
    """The controller that says it is the Raft leader (CONTROLLER_GET_METADATA_INFO)."""
    found: list[Node] = []

    async def leader() -> bool:
        for node in group.controllers:
            request = RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO)
            try:
                answer = await call(client, node.address, request)
            except Exception:
                continue
            if answer.code != ResponseCode.SUCCESS:
                continue
            if decode_header(GetMetaDataResponseHeader, answer.ext_fields).is_leader:
                found[:] = [node]
                return True
        return False

    await wait_until(leader, 60, "a controller leader")
    return found[0]


async def test_controller_leader_killed_with_the_master_a_master_is_still_elected(
    tmp_path: Path,
) -> None:
    group = await start_group(tmp_path, brokers=3, controllers=3, broker_settings=SAFE)
    try:
        async with RemotingClient() as client:
            leader = await controller_leader(client, group)
            old, new, log = await kill_master_under_load(group, client, also_kill=(leader,))
            assert await controller_leader(client, group) is not leader
            check_acked_exactly_once(log.acked, await group.read_topic(client, new, TOPIC))
            assert old.process is not None and old.process.poll() is not None
    finally:
        await group.stop()
