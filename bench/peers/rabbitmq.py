"""RabbitMQ's row: ``rabbitmq-server`` (with an epmd of its own) on loopback, its database in a
scratch directory; a durable classic queue, persistent messages, publisher confirms (aio-pika)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.peers.base import Client, Server
from bench.peers.procs import StartError, free_port, port_open

SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
PREFETCH = 512


class RabbitMQServer(Server):
    """rabbitmq-server as this user (not Debian's service wrapper), HOME and data in scratch."""

    system = "rabbitmq"
    row = "RabbitMQ"
    settings = "durable classic queue, persistent messages, publisher confirms"

    def __init__(self) -> None:
        super().__init__()
        self.port = 0

    def start(self) -> None:
        """Start epmd, then the node, and wait until an AMQP connection opens."""
        epmd = shutil.which("epmd")
        if not SERVER.exists() or epmd is None:
            raise StartError("rabbitmq-server is not installed (Debian package rabbitmq-server)")
        self.port = free_port()
        epmd_port = free_port()
        # An epmd of our own on its own port, in our group: the node would otherwise start a
        # daemonised one that outlives it.
        self.group.spawn([epmd, "-port", str(epmd_port), "-address", "127.0.0.1"])
        self.group.wait_until(lambda: port_open(epmd_port), "epmd port open", 30)
        config = self.scratch / "rabbitmq.conf"
        config.write_text(
            f"listeners.tcp.1 = 127.0.0.1:{self.port}\n"
            "loopback_users = none\n"
            "management_agent.disable_metrics_collector = true\n"
        )
        (self.scratch / "enabled_plugins").write_text("[].\n")
        env = {
            **os.environ, "HOME": str(self.scratch), "ERL_EPMD_PORT": str(epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODENAME": f"compare{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1", "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_CONFIG_FILE": str(config),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.scratch / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(self.scratch / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.scratch / "log"), "RABBITMQ_LOGS": "-",
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.scratch / "advanced.config"),
        }  # fmt: skip
        self.group.spawn([str(SERVER)], env=env, cwd=self.scratch)
        self.group.wait_until(lambda: port_open(self.port), "AMQP port open", 180)
        self.group.wait_until(lambda: asyncio.run(_connects(self.endpoint())), "AMQP login", 60)

    def endpoint(self) -> dict[str, str]:
        """The AMQP URL."""
        return {"url": f"amqp://guest:guest@127.0.0.1:{self.port}/"}

    def version(self) -> str:
        """The version in the installed server's directory name."""
        for path in Path("/usr/lib/rabbitmq/lib").glob("rabbitmq_server-*"):
            if match := re.match(r"rabbitmq_server-(.+)$", path.name):
                return match.group(1)
        return "unknown"


async def _connects(endpoint: dict[str, str]) -> bool:
    import aio_pika

    connection = await aio_pika.connect(endpoint["url"], timeout=5)
    await connection.close()
    return True


class RabbitMQClient(Client):
    """One connection, one confirming channel for publishing and one for consuming."""

    rereadable = False  # acknowledged deliveries leave the queue

    def __init__(self, endpoint: dict[str, str]) -> None:
        super().__init__(endpoint)
        self._connection: Any = None
        self._channel: Any = None

    async def open(self) -> None:
        """Connect and open a channel in confirm mode."""
        import aio_pika

        self._connection = await aio_pika.connect(self.endpoint["url"])
        self._channel = await self._connection.channel(publisher_confirms=True)

    async def close(self) -> None:
        """Close the connection (and its channels)."""
        if self._connection is not None:
            await self._connection.close()

    async def create(self, topic: str) -> None:
        """A durable classic queue named ``topic``."""
        await self._channel.declare_queue(
            topic, durable=True, arguments={"x-queue-type": "classic"}
        )

    def _message(self, body: bytes) -> Any:
        import aio_pika

        return aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)

    async def publish(self, topic: str, body: bytes) -> None:
        """One persistent publish to the queue, awaiting the broker's confirm."""
        await self._channel.default_exchange.publish(self._message(body), routing_key=topic)

    async def publish_batch(self, topic: str, bodies: list[bytes]) -> None:
        """The batch's publishes in flight together, awaiting every confirm."""
        exchange = self._channel.default_exchange
        await asyncio.gather(
            *(exchange.publish(self._message(body), routing_key=topic) for body in bodies)
        )

    async def consume(self, topic: str, count: int, on_message: Callable[[bytes], None]) -> None:
        """basic.consume with a prefetch of 512, acking (multiple) every 128 deliveries."""
        channel = await self._connection.channel()
        try:
            await channel.set_qos(prefetch_count=PREFETCH)
            queue = await channel.declare_queue(
                topic, durable=True, arguments={"x-queue-type": "classic"}
            )
            received = 0
            async with queue.iterator() as deliveries:
                async for delivery in deliveries:
                    on_message(delivery.body)
                    received += 1
                    if received % 128 == 0 or received >= count:
                        await delivery.ack(multiple=True)
                    if received >= count:
                        break
        finally:
            await channel.close()
