"""Routes and cluster info per transport: over TCP byte for byte what they always were, over
websocket with the brokers' ``ws://`` addresses only.

The golden files hold the raw TCP answer frames captured before brokers announced a websocket
address (``BOLTMQ_WRITE_GOLDEN=1`` rewrites them; do so only from code whose TCP answer is
known good). Rules: loopback only, port 0, a deadline on every I/O wait.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import orjson
import pytest
import trio

from actors.registry import Registry, open_registry
from protocol.client import RemotingClient
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.frame import encode

from .helpers import call, local_config, register_request, topics, wait_for_route

DATA = Path(__file__).parent / "data"
WRITE_GOLDEN = os.environ.get("BOLTMQ_WRITE_GOLDEN") == "1"

# Fixed addresses: the golden bytes name them.
BROKER_A = "10.0.0.1:10911"
BROKER_A_SLAVE = "10.0.0.2:10911"
BROKER_B = "10.0.0.3:10911"
WS_A = "ws://10.0.0.1:10913/"
WS_A_SLAVE = "ws://10.0.0.2:10913/"


async def _register_all(client: RemotingClient, address: str, *, with_websocket: bool) -> None:
    specs = [
        ("broker-a", 0, BROKER_A, WS_A),
        ("broker-a", 1, BROKER_A_SLAVE, WS_A_SLAVE),
        ("broker-b", 0, BROKER_B, None),  # no websocket listener
    ]
    for name, broker_id, addr, ws in specs:
        request = register_request(name, broker_id, addr, topics(("Orders", 4), ("Audit", 2)))
        if with_websocket and ws is not None:
            assert request.ext_fields is not None
            request.ext_fields["websocketAddr"] = ws
        response = await _invoke(client, address, request)
        assert response.code == ResponseCode.SUCCESS, response


async def _invoke(
    client: RemotingClient, address: str, request: RemotingCommand
) -> RemotingCommand:
    with trio.fail_after(10):
        return await client.invoke(address, request)


async def _raw_answer(address: str, code: int, ext: dict[str, str] | None) -> bytes:
    """The answer frame's bytes exactly as they come off a TCP socket (opaque fixed)."""
    request = RemotingCommand.request(code, ext)
    request.opaque = 4242
    host, port = address.rsplit(":", 1)
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(encode(request))
            data = bytearray()
            while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
                chunk = await stream.receive_some(65536)
                assert chunk, "registry closed the connection"
                data += chunk
    return bytes(data)


def _golden(name: str, actual: bytes) -> None:
    path = DATA / name
    if WRITE_GOLDEN:
        path.write_bytes(actual)
    assert actual == path.read_bytes(), f"{name}: the TCP answer changed"


async def test_tcp_route_and_cluster_info_are_unchanged_byte_for_byte(
    registry: Registry, client: RemotingClient
) -> None:
    # Brokers that announce a websocket address must not change a TCP client's answer.
    await _register_all(client, registry.address, with_websocket=not WRITE_GOLDEN)
    await wait_for_route(client, registry.address, "Orders", present=True)
    _golden(
        "route-tcp.frame",
        await _raw_answer(registry.address, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Orders"}),
    )
    _golden(
        "cluster-info-tcp.frame",
        await _raw_answer(registry.address, RequestCode.GET_BROKER_CLUSTER_INFO, None),
    )
