"""Pop state is replicated with the commit log: a slave holds the master's revive log (every
checkpoint and ack), and refuses pops itself. Real registry, master and slave on loopback."""

from __future__ import annotations

from pathlib import Path

import trio

from actors.broker.broker import open_broker
from protocol import RemotingClient, ResponseCode
from protocol.names import revive_topic
from storage import BrokerRole
from tests.actors.broker.delays import send
from tests.actors.broker.ha.helpers import (
    broker_config,
    running_registry,
    running_slave,
    wait_caught_up,
    wait_slave_linked,
)
from tests.actors.broker.pop_helpers import ack_request, pop, pop_request
from tests.support.remoting import call


async def test_slave_holds_the_revive_log_and_refuses_pops(tmp_path: Path) -> None:
    async with running_registry() as registry, RemotingClient() as client:
        config = broker_config(tmp_path / "master", registry.address, BrokerRole.ASYNC_MASTER)
        async with (
            open_broker(config) as master,
            running_slave(tmp_path / "slave", registry.address) as slave,
        ):
            with trio.fail_after(10):
                await wait_slave_linked(master)
            for i in range(4):
                await send(client, master.address, "PopHa", f"m{i}".encode(), queue_id=0)
            popped = await pop(client, master.address, "PopHa", invisible_ms=60_000)
            assert len(popped) == 4
            answer = await call(client, master.address, ack_request("PopHa", popped[0]))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            with trio.fail_after(10):
                await wait_caught_up(master, slave)
            revive = revive_topic(master.config.broker_cluster_name)
            # One checkpoint and one ack, on both.
            assert master.store.get_max_offset_in_queue(revive, 0) == 2
            assert slave.store.get_max_offset_in_queue(revive, 0) == 2
            answer = await call(client, slave.address, pop_request("PopHa"))
            assert answer.code == ResponseCode.SERVICE_NOT_AVAILABLE
