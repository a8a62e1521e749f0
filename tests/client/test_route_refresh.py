"""The client re-reads a topic's route as soon as a send or a pull fails against a master that
is gone, so it follows a newly registered master of the same broker name within about a second,
not at the next 30 s route poll.

Real parts in this process: one registry and two brokers named ``broker-a`` on loopback, with
ephemeral ports and in-memory stores. Broker X is the master; it stops, and broker Y, a second
broker of the same name configured as broker id 0, starts and registers: the registry's route
then names Y as the master, as it does after a controller elects a new master. The clients poll
the registry every 600 s, so only the refresh after a failure can find Y. A deadline on every
wait.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from actors.broker.broker import Broker, open_broker
from actors.broker.config import BrokerConfig
from actors.registry import Registry, RegistryConfig
from client import (
    Admin,
    ClientInstance,
    ConsumeConcurrentlyStatus,
    Message,
    MQClientError,
    Producer,
    PushConsumer,
)
from client.instance import MASTER_ID
from protocol.bodies import ConsumeFromWhere, MessageQueue
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    decode_header,
    encode_header,
)
from protocol.message import MessageExt
from tests.actors.broker.helpers import send_request

TOPIC = "RouteRefreshTopic"
LONG_POLL = 600.0  # seconds: the regular route poll never runs during a test


@asynccontextmanager
async def registry_at(root: Path) -> AsyncIterator[Registry]:
    """A registry on an ephemeral loopback port."""
    registry = Registry(
        RegistryConfig(
            listen_port=0,
            bind_address="127.0.0.1",
            kv_config_path=str(root / "kvConfig.json"),
        )
    )
    await registry.load()
    async with trio.open_nursery() as nursery:
        await nursery.start(registry.run)
        yield registry
        nursery.cancel_scope.cancel()


def broker_a(registry: Registry, root: Path) -> BrokerConfig:
    """A ``broker-a`` master (broker id 0) on the memory store."""
    return BrokerConfig(
        listen_port=0, bind_address="127.0.0.1", fast_port_enable=False,
        store_type="memory", store_path_root_dir=str(root), namesrv_addr=registry.address,
        broker_name="broker-a", commit_log_idle_prefault_mb=0,
    )  # fmt: skip


async def master_in_route(instance: ClientInstance) -> str | None:
    """The address the registry names as ``broker-a``'s master for TOPIC now."""
    route = await instance.fetch_route(TOPIC)
    if route is None:
        return None
    for broker in route.broker_datas:
        if broker.broker_name == "broker-a":
            return broker.broker_addrs.get(MASTER_ID)
    return None


async def wait_master(instance: ClientInstance, address: str) -> float:
    """Wait until the route names ``address`` as the master; the time it was seen."""
    with trio.fail_after(20):
        while await master_in_route(instance) != address:
            await trio.sleep(0.02)
    return trio.current_time()


async def create_topic(instance: ClientInstance, broker: str) -> None:
    """TOPIC with 2 queues on the broker at ``broker`` (as a slave holds its master's topics)."""
    admin = Admin(instance=instance)
    await admin.create_topic(TOPIC, broker_addr=broker, queue_nums=2)


async def test_a_producer_sending_in_a_loop_resumes_on_the_new_master_at_once(
    tmp_path: Path,
) -> None:
    async with (
        registry_at(tmp_path / "registry") as registry,
        ClientInstance(registry.address, poll_name_server_interval=LONG_POLL) as watcher,
    ):
        sent_to: list[tuple[float, str]] = []  # (time, broker address) of each acknowledged send
        errors: list[str] = []
        instance = ClientInstance(registry.address, poll_name_server_interval=LONG_POLL)
        async with instance, Producer("RouteRefreshPG", instance=instance) as producer:

            async def send_loop() -> None:
                while True:
                    try:
                        result = await producer.send(Message(TOPIC, b"tick"))
                    except MQClientError as exc:
                        errors.append(str(exc))
                    else:
                        address = instance.master_address(result.queue.broker_name)
                        sent_to.append((trio.current_time(), address or "?"))
                    await trio.sleep(0.02)  # the loop's pace: about 50 sends a second

            async with trio.open_nursery() as nursery:
                async with open_broker(broker_a(registry, tmp_path / "x")) as x:
                    await create_topic(watcher, x.address)
                    await wait_master(watcher, x.address)
                    nursery.start_soon(send_loop)
                    with trio.fail_after(10):
                        while not any(a == x.address for _, a in sent_to):
                            await trio.sleep(0.02)
                # X is gone: sends fail until Y registers as broker-a's master.
                refreshes_before = instance.statistics().route_refreshes_after_failure
                gone_at = trio.current_time()
                async with open_broker(broker_a(registry, tmp_path / "y")) as y:
                    await create_topic(watcher, y.address)
                    registered_at = await wait_master(watcher, y.address)
                    with trio.fail_after(10):
                        while not any(a == y.address for _, a in sent_to):
                            await trio.sleep(0.01)
                    resumed_at = next(t for t, a in sent_to if a == y.address)
                    stats = instance.statistics()
                    nursery.cancel_scope.cancel()
    resumed_after = resumed_at - registered_at
    print(f"sends resumed on the new master {resumed_after:.3f} s after it registered")
    # The producer's poll interval is 600 s: only the refresh after a failure found Y.
    assert resumed_after < 1.5, resumed_after
    assert errors, "the sends between X's stop and Y's registration should have failed"
    # Rate-limited: at most one lookup per 0.3 s while the group had no master (plus slack
    # for the boundary), not one per failed attempt.
    refreshes = stats.route_refreshes_after_failure - refreshes_before
    window = resumed_at - gone_at
    assert 1 <= refreshes <= window / instance.route_refresh_min_interval + 3, (refreshes, window)


