"""The broker's remoting port refuses connections until the store has recovered, so a
readiness check that dials the port is not told "up" early; the port is bound (and known)
from the start all the same.

Loopback only, an ephemeral port, a real store in ``tmp_path``, a deadline on every wait.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio

from actors.broker.broker import Broker, open_broker
from actors.broker.config import BrokerConfig
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from tests.actors.broker.helpers import SMALL_FILES


def dial(port: int) -> str:
    """``connected`` or ``refused``: what a TCP readiness check on ``port`` would see."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            return "connected"
    except ConnectionRefusedError:
        return "refused"


async def test_the_port_answers_only_once_the_store_has_recovered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = BrokerConfig(
        listen_port=0,
        bind_address="127.0.0.1",
        fast_port_enable=False,
        store_path_root_dir=str(tmp_path / "store"),
        namesrv_addr="",
        **SMALL_FILES,
    )
    broker = Broker(config)
    seen: list[tuple[str, int, str]] = []
    recover = broker.store.open

    def open_and_dial() -> None:
        # Runs in the broker's start, before and after the store's open and recovery.
        port = broker.config.listen_port
        seen.append(("before recovery", port, dial(port)))
        recover()
        seen.append(("after recovery", port, dial(port)))

    monkeypatch.setattr(broker.store, "open", open_and_dial)
    async with trio.open_nursery() as nursery:
        with trio.fail_after(60):
            await nursery.start(broker.run)
        port = broker.config.listen_port
        assert port > 0
        # Bound from the start: the port the store's MsgIds carry is the one served.
        assert seen == [("before recovery", port, "refused"), ("after recovery", port, "refused")]
        assert await trio.to_thread.run_sync(dial, port) == "connected"
        async with RemotingClient() as client:
            with trio.fail_after(30):
                answer = await client.invoke(
                    broker.address, RemotingCommand.request(RequestCode.GET_BROKER_CONFIG), 20
                )
        assert answer.code == ResponseCode.SUCCESS
        assert broker.supervisor is not None
        with trio.fail_after(60):
            await broker.supervisor.aclose()
        nursery.cancel_scope.cancel()


async def test_a_taken_port_still_fails_the_start_before_the_store_opens(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with open_broker(
            BrokerConfig(
                listen_port=0,
                bind_address="127.0.0.1",
                fast_port_enable=False,
                store_path_root_dir=str(tmp_path / "first"),
                namesrv_addr="",
                **SMALL_FILES,
            )
        ) as first:
            second = Broker(
                BrokerConfig(
                    listen_port=first.config.listen_port,
                    bind_address="127.0.0.1",
                    fast_port_enable=False,
                    store_path_root_dir=str(tmp_path / "second"),
                    namesrv_addr="",
                    **SMALL_FILES,
                )
            )
            with pytest.raises(OSError, match="in use"):
                await second.run()
    assert not (tmp_path / "second" / "commitlog").exists()
