"""A serving broker keeps the garbage collector off the objects it started with."""

from __future__ import annotations

import gc
from pathlib import Path

from actors.broker.broker import open_broker
from protocol import RemotingClient, ResponseCode
from storage import BrokerRole
from tests.actors.broker.ha.helpers import broker_config, running_registry
from tests.actors.broker.helpers import call, send_request


async def test_a_serving_broker_has_frozen_its_start_up_objects(tmp_path: Path) -> None:
    gc.unfreeze()
    try:
        async with running_registry() as registry, RemotingClient() as client:
            config = broker_config(tmp_path, registry.address, BrokerRole.ASYNC_MASTER)
            async with open_broker(config) as broker:
                # Its store, tables and actors are among the frozen, not collected again.
                assert gc.get_freeze_count() > 1000
                assert all(obj is not broker for obj in gc.get_objects())
                response = await call(client, broker.address, send_request("GcTopic", b"x"))
                assert response.code == ResponseCode.SUCCESS
    finally:
        gc.unfreeze()
