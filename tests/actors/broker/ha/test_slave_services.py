"""A slave runs neither the delay service nor the transaction check-back: only a master does.

Master and slave share one-second delay levels and a 100 ms check interval, so a slave that
delivered would try to re-put the due message it holds in its replicated SCHEDULE_TOPIC by the
time the master's re-put copy has reached it. Real registry, master and slave on loopback.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from actors.broker.broker import open_broker
from protocol import RemotingClient, ResponseCode
from protocol.names import SCHEDULE_TOPIC
from storage import BrokerRole, MessageExtBrokerInner
from tests.actors.broker.ha.helpers import (
    broker_config,
    commit_log_bytes,
    running_registry,
    running_slave,
    wait_caught_up,
    wait_for,
)
from tests.actors.broker.helpers import call, send_request

SETTINGS = {"message_delay_level": "1s 1s", "transaction_check_interval": 100}


async def test_slave_leaves_due_delayed_messages_and_halves_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="boltmq.broker")
    async with running_registry() as registry, RemotingClient() as client:
        config = broker_config(
            tmp_path / "master", registry.address, BrokerRole.ASYNC_MASTER, **SETTINGS
        )
        async with (
            open_broker(config) as master,
            running_slave(tmp_path / "slave", registry.address, **SETTINGS) as slave,
        ):
            attempts: list[MessageExtBrokerInner] = []
            put = slave.store.put_message_nowait

            def recording_put(msg: MessageExtBrokerInner, callback: object) -> None:
                attempts.append(msg)
                put(msg, callback)  # type: ignore[arg-type]

            monkeypatch.setattr(slave.store, "put_message_nowait", recording_put)

            request = send_request("LaterT", b"due soon", properties={"DELAY": "1"})
            assert (await call(client, master.address, request)).code == ResponseCode.SUCCESS
            await wait_caught_up(master, slave)
            assert slave.store.get_max_offset_in_queue(SCHEDULE_TOPIC, 0) == 1

            # The master delivers; the slave gets the re-put copy by replication only.
            await wait_for(lambda: slave.store.get_max_offset_in_queue("LaterT", 0) == 1)
            await wait_for(lambda: master.transactions.counters["check_rounds"] >= 3)
            await wait_caught_up(master, slave)
            assert master.schedule.counters["delivered"] == 1
            assert slave.schedule.counters == {"delivered": 0, "timer_hops": 0, "dropped": 0}
            assert slave.transactions.counters["check_rounds"] == 0
            assert attempts == []
            assert commit_log_bytes(slave.store) == commit_log_bytes(master.store)
            refused = [
                r for r in caplog.records
                if r.name.startswith("boltmq.broker") and r.name != "boltmq.broker.ha"
                and r.levelno >= logging.WARNING and "re-put" in r.getMessage()
            ]  # fmt: skip
            assert refused == []

            # The slave's delay offsets are the master's, copied by the config sync.
            assert slave.ha.sync is not None and await slave.ha.sync.sync_all()
            assert slave.schedule.delay_offsets.offset_table.get(1) == 1
