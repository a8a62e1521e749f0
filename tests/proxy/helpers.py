"""Shared parts of the gRPC proxy's tests: a cluster process, a proxy on asyncio, a v2 stub.

The cluster is a real ``boltmq cluster`` subprocess on loopback (ephemeral ports) whose broker
checks unresolved half messages every 200 ms once they are a second old, so transaction
check-backs take a second or two. The proxy runs in the test's own asyncio loop; the stub
drives it with grpc.aio over loopback using the project's generated v2 messages.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import grpc
import pytest

from client import Admin, ClientInstance
from proxy import ProxyConfig, ProxyServer
from proxy._pb.apache.rocketmq.v2 import definition_pb2 as pb
from proxy._pb.apache.rocketmq.v2 import service_pb2 as spb
from proxy.acl import AccountBook
from proxy.service import RPCS, SERVICE_NAME
from tests.client.helpers import BoltProcess, wait_for_route

__all__ = ["V2Stub", "create_topic", "pb", "proxy_cluster", "running_proxy", "spb"]


@pytest.fixture(scope="session")
def proxy_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BoltProcess]:
    """A registry + broker (one process) checking half messages every 200 ms after 1 s."""
    home: Path = tmp_path_factory.mktemp("proxy-cluster")
    running = BoltProcess(
        home, "cluster", "--home", str(home), "--registryPort", "0", "--listenPort", "0",
        "--bindAddress", "127.0.0.1", "--fastPortEnable", "false",
        "--mapedFileSizeCommitLog", str(16 << 20), "--transactionCheckInterval", "200",
        "--transactionTimeOut", "1000",
        timeout=60,
    )  # fmt: skip
    try:
        yield running
    finally:
        running.stop()


async def create_topic(namesrv: str, topic: str, queues: int = 4) -> None:
    """``topic`` with ``queues`` queues on every master, once the registry routes it."""
    async with Admin(namesrv_addr=namesrv) as admin:
        await admin.create_topic(topic, queue_nums=queues)
    async with ClientInstance(namesrv) as instance:
        await wait_for_route(instance, topic)


@contextlib.asynccontextmanager
async def running_proxy(
    namesrv: str, accounts: AccountBook | None = None, **settings: Any
) -> AsyncIterator[ProxyServer]:
    """A proxy on an ephemeral loopback port in front of ``namesrv``."""
    config = ProxyConfig(namesrv_addr=namesrv, grpc_server_port=0, **settings)
    async with ProxyServer(config, accounts) as server:
        yield server


class V2Stub:
    """Calls MessagingService's RPCs by name, with the client metadata an official client sends."""

    def __init__(self, channel: grpc.aio.Channel, client_id: str | None = "test-client") -> None:
        self.channel = channel
        self.client_id = client_id

    def metadata(self, **extra: str) -> list[tuple[str, str]]:
        """The call metadata: client id (unless None), language and protocol."""
        items = [("x-mq-language", "PYTHON"), ("x-mq-protocol", "GRPC_V2")]
        if self.client_id is not None:
            items.append(("x-mq-client-id", self.client_id))
        items.extend(extra.items())
        return items

    async def unary(self, rpc: str, request: Any, timeout: float = 10.0) -> Any:
        """Call a unary RPC and return its answer."""
        _, request_type, response_type, kind = RPCS[rpc]
        assert kind == "unary" and isinstance(request, request_type), rpc
        call = self.channel.unary_unary(
            f"/{SERVICE_NAME}/{rpc}",
            request_serializer=request_type.SerializeToString,
            response_deserializer=response_type.FromString,
        )
        with anyio.fail_after(timeout):
            return await call(request, metadata=self.metadata(), timeout=timeout)

    def telemetry(self) -> Any:
        """Open a telemetry stream (a grpc.aio StreamStreamCall)."""
        call = self.channel.stream_stream(
            f"/{SERVICE_NAME}/Telemetry",
            request_serializer=spb.TelemetryCommand.SerializeToString,
            response_deserializer=spb.TelemetryCommand.FromString,
        )
        return call(metadata=self.metadata())


def v2_message(topic: str, body: bytes, message_id: str, **system: Any) -> pb.Message:
    """A v2 message as an official client builds one (NORMAL unless ``message_type`` says)."""
    user = system.pop("user_properties", {})
    system.setdefault("message_type", pb.NORMAL)
    return pb.Message(
        topic=pb.Resource(name=topic),
        body=body,
        user_properties=user,
        system_properties=pb.SystemProperties(message_id=message_id, **system),
    )
