"""BoltMQ's client across a real controller-mode election: the master of a 2-broker group dies,
the controller elects the other, which registers as broker id 0; a producer sending in a loop
and a push consumer resume on it within about a second of that registration, not at the
600 s route poll the test sets.

Real parts in this process: a registry, one controller and two controller-mode brokers
(SYNC, allAckInSyncStateSet) on loopback ephemeral ports, stores in tmp_path; short
controller timings (200 ms heartbeats, 2 s timeout, 300 ms scans). A deadline on every wait.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from actors.broker.broker import Broker
from actors.broker.config import BrokerConfig
from actors.broker.ha.controller_mode import ControllerRole
from actors.controller.config import ControllerConfig
from actors.controller.service import open_controller
from client import (
    ClientInstance,
    ConsumeConcurrentlyStatus,
    Message,
    MQClientError,
    Producer,
    PushConsumer,
)
from client.instance import MASTER_ID
from protocol.bodies import ConsumeFromWhere
from protocol.message import MessageExt
from storage import BrokerRole
from tests.actors.broker.ha.helpers import SMALL_FILES, running_registry
from tests.support.waiting import wait_until

TOPIC = "ElectionTopic"
LONG_POLL = 600.0


def broker_config(root: Path, registry: str, controller: str) -> BrokerConfig:
    """A controller-mode broker of broker-a: SYNC, every in-sync member acknowledging."""
    settings: dict[str, Any] = {
        "listen_port": 0, "bind_address": "127.0.0.1", "fast_port_enable": False,
        "namesrv_addr": registry, "store_path_root_dir": str(root),
        "broker_role": BrokerRole.SYNC_MASTER, "all_ack_in_sync_state_set": True,
        "enable_controller_mode": True, "controller_addr": controller,
        "broker_heartbeat_interval": 200, "controller_heart_beat_timeout_mills": 2000,
        "sync_broker_metadata_period": 500, "check_sync_state_set_period": 500,
        **SMALL_FILES,
    }  # fmt: skip
    return BrokerConfig(**settings)


async def run_broker(
    config: BrokerConfig, *, task_status: trio.TaskStatus[tuple[Broker, trio.CancelScope]]
) -> None:
    """Serve a broker until its scope is cancelled (a crash: no clean stop)."""
    with trio.CancelScope() as scope:
        broker = Broker(config)
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)
            task_status.started((broker, scope))
            await trio.sleep_forever()


def role(broker: Broker) -> ControllerRole | None:
    return None if broker.controller is None else broker.controller.role


async def route_master(instance: ClientInstance) -> str | None:
    """The address the registry names as broker-a's id 0 for TOPIC."""
    route = await instance.fetch_route(TOPIC)
    for broker in route.broker_datas if route is not None else []:
        if broker.broker_name == "broker-a":
            return broker.broker_addrs.get(MASTER_ID)
    return None


async def test_producer_and_push_consumer_follow_an_election_within_a_second(
    tmp_path: Path,
) -> None:
    acked: list[tuple[float, str, bytes]] = []  # (time, master address, body)
    consumed: list[bytes] = []

    def listener(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        consumed.extend(m.body for m in messages)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    config = ControllerConfig(
        listen_port=0, scan_not_active_broker_interval=300, controller_store_path=""
    )
    async with (
        running_registry() as registry,
        open_controller(config) as controller,
        ClientInstance(registry.address, poll_name_server_interval=LONG_POLL) as watcher,
        trio.open_nursery() as nursery,
    ):
        with trio.fail_after(90):
            first, first_scope = await nursery.start(
                run_broker, broker_config(tmp_path / "a", registry.address, controller.address)
            )
            await wait_until(lambda: role(first) is ControllerRole.MASTER, 30, "a master")
            second, _ = await nursery.start(
                run_broker, broker_config(tmp_path / "b", registry.address, controller.address)
            )
            await wait_until(lambda: role(second) is ControllerRole.SLAVE, 30, "a slave")
            link = first.controller
            assert link is not None
            await wait_until(lambda: link.sync_state_set == {1, 2}, 30, "the slave in sync")

            instance = ClientInstance(registry.address, poll_name_server_interval=LONG_POLL)
            consumer = PushConsumer(
                "ElectionCG", listener, instance=instance,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                persist_consumer_offset_interval=0.5,
            )  # fmt: skip
            consumer.subscribe(TOPIC, "*")
            async with instance, Producer("ElectionPG", instance=instance) as producer:
                count = 0

                async def send_loop() -> None:
                    nonlocal count
                    while True:
                        body = b"m%d" % count
                        try:
                            result = await producer.send(Message(TOPIC, body))
                        except MQClientError:
                            pass  # the group has no master for a moment: try the next one
                        else:
                            address = instance.master_address(result.queue.broker_name) or "?"
                            acked.append((trio.current_time(), address, body))
                            count += 1
                        await trio.sleep(0.02)

                async with trio.open_nursery() as clients:
                    clients.start_soon(send_loop)
                    await wait_until(lambda: len(acked) >= 10, 30, "sends to the first master")
                    async with consumer:
                        await wait_until(lambda: len(consumed) >= 10, 30, "consumed")
                        first_scope.cancel()  # the master dies: its heartbeats stop
                        with trio.fail_after(30):
                            while await route_master(watcher) != second.address:
                                await trio.sleep(0.02)
                        registered_at = trio.current_time()
                        with trio.fail_after(15):
                            while not any(a == second.address for _, a, _ in acked):
                                await trio.sleep(0.01)
                        resumed_at = next(t for t, a, _ in acked if a == second.address)
                        after = [b for _, a, b in acked if a == second.address]
                        # The push consumer reads what the new master acknowledged.
                        await wait_until(lambda: set(after) <= set(consumed), 30, "consumed")
                    clients.cancel_scope.cancel()
        nursery.cancel_scope.cancel()
    resumed_after = resumed_at - registered_at
    print(f"sends resumed on the new master {resumed_after:.3f} s after it registered as id 0")
    assert resumed_after < 1.5, resumed_after
