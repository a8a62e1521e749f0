"""The broker on its other listeners: RocketMQ's fast port (listenPort - 2) and websocket."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio

import boltmq
from protocol import RemotingClient, ResponseCode
from protocol.message import iter_records
from tests.actors.broker.helpers import pull_request, send_request
from tests.ports import free_port, free_port_pair


async def test_fast_port_and_websocket_serve_the_same_broker(tmp_path: Path) -> None:
    port, ws_port = free_port_pair(-2), free_port()
    config = boltmq.BrokerConfig(
        listen_port=port, bind_address="127.0.0.1", websocket_listen_port=ws_port,
        store_path_root_dir=str(tmp_path / "store"),
    )  # fmt: skip
    async with boltmq.open_broker(config) as broker, RemotingClient() as client:
        assert broker.fast_port == port - 2 and broker.websocket_port == ws_port
        with trio.fail_after(10):
            by_fast = await client.invoke(f"127.0.0.1:{port - 2}", send_request("Ports", b"fast"))
            by_ws = await client.invoke(
                f"ws://127.0.0.1:{ws_port}/any/path", send_request("Ports", b"ws")
            )
            assert (by_fast.code, by_ws.code) == (ResponseCode.SUCCESS, ResponseCode.SUCCESS)
            pulled = await client.invoke(f"ws://127.0.0.1:{ws_port}/", pull_request("Ports"))
    assert pulled.body is not None
    assert [r.body for r in iter_records(pulled.body)] == [b"fast", b"ws"]


async def test_a_busy_fast_port_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port_pair(-2)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port - 2))
        squatter.listen()
        config = boltmq.BrokerConfig(
            listen_port=port, bind_address="127.0.0.1", store_path_root_dir=str(tmp_path / "s")
        )
        async with boltmq.open_broker(config) as broker, RemotingClient() as client:
            assert broker.fast_port is None
            with trio.fail_after(10):
                answer = await client.invoke(f"127.0.0.1:{port}", send_request("Ports"))
            assert answer.code == ResponseCode.SUCCESS
    assert f"fast port {port - 2} not available" in caplog.text
