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
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
import trio

from actors.registry import Registry, open_registry
from protocol.client import RemotingClient
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.frame import encode
from tests.ports import free_port as _free_port

from .helpers import call, local_config, register_request, route, topics, wait_for_route

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
        await _raw_answer(
            registry.address, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Orders"}
        ),
    )
    _golden(
        "cluster-info-tcp.frame",
        await _raw_answer(registry.address, RequestCode.GET_BROKER_CLUSTER_INFO, None),
    )


@pytest.fixture
async def ws_registry(tmp_path: Path) -> AsyncIterator[Registry]:
    config = local_config(tmp_path, websocket_listen_port=_free_port())
    async with open_registry(config) as running:
        yield running


async def test_websocket_route_names_only_websocket_addresses(
    ws_registry: Registry, client: RemotingClient, caplog: pytest.LogCaptureFixture
) -> None:
    tcp, ws = ws_registry.address, ws_registry.websocket_address
    assert ws is not None
    await _register_all(client, tcp, with_websocket=True)
    await wait_for_route(client, tcp, "Orders", present=True)
    with caplog.at_level(logging.WARNING, "boltmq.registry"):
        over_ws = await route(client, ws, "Orders")
        await route(client, ws, "Orders")
    assert over_ws == {
        "brokerDatas": [
            {"brokerAddrs": {"0": WS_A, "1": WS_A_SLAVE}, "brokerName": "broker-a",
             "cluster": "DefaultCluster"},
        ],
        "filterServerTable": {},
        "queueDatas": [
            {"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSynFlag": 0,
             "topicSysFlag": 0, "writeQueueNums": 4},
        ],
    }  # fmt: skip
    # broker-b has no websocket listener: left out, and said so once, not on every query.
    missing = [r for r in caplog.records if BROKER_B in r.getMessage()]
    assert len(missing) == 1 and "no websocket listener" in missing[0].getMessage()
    # Over TCP the same registry still answers with the TCP addresses of both brokers.
    over_tcp = await route(client, tcp, "Orders")
    assert over_tcp is not None
    assert [b["brokerAddrs"] for b in over_tcp["brokerDatas"]] == [
        {"0": BROKER_A, "1": BROKER_A_SLAVE},
        {"0": BROKER_B},
    ]


async def test_websocket_cluster_info_names_websocket_addresses(
    ws_registry: Registry, client: RemotingClient
) -> None:
    ws = ws_registry.websocket_address
    assert ws is not None
    await _register_all(client, ws_registry.address, with_websocket=True)
    response = await call(client, ws, RequestCode.GET_BROKER_CLUSTER_INFO)
    assert response.code == ResponseCode.SUCCESS
    assert orjson.loads(response.body or b"") == {
        "brokerAddrTable": {
            "broker-a": {"brokerAddrs": {"0": WS_A, "1": WS_A_SLAVE}, "brokerName": "broker-a",
                         "cluster": "DefaultCluster"},
        },
        "clusterAddrTable": {"DefaultCluster": ["broker-a"]},
    }  # fmt: skip


async def test_a_topic_only_on_brokers_without_websocket_is_refused_with_the_reason(
    ws_registry: Registry, client: RemotingClient
) -> None:
    ws = ws_registry.websocket_address
    assert ws is not None
    request = register_request("broker-b", 0, BROKER_B, topics(("TcpOnly", 2)))
    assert (await _invoke(client, ws_registry.address, request)).code == ResponseCode.SUCCESS
    response = await call(client, ws, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TcpOnly"})
    assert response.code == ResponseCode.TOPIC_NOT_EXIST
    assert "websocket listener" in (response.remark or "")
    unknown = await call(client, ws, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"})
    assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
    assert unknown.remark == "No topic route info in name server for the topic: Nope"


async def test_a_dropped_broker_leaves_the_websocket_route(
    ws_registry: Registry, client: RemotingClient
) -> None:
    ws = ws_registry.websocket_address
    assert ws is not None
    await _register_all(client, ws_registry.address, with_websocket=True)
    unregister = RemotingCommand.request(
        RequestCode.UNREGISTER_BROKER,
        {"brokerName": "broker-a", "brokerAddr": BROKER_A_SLAVE, "clusterName": "DefaultCluster",
         "brokerId": "1"},
    )  # fmt: skip
    assert (await _invoke(client, ws_registry.address, unregister)).code == ResponseCode.SUCCESS
    over_ws = await route(client, ws, "Orders")
    assert over_ws is not None
    assert over_ws["brokerDatas"][0]["brokerAddrs"] == {"0": WS_A}
