"""Operator changes survive a SIGKILL that comes right after their answer.

The broker answers UPDATE_AND_CREATE_TOPIC, DELETE_TOPIC_IN_BROKER,
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP and INVOKE_BROKER_TO_RESET_OFFSET only once the table's
file holds the change (as RocketMQ persists before answering), so a broker killed the moment
the answer arrives has the change when it starts again. Without that, the tables' batching
(0.2 s for topics and groups, ``flushConsumerOffsetInterval`` for offsets) loses it.

UPDATE_BROKER_CONFIG's changes are written into the broker.conf the broker was started with
(``-c``), before they apply, and hold after a restart; the file's other lines stay.

Real registry and broker processes, loopback only, free ports, a deadline on every wait.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import boltmq
from client.message import MQClientError
from tests.reliability.nodes import Node, broker_node, registry_node
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(240)

KEPT, DELETED, GROUP = "DurableTopic", "DeletedTopic", "DurableGroup"


async def restart(broker: Node) -> None:
    """SIGKILL at once, then start on the same store."""
    await broker.kill()
    await broker.start()


async def wait_routed(namesrv: str, topic: str) -> None:
    async with boltmq.Admin(namesrv_addr=namesrv) as admin:

        async def routed() -> bool:
            try:
                await admin.route(topic)
            except Exception:
                return False
            return True

        await wait_until(routed, 60, f"route of {topic}")


async def test_admin_changes_survive_a_kill_right_after_the_answer(tmp_path: Path) -> None:
    registry = registry_node(tmp_path)
    await registry.start()
    # Offsets batched every 30 s: only the write before the answer can save the reset.
    broker = broker_node(
        tmp_path, "broker-a-0", registry.address, flushConsumerOffsetInterval=30_000
    )
    await broker.start()
    namesrv = registry.address
    try:
        async with boltmq.Admin(namesrv_addr=namesrv) as admin:
            await admin.create_topic(KEPT, broker_addr=broker.address, queue_nums=3)
            await admin.create_topic(DELETED, broker_addr=broker.address, queue_nums=2)
            await admin.create_group(GROUP, broker_addr=broker.address)
        await restart(broker)
        async with boltmq.Admin(namesrv_addr=namesrv) as admin:
            topics = (await admin.all_topic_config(broker.address)).topic_config_table
            assert topics[KEPT].write_queue_nums == topics[KEPT].read_queue_nums == 3
            assert DELETED in topics
            groups = (await admin.all_group_config(broker.address)).subscription_group_table
            assert GROUP in groups

        await wait_routed(namesrv, KEPT)
        async with boltmq.Admin(namesrv_addr=namesrv) as admin:
            reset = await admin.reset_offset(GROUP, KEPT, 0)
            assert len(reset) == 3
            await admin.delete_topic(DELETED)
        await restart(broker)
        async with boltmq.Admin(namesrv_addr=namesrv) as admin:
            offsets = (await admin.all_consumer_offset(broker.address)).offset_table
            assert offsets.get(f"{KEPT}@{GROUP}") == {0: 0, 1: 0, 2: 0}, offsets
            topics = (await admin.all_topic_config(broker.address)).topic_config_table
            assert KEPT in topics and DELETED not in topics
    finally:
        await broker.stop()
        await registry.stop()


async def test_broker_config_changes_are_written_to_its_config_file(tmp_path: Path) -> None:
    registry = registry_node(tmp_path)
    await registry.start()
    broker = broker_node(tmp_path, "broker-a-0", registry.address, brokerPermission=6)
    await broker.start()
    try:
        lines_before = broker.conf.read_text().splitlines()
        async with boltmq.Admin(namesrv_addr=registry.address) as admin:
            await admin.update_broker_config(
                broker.address, {"brokerPermission": "4", "longPollingEnable": "false"}
            )
            with pytest.raises(MQClientError):  # refused: nothing written
                await admin.update_broker_config(broker.address, {"listenPort": "1"})
        # The set key changed in its place, the new one was appended, the rest stayed.
        assert broker.conf.read_text().splitlines() == [
            "brokerPermission=4" if line.startswith("brokerPermission=") else line
            for line in lines_before
        ] + ["longPollingEnable=false"]
        assert (broker.directory / "broker.conf.bak").read_text().splitlines() == lines_before
        await broker.kill()
        await broker.start(keep_conf=True)
        async with boltmq.Admin(namesrv_addr=registry.address) as admin:
            config = await admin.broker_config(broker.address)
        assert (config["brokerPermission"], config["longPollingEnable"]) == ("4", "false")
        assert config["listenPort"] == str(broker.port)
    finally:
        await broker.stop()
        await registry.stop()