async def test_concurrent_failures_share_one_route_lookup(tmp_path: Path) -> None:
    async with (
        registry_at(tmp_path / "registry") as registry,
        open_broker(broker_a(registry, tmp_path / "x")) as x,
        ClientInstance(registry.address, poll_name_server_interval=LONG_POLL) as c,
    ):
        await create_topic(c, x.address)
        await wait_master(c, x.address)
        before = c.statistics()
        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(c.refresh_route_soon, TOPIC)
        after = c.statistics()
        assert after.route_refreshes_after_failure - before.route_refreshes_after_failure == 1
        assert after.route_fetches - before.route_fetches == 1
        # Once the interval is over, the next failure looks again.
        await trio.sleep(c.route_refresh_min_interval)
        route = await c.refresh_route_soon(TOPIC)
        assert route is not None
        assert c.statistics().route_fetches - after.route_fetches == 1


async def run_broker(
    config: BrokerConfig, *, task_status: trio.TaskStatus[tuple[Broker, trio.CancelScope]]
) -> None:
    """Serve a broker until its cancel scope (handed back with it) is cancelled."""
    async with open_broker(config) as broker:
        with trio.CancelScope() as scope:
            task_status.started((broker, scope))
            await trio.sleep_forever()


async def test_a_push_consumer_follows_the_new_master_and_commits_its_offsets_there(
    tmp_path: Path,
) -> None:
    got: list[bytes] = []

    def listener(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        got.extend(m.body for m in messages)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    async with (
        registry_at(tmp_path / "registry") as registry,
        ClientInstance(registry.address, poll_name_server_interval=LONG_POLL) as watcher,
    ):
        producer = Producer("RouteRefreshPG2", instance=watcher)
        instance = ClientInstance(registry.address, poll_name_server_interval=LONG_POLL)
        consumer = PushConsumer(
                "RouteRefreshCG", listener, instance=instance,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                persist_consumer_offset_interval=0.5,
            )  # fmt: skip
        consumer.subscribe(TOPIC, "*")
        async with instance, producer, trio.open_nursery() as nursery:
            x, x_scope = await nursery.start(run_broker, broker_a(registry, tmp_path / "x"))
            await create_topic(watcher, x.address)
            await wait_master(watcher, x.address)
            await producer.send(Message(TOPIC, b"on-x"), queue=queue(1))
            async with consumer:
                with trio.fail_after(20):
                    while await stored_offset(watcher, x.address, 1) != 1:
                        await trio.sleep(0.05)
                assert got == [b"on-x"]
                x_scope.cancel()  # X leaves; its pulls fail
                with trio.fail_after(20):
                    while await master_in_route(watcher) is not None:
                        await trio.sleep(0.02)
                y, _ = await nursery.start(run_broker, broker_a(registry, tmp_path / "y"))
                # Y holds queue 1's message as a replica would (its offset 0); then it
                # registers the topic and the route names it.
                request = send_request(TOPIC, b"copy-of-on-x", queue_id=1)
                assert (await watcher.invoke_broker(y.address, request)).code == 0
                await create_topic(watcher, y.address)
                moved_at = await wait_master(watcher, y.address)
                await watcher.refresh_route_soon(TOPIC)
                await producer.send(Message(TOPIC, b"on-y"), queue=queue(0))
                with trio.fail_after(15):
                    while b"on-y" not in got:
                        await trio.sleep(0.02)
                consumed_after = trio.current_time() - moved_at
                # Both queues' offsets are committed at Y: queue 0's moved, queue 1's did
                # not (nothing new there) but its master did.
                with trio.fail_after(15):
                    while (await stored_offset(watcher, y.address, 0),
                               await stored_offset(watcher, y.address, 1)) != (1, 1):  # fmt: skip
                        await trio.sleep(0.1)
            nursery.cancel_scope.cancel()
    print(f"the push consumer read from the new master {consumed_after:.3f} s after it registered")
    assert got == [b"on-x", b"on-y"]
    assert consumed_after < 3.0, consumed_after


def queue(queue_id: int) -> MessageQueue:
    """One of TOPIC's queues on broker-a."""
    return MessageQueue(topic=TOPIC, broker_name="broker-a", queue_id=queue_id)


async def stored_offset(instance: ClientInstance, broker: str, queue_id: int) -> int | None:
    """RouteRefreshCG's committed offset of TOPIC's queue at the broker at ``broker``."""
    header = QueryConsumerOffsetRequestHeader(
        consumer_group="RouteRefreshCG", topic=TOPIC, queue_id=queue_id
    )
    request = RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, encode_header(header))
    response = await instance.invoke_broker(broker, request)
    if response.code != ResponseCode.SUCCESS:
        return None
    return decode_header(QueryConsumerOffsetResponseHeader, response.ext_fields).offset
