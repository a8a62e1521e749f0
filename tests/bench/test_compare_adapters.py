"""bench/compare.py's adapters, functionally: each peer is started by the tool's own code,
100 messages go through its adapter (68 single publishes and a batch of 32) and come back
with their bodies, and stopping it leaves none of its processes. Not timed.

Peers whose packages are missing are installed by the tool's installer first; a peer that
cannot be installed is skipped with the reason.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench.peers import client_for, install
from bench.peers.base import PAYLOAD, Server

pytestmark = pytest.mark.timeout(300)


def bodies() -> list[bytes]:
    """100 distinct 1 KiB bodies."""
    return [f"message {n:03d} ".encode().ljust(PAYLOAD, b".") for n in range(100)]


async def round_trip(server: Server) -> list[bytes]:
    """Publish the 100 bodies through the server's adapter and consume them back."""
    client = client_for(server.system, server.endpoint())
    await client.open()
    try:
        topic = f"AdapterTest_{server.system}"
        await client.create(topic)
        sent = bodies()
        await asyncio.gather(*(client.publish(topic, body) for body in sent[:68]))
        await client.publish_batch(topic, sent[68:])
        received: list[bytes] = []
        await asyncio.wait_for(client.consume(topic, 100, received.append), 120)
        return received
    finally:
        await client.close()


def check(server: Server) -> None:
    """Start, round-trip, stop; then the server's process group must be gone."""
    try:
        server.start()
        assert server.group.pids(), "the server has no live process after start"
        received = asyncio.run(round_trip(server))
    finally:
        server.stop()
    assert sorted(received) == sorted(bodies())
    assert server.pgid is not None
    assert server.group.pids() == [], "processes of the server outlived its stop"
    assert not server.scratch.exists()


def ready(system: str) -> None:
    problem = install.ensure(system)
    if problem:
        pytest.skip(f"{system}: {problem}")


def test_boltmq() -> None:
    from bench.peers.boltmq import BoltMQServer

    check(BoltMQServer("SYNC_FLUSH"))


def test_nats() -> None:
    ready("nats")
    from bench.peers.nats import NatsServer

    check(NatsServer())


def test_rabbitmq() -> None:
    ready("rabbitmq")
    from bench.peers.rabbitmq import RabbitMQServer

    check(RabbitMQServer())


def test_redis() -> None:
    ready("redis")
    from bench.peers.redis import RedisServer

    check(RedisServer("everysec"))


def test_rocketmq(rocketmq_home: Path) -> None:
    from bench.peers.rocketmq import RocketMQServer, missing_debian_packages

    problem = install.install_debian(missing_debian_packages(rocketmq_home))
    if problem:
        pytest.skip(f"rocketmq: {problem}")
    check(RocketMQServer(rocketmq_home, "ASYNC_FLUSH"))


def test_release_check_names_the_problem(tmp_path: Path) -> None:
    from bench.peers.rocketmq import ReleaseError, release_jars

    with pytest.raises(ReleaseError, match="not an unpacked RocketMQ binary release"):
        release_jars(tmp_path)
