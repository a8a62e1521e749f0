"""A failing HA link restarts alone under the broker's supervisor; the broker keeps serving.

The fault is real code raising inside the link (a store call made to raise once); the test
checks that only the HA child restarted, that sends went on, and that replication resumed to
a byte-identical log. Loopback only; every wait has a deadline.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.broker.broker import Broker, open_broker
from protocol import RemotingClient, ResponseCode
from storage import BrokerRole
from tests.actors.broker.ha.helpers import (
    broker_config,
    commit_log_bytes,
    running_registry,
    running_slave,
    wait_caught_up,
    wait_for,
    wait_slave_linked,
)
from tests.actors.broker.helpers import call, send_request


def restarts(broker: Broker) -> dict[str, int]:
    """Restart count of every supervised child."""
    return {c.name: c.restarts for c in broker.statistics().supervisor.children}


async def send_some(client: RemotingClient, master: Broker, count: int, tag: str) -> None:
    """Send ``count`` messages; every one must succeed."""
    for i in range(count):
        request = send_request("Supervised", f"{tag}-{i}".encode() * 50, queue_id=i % 2)
        response = await call(client, master.address, request)
        assert response.code == ResponseCode.SUCCESS


@pytest.mark.parametrize("side", ["slave", "master"])
async def test_failed_link_restarts_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, side: str
) -> None:
    async with running_registry() as registry, RemotingClient() as client:
        config = broker_config(tmp_path / "master", registry.address, BrokerRole.ASYNC_MASTER)
        async with (
            open_broker(config) as master,
            running_slave(tmp_path / "slave", registry.address) as slave,
        ):
            await wait_slave_linked(master)
            await send_some(client, master, 20, "before")
            await wait_caught_up(master, slave)

            failing, child = (slave, "ha-client") if side == "slave" else (master, "ha-service")
            name = "append_to_commit_log" if side == "slave" else "get_commit_log_data"
            original = getattr(failing.store, name)
            calls = {"n": 0}

            def fail_once(*args: object) -> object:
                calls["n"] += 1
                if calls["n"] == 1:
                    raise RuntimeError("injected HA fault")
                return original(*args)

            monkeypatch.setattr(failing.store, name, fail_once)
            await send_some(client, master, 30, "during")
            await wait_for(lambda: restarts(failing)[child] >= 1)
            await send_some(client, master, 30, "after")
            await wait_caught_up(master, slave)
            assert commit_log_bytes(slave.store) == commit_log_bytes(master.store)
            for broker in (master, slave):
                others = {k: v for k, v in restarts(broker).items() if k != child}
                assert set(others.values()) == {0}
            assert master.statistics().supervisor.running
            assert slave.statistics().supervisor.running
