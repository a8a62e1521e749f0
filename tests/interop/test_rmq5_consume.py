"""The official RocketMQ 5 Python client (rocketmq-python-client 5.1.2) consuming through
`boltmq proxy`: SimpleConsumer receives and acks every message exactly once (sent by the
official producer, or by BoltMQ's own 4.x producer), an abandoned message comes back with
delivery attempt 2 and lands in the DLQ once its attempts run out, and a PushConsumer's
listener gets every message.

A real cluster process and the proxy on loopback (ephemeral ports); the official client runs
as a program of its own venv (tests/interop/rmq5_client.py, scripts tests/interop/rmq5/
consume_*.py). The proxy's consume limits are lowered (receives from 1 s invisible, long
polls from 1 s) so a redelivery takes a second, not RocketMQ's ten. Each test runs its
asyncio part with ``asyncio.run`` (grpc.aio needs asyncio) under a deadline.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from client import Admin, ClientInstance, Message, MQClientError, PoppedMessage, Producer
from protocol.bodies import SubscriptionGroupConfig
from protocol.codes import ResponseCode
from proxy import ProxyServer
from proxy.consume import ConsumeSettings
from tests.client.helpers import BoltProcess
from tests.proxy.helpers import create_topic, proxy_cluster, running_proxy

from .rmq5_client import rmq5_python, run_rmq5

__all__ = ["proxy_cluster", "rmq5_python"]

pytestmark = [pytest.mark.timeout(180)]


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def _with_proxy(
    cluster: BoltProcess, topic: str, queues: int, body: Callable[[ProxyServer], Awaitable[None]]
) -> None:
    async def main() -> None:
        with anyio.fail_after(150):
            await create_topic(cluster.registry, topic, queues)
            async with running_proxy(cluster.registry) as proxy:
                assert proxy.service is not None
                proxy.service.consume.settings = ConsumeSettings(
                    min_invisible_ms_for_receive=1000, min_long_polling_ms=1000
                )
                await body(proxy)

    asyncio.run(main())


async def _send(cluster: BoltProcess, topic: str, bodies: list[str]) -> None:
    """Send with BoltMQ's own 4.x producer, straight to the broker."""
    async with Producer(_unique("PG"), namesrv_addr=cluster.registry) as producer:
        for body in bodies:
            await producer.send(Message(topic, body.encode()))


def test_simple_consumer_receives_and_acks_200_exactly_once(
    proxy_cluster: BoltProcess, rmq5_python: Path, tmp_path: Path
) -> None:
    topic, group = _unique("Rmq5Consume"), _unique("CG_rmq5")

    async def body(proxy: ProxyServer) -> None:
        endpoint = f"127.0.0.1:{proxy.port}"
        sent = await run_rmq5(rmq5_python, tmp_path, "producer.py", endpoint, "normal", topic,
                              "200")  # fmt: skip
        lines = await run_rmq5(rmq5_python, tmp_path, "consume_simple.py", endpoint, "ack",
                               topic, group, "200")  # fmt: skip
        received = [line["received"] for line in lines if "received" in line]
        assert sorted(received) == sorted(line["sent"] for line in sent)  # each exactly once
        assert all(line["attempt"] == 1 for line in lines if "received" in line)
        (after,) = [line["after"] for line in lines if "after" in line]
        assert after == 0  # acked is gone

    _with_proxy(proxy_cluster, topic, 4, body)


def test_simple_consumer_receives_what_a_4x_producer_sent(
    proxy_cluster: BoltProcess, rmq5_python: Path, tmp_path: Path
) -> None:
    topic, group = _unique("Rmq5Mixed"), _unique("CG_rmq5")

    async def body(proxy: ProxyServer) -> None:
        bodies = [f"from-4x-{i}" for i in range(10)]
        await _send(proxy_cluster, topic, bodies)
        lines = await run_rmq5(rmq5_python, tmp_path, "consume_simple.py",
                               f"127.0.0.1:{proxy.port}", "ack", topic, group, "10")  # fmt: skip
        assert sorted(line["body"] for line in lines if "received" in line) == sorted(bodies)

    _with_proxy(proxy_cluster, topic, 2, body)


def test_abandoned_message_comes_back_then_lands_in_the_dlq(
    proxy_cluster: BoltProcess, rmq5_python: Path, tmp_path: Path
) -> None:
    topic, group = _unique("Rmq5Dlq"), _unique("CG_rmq5")

    async def body(proxy: ProxyServer) -> None:
        async with Admin(namesrv_addr=proxy_cluster.registry) as admin:
            # Two deliveries in all: retryMaxTimes 1.
            await admin.create_group(SubscriptionGroupConfig(group_name=group, retry_max_times=1),
                                     broker_addr=proxy_cluster.broker)  # fmt: skip
        await _send(proxy_cluster, topic, ["poison"])
        lines = await run_rmq5(rmq5_python, tmp_path, "consume_simple.py",
                               f"127.0.0.1:{proxy.port}", "abandon", topic, group, "2")  # fmt: skip
        attempts = [(line["body"], line["attempt"]) for line in lines if "received" in line]
        assert attempts == [("poison", 1), ("poison", 2)]
        # Its second invisible time ends: the broker moves it to the group's DLQ.
        dlq = f"%DLQ%{group}"
        async with ClientInstance(proxy_cluster.registry) as instance:
            pop = instance.pop_client()
            reader = _unique("CG_dlq")
            dead: list[PoppedMessage] = []
            with anyio.fail_after(20):
                while not dead:
                    try:
                        result = await pop.pop(proxy_cluster.broker, reader, dlq, poll_ms=1000)
                        dead = result.messages
                    except MQClientError as exc:  # the DLQ is made with its first message
                        assert exc.code == ResponseCode.TOPIC_NOT_EXIST, exc
                        await anyio.sleep(0.2)
        assert [d.message.body for d in dead] == [b"poison"]

    _with_proxy(proxy_cluster, topic, 1, body)


def test_push_consumer_listener_gets_every_message(
    proxy_cluster: BoltProcess, rmq5_python: Path, tmp_path: Path
) -> None:
    topic, group = _unique("Rmq5Push"), _unique("CG_rmq5_push")

    async def body(proxy: ProxyServer) -> None:
        bodies = [f"push-{i}" for i in range(40)]
        await _send(proxy_cluster, topic, bodies)
        lines = await run_rmq5(rmq5_python, tmp_path, "consume_push.py",
                               f"127.0.0.1:{proxy.port}", topic, group, "40")  # fmt: skip
        assert sorted(line["body"] for line in lines if "received" in line) == sorted(bodies)

    _with_proxy(proxy_cluster, topic, 2, body)
