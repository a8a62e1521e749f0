"""Shared helpers for registry tests: a live registry on loopback and a broker's requests.

Rules: loopback only, port 0, a deadline (`trio.fail_after`) around every I/O wait.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
import trio

from actors.registry import Registry, RegistryConfig, open_registry
from actors.registry.wire import DataVersion, TopicConfig, body_crc32, encode_register_body
from protocol.client import RemotingClient
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from tests.support import remoting


def local_config(tmp_path: Path | None = None, **overrides: object) -> RegistryConfig:
    """A registry config on 127.0.0.1, port 0, KV file under ``tmp_path`` (or in memory)."""
    config = RegistryConfig(
        listen_port=0,
        bind_address="127.0.0.1",
        kv_config_path=None if tmp_path is None else str(tmp_path / "kvConfig.json"),
    )
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[Registry]:
    async with open_registry(local_config(tmp_path)) as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    async with RemotingClient() as remoting:
        yield remoting


FIRST_VERSION = DataVersion(timestamp=1, counter=1)


def topics(*specs: tuple[str, int]) -> list[TopicConfig]:
    """Topic configs from (name, queue count) pairs."""
    return [
        TopicConfig(topic_name=name, read_queue_nums=n, write_queue_nums=n) for name, n in specs
    ]


def register_request(
    broker_name: str,
    broker_id: int,
    broker_addr: str,
    topic_configs: list[TopicConfig],
    *,
    version: DataVersion = FIRST_VERSION,
    cluster: str = "DefaultCluster",
    compressed: bool = False,
    filter_servers: tuple[str, ...] = (),
) -> RemotingCommand:
    """REGISTER_BROKER as a broker sends it (body CRC included)."""
    body = encode_register_body(version, topic_configs, filter_servers, compressed=compressed)
    host, port = broker_addr.rsplit(":", 1)
    return RemotingCommand.request(
        RequestCode.REGISTER_BROKER,
        {
            "brokerName": broker_name,
            "brokerAddr": broker_addr,
            "clusterName": cluster,
            "haServerAddr": f"{host}:{int(port) + 1}",
            "brokerId": str(broker_id),
            "compressed": "true" if compressed else "false",
            "bodyCrc32": str(body_crc32(body)),
        },
        body,
    )


async def call(
    client: RemotingClient,
    address: str,
    code: int,
    ext: dict[str, str] | None = None,
    body: bytes | None = None,
) -> RemotingCommand:
    """One request built from its code, fields and body, with a deadline."""
    request = RemotingCommand.request(code, ext, body)
    return await remoting.call(client, address, request, 3.0, deadline=5)


async def route(client: RemotingClient, address: str, topic: str) -> dict[str, object] | None:
    """The decoded route of ``topic``, or None on TOPIC_NOT_EXIST."""
    response = await call(client, address, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    if response.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    assert response.code == ResponseCode.SUCCESS, response
    result: dict[str, object] = orjson.loads(response.body or b"")
    return result


async def wait_for_route(
    client: RemotingClient, address: str, topic: str, present: bool
) -> dict[str, object] | None:
    """Poll the route until it is (or is no longer) there; fails after 5 s."""
    with trio.fail_after(5):
        while True:
            found = await route(client, address, topic)
            if (found is not None) == present:
                return found
            await trio.sleep(0.01)
