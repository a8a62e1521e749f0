"""NATS JetStream's row: ``nats-server -js`` with file storage in a scratch directory; streams
of one replica; nats-py publishes with JetStream acknowledgements and pulls with AckAll."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import uuid
from collections.abc import Callable
from typing import Any

from bench.peers.base import Client, Server
from bench.peers.procs import StartError, free_port, port_open


class NatsServer(Server):
    """nats-server with JetStream on, its store under the scratch directory."""

    system = "nats"
    row = "NATS JetStream"
    settings = "file storage, 1 replica (sync to disk every 2 min, the server's default)"

    def __init__(self) -> None:
        super().__init__()
        self.port = 0

    def start(self) -> None:
        """Start nats-server and wait until a client connects and JetStream answers."""
        binary = shutil.which("nats-server")
        if binary is None:
            raise StartError("nats-server is not installed (Debian package nats-server)")
        self.port = free_port()
        self.group.spawn([
            binary, "-a", "127.0.0.1", "-p", str(self.port), "-js",
            "-sd", str(self.scratch / "jetstream"), "--http_port", "0",
        ], cwd=self.scratch)  # fmt: skip
        self.group.wait_until(lambda: port_open(self.port), "client port open", 60)
        self.group.wait_until(lambda: asyncio.run(_jetstream_up(self.endpoint())), "JetStream", 60)

    def endpoint(self) -> dict[str, str]:
        """The server's URL."""
        return {"url": f"nats://127.0.0.1:{self.port}"}

    def version(self) -> str:
        """``nats-server --version``."""
        out = subprocess.run(
            ["nats-server", "--version"], capture_output=True, text=True, timeout=10
        ).stdout
        match = re.search(r"v?(\d+\.\d+\.\d+)", out)
        return match.group(1) if match else out.strip()


async def _jetstream_up(endpoint: dict[str, str]) -> bool:
    import nats

    connection = await nats.connect(endpoint["url"], connect_timeout=2, allow_reconnect=False)
    try:
        await connection.jetstream().account_info()
    finally:
        await connection.close()
    return True


class NatsClient(Client):
    """One connection; a stream per topic (file storage, 1 replica)."""

    def __init__(self, endpoint: dict[str, str]) -> None:
        super().__init__(endpoint)
        self._nc: Any = None
        self._js: Any = None

    async def open(self) -> None:
        """Connect and take the JetStream context."""
        import nats

        self._nc = await nats.connect(self.endpoint["url"])
        self._js = self._nc.jetstream(timeout=30)

    async def close(self) -> None:
        """Drain and close the connection."""
        if self._nc is not None:
            await self._nc.close()

    async def create(self, topic: str) -> None:
        """A stream named ``topic`` taking subject ``topic``."""
        from nats.js.api import StorageType

        await self._js.add_stream(
            name=topic, subjects=[topic], storage=StorageType.FILE, num_replicas=1
        )

    async def publish(self, topic: str, body: bytes) -> None:
        """One publish, awaiting its JetStream ack (the message is stored)."""
        await self._js.publish(topic, body)

    async def publish_batch(self, topic: str, bodies: list[bytes]) -> None:
        """The batch's publishes in flight together, awaiting every ack."""
        await asyncio.gather(*(self._js.publish(topic, body) for body in bodies))

    async def consume(self, topic: str, count: int, on_message: Callable[[bytes], None]) -> None:
        """A durable pull consumer (AckAll): fetch up to 256, ack the last of each fetch."""
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        durable = f"cg-{uuid.uuid4().hex[:10]}"
        subscription = await self._js.pull_subscribe(
            topic, durable=durable, stream=topic,
            config=ConsumerConfig(ack_policy=AckPolicy.ALL, deliver_policy=DeliverPolicy.ALL,
                                  max_ack_pending=-1),
        )  # fmt: skip
        received = 0
        try:
            while received < count:
                try:
                    messages = await subscription.fetch(batch=256, timeout=1)
                except NatsTimeout:
                    continue
                for message in messages:
                    on_message(message.data)
                received += len(messages)
                if messages:
                    await messages[-1].ack()
        finally:
            await subscription.unsubscribe()
            # A durable outlives its subscription: remove it, so the server stops tracking it.
            await self._js.delete_consumer(topic, durable)
