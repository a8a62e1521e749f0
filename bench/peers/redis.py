"""Redis Streams' rows: ``redis-server`` with appendonly in a scratch directory (appendfsync
everysec, or always for the SYNC row); redis-py with hiredis; consumer groups with XACK."""

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

FIELD = b"b"


class RedisServer(Server):
    """redis-server with an append-only file fsynced as ``fsync`` says (everysec, always)."""

    system = "redis"

    def __init__(self, fsync: str) -> None:
        self.row = f"Redis Streams {fsync}"
        self.fsync = fsync
        self.settings = f"appendonly yes, appendfsync {fsync}"
        super().__init__()
        self.port = 0

    def start(self) -> None:
        """Start redis-server and wait until it answers PING."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise StartError("redis-server is not installed (Debian package redis-server)")
        self.port = free_port()
        self.group.spawn([
            binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.scratch),
            "--appendonly", "yes", "--appendfsync", self.fsync, "--save", "",
            "--daemonize", "no", "--protected-mode", "no",
        ], cwd=self.scratch)  # fmt: skip
        self.group.wait_until(lambda: port_open(self.port), "port open", 60)
        self.group.wait_until(lambda: asyncio.run(_ping(self.port)), "PING answered", 60)

    def endpoint(self) -> dict[str, str]:
        """The server's port."""
        return {"port": str(self.port)}

    def version(self) -> str:
        """``redis-server --version``."""
        out = subprocess.run(
            ["redis-server", "--version"], capture_output=True, text=True, timeout=10
        ).stdout
        match = re.search(r"v=(\S+)", out)
        return match.group(1) if match else out.strip()


async def _ping(port: int) -> bool:
    import redis.asyncio

    client = redis.asyncio.Redis(host="127.0.0.1", port=port)
    try:
        return bool(await client.ping())
    finally:
        await client.aclose()


class RedisClient(Client):
    """A connection pool (one connection per concurrent caller); XADD per message."""

    def __init__(self, endpoint: dict[str, str]) -> None:
        super().__init__(endpoint)
        self._redis: Any = None

    async def open(self) -> None:
        """Make the pool (hiredis parses the replies when installed)."""
        import redis.asyncio

        self._redis = redis.asyncio.Redis(host="127.0.0.1", port=int(self.endpoint["port"]))
        await self._redis.ping()

    async def close(self) -> None:
        """Close every pooled connection."""
        if self._redis is not None:
            await self._redis.aclose()

    async def create(self, topic: str) -> None:
        """The stream (made by a first consumer group, then left without one)."""
        await self._redis.xgroup_create(topic, "create", id="0", mkstream=True)
        await self._redis.xgroup_destroy(topic, "create")

    async def publish(self, topic: str, body: bytes) -> None:
        """One XADD (answered once in the append-only file's buffer, fsynced per its policy)."""
        await self._redis.xadd(topic, {FIELD: body})

    async def publish_batch(self, topic: str, bodies: list[bytes]) -> None:
        """The batch's XADDs in one pipeline (no MULTI), awaiting every reply."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for body in bodies:
                pipe.xadd(topic, {FIELD: body})
            await pipe.execute()

    async def consume(self, topic: str, count: int, on_message: Callable[[bytes], None]) -> None:
        """XREADGROUP of up to 256 (blocking up to 1 s), then XACK of what was read."""
        group = f"cg-{uuid.uuid4().hex[:10]}"
        await self._redis.xgroup_create(topic, group, id="0")
        received = 0
        while received < count:
            answer = await self._redis.xreadgroup(group, "c1", {topic: ">"}, count=256, block=1000)
            for _stream, entries in answer or ():
                ids = []
                for entry_id, fields in entries:
                    on_message(fields[FIELD])
                    ids.append(entry_id)
                received += len(ids)
                if ids:
                    await self._redis.xack(topic, group, *ids)
