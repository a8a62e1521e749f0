"""Pop on a SYNC_MASTER: a pop's checkpoint and an ack are answered only once a slave has
them, as a send is; an ack a slave does not confirm in time is answered FLUSH_SLAVE_TIMEOUT
and holds all the same. A hand-driven slave decides when the master hears an
acknowledgement; a real pair shows the slave holding each record when the answer comes.
Loopback only; every wait has a deadline."""

from __future__ import annotations

from pathlib import Path

import trio

from actors.broker.broker import open_broker
from protocol import RemotingClient, RemotingCommand, ResponseCode
from protocol.message import decode_records
from storage import BrokerRole
from tests.actors.broker.ha.helpers import (
    REPORT,
    broker_config,
    master_service,
    running_registry,
    running_slave,
    sync_master_with_hand_slave,
    wait_for,
    wait_slave_linked,
)
from tests.actors.broker.helpers import send_request
from tests.actors.broker.pop_helpers import POP_CK, Popped, ack_request, pop, pop_request
from tests.support.remoting import call


async def test_pop_and_ack_wait_for_the_slave(tmp_path: Path) -> None:
    async with sync_master_with_hand_slave(tmp_path, slave_timeout=1500) as (
        master,
        slave,
        client,
    ):
        service = master_service(master)
        address = master.address

        async def acknowledged(request: RemotingCommand) -> RemotingCommand:
            """The answer to ``request``, which must wait until the slave reports."""
            answers: list[RemotingCommand] = []

            async def ask() -> None:
                answers.append(await call(client, address, request))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(ask)
                await wait_for(lambda: service.statistics().waiting_sends == 1)
                await trio.sleep(0.05)
                assert answers == []  # held for the slave
                await slave.send_all(REPORT.pack(master.store.get_max_phy_offset()))
            return answers[0]

        for i in range(2):
            sent = await acknowledged(send_request("PopSync", f"m{i}".encode(), queue_id=0))
            assert sent.code == ResponseCode.SUCCESS, sent.remark
        answer = await acknowledged(pop_request("PopSync", invisible_ms=60_000))
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        popped: list[Popped] = await pop_answered(answer)
        assert [p.message.body for p in popped] == [b"m0", b"m1"]
        answer = await acknowledged(ack_request("PopSync", popped[0]))
        assert answer.code == ResponseCode.SUCCESS, answer.remark

        # A slave that stays silent: the ack times out, and holds on the master.
        answer = await call(client, address, ack_request("PopSync", popped[1]))
        assert answer.code == ResponseCode.FLUSH_SLAVE_TIMEOUT
        assert "acked on the master" in (answer.remark or "")
        answer = await call(client, address, ack_request("PopSync", popped[1]))
        assert answer.code == ResponseCode.NO_MESSAGE
        assert master.pop.statistics().in_flight_checkpoints == 0


async def pop_answered(answer: RemotingCommand) -> list[Popped]:
    """The messages of a POP_MESSAGE answer."""
    return [Popped(m, m.properties[POP_CK]) for m in decode_records(answer.body or b"")]


async def test_a_real_slave_holds_each_record_when_the_answer_comes(tmp_path: Path) -> None:
    async with running_registry() as registry, RemotingClient() as client:
        config = broker_config(tmp_path / "master", registry.address, BrokerRole.SYNC_MASTER)
        async with (
            open_broker(config) as master,
            running_slave(tmp_path / "slave", registry.address) as slave,
        ):
            with trio.fail_after(10):
                await wait_slave_linked(master)
            answer = await call(client, master.address, send_request("PopPair", b"m", queue_id=0))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            (popped,) = await pop(client, master.address, "PopPair", invisible_ms=60_000)
            # The checkpoint was on the slave before the pop was answered.
            assert slave.store.get_max_phy_offset() >= master.store.get_max_phy_offset()
            answer = await call(client, master.address, ack_request("PopPair", popped))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            assert slave.store.get_max_phy_offset() >= master.store.get_max_phy_offset()
