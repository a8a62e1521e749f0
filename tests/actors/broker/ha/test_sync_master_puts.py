"""SYNC_MASTER puts that do not come through the send handler wait for a slave too.

CONSUMER_SEND_MSG_BACK and END_TRANSACTION's commit are answered only once a slave has the
bytes (or with the SYNC_MASTER codes), and the schedule service's delay offset never passes a
re-put no slave has. A hand-driven slave (a plain TCP socket speaking the HA protocol) decides
when the master hears an acknowledgement. Loopback only; every wait has a deadline.
"""

from __future__ import annotations

from pathlib import Path

import trio

from actors.broker.broker import Broker, open_broker
from protocol import RemotingClient, RemotingCommand, ResponseCode
from protocol.message import MessageSysFlag, decode_offset_msg_id
from protocol.names import SCHEDULE_TOPIC
from storage import BrokerRole
from tests.actors.broker.delays import send_back_request
from tests.actors.broker.ha.helpers import (
    REPORT,
    broker_config,
    master_service,
    sync_master_with_hand_slave,
    wait_for,
)
from tests.actors.broker.helpers import call, send_request
from tests.actors.broker.transactions_helpers import end_transaction_request, half_request

FAST_LEVELS = "1s 1s 1s"
COMMIT = MessageSysFlag.TRANSACTION_COMMIT


async def ack_all(master: Broker, slave: trio.SocketStream) -> None:
    """The slave reports the master's whole commit log."""
    await slave.send_all(REPORT.pack(master.store.get_max_phy_offset()))


async def held_until_acked(
    master: Broker, slave: trio.SocketStream, client: RemotingClient, request: RemotingCommand
) -> RemotingCommand:
    """Invoke ``request``; it must be unanswered while the master waits for the slave."""
    service = master_service(master)
    answers: list[RemotingCommand] = []

    async def invoke() -> None:
        answers.append(await call(client, master.address, request))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(invoke)
        await wait_for(lambda: service.statistics().waiting_sends == 1)
        assert answers == []  # held: no slave has the bytes yet
        await ack_all(master, slave)
    (answer,) = answers
    return answer


async def test_send_back_waits_for_the_slave(tmp_path: Path) -> None:
    async with sync_master_with_hand_slave(tmp_path, slave_timeout=300) as (master, slave, client):
        sent = await held_until_acked(master, slave, client, send_request("BackT", b"failed"))
        assert sent.code == ResponseCode.SUCCESS
        offset = decode_offset_msg_id(sent.ext_fields["msgId"])[1]

        answer = await held_until_acked(master, slave, client, send_back_request(offset, "CG"))
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        assert master.store.get_max_offset_in_queue(SCHEDULE_TOPIC, 2) == 1

        # Unacknowledged for slaveTimeout: the status name with SYSTEM_ERROR, as RocketMQ
        # answers a send-back put that is not PUT_OK (the client then resends it itself).
        answer = await call(client, master.address, send_back_request(offset, "CG"))
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert answer.remark == "FLUSH_SLAVE_TIMEOUT"
        assert master.store.get_max_offset_in_queue(SCHEDULE_TOPIC, 2) == 2  # stored all the same


async def test_send_back_without_a_slave_says_slave_not_available(tmp_path: Path) -> None:
    config = broker_config(tmp_path, "", BrokerRole.SYNC_MASTER)
    async with open_broker(config) as master, RemotingClient() as client:
        sent = await call(client, master.address, send_request("BackT", b"failed"))
        assert sent.code == ResponseCode.SLAVE_NOT_AVAILABLE
        offset = decode_offset_msg_id(sent.ext_fields["msgId"])[1]
        answer = await call(client, master.address, send_back_request(offset, "CG"))
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert answer.remark == "SLAVE_NOT_AVAILABLE"


async def test_end_transaction_commit_waits_for_the_slave(tmp_path: Path) -> None:
    async with sync_master_with_hand_slave(tmp_path, slave_timeout=300) as (master, slave, client):
        half = await held_until_acked(master, slave, client, half_request("TxT", b"tx"))
        assert half.code == ResponseCode.SUCCESS
        queue_offset = int(half.ext_fields["queueOffset"])
        commit_log_offset = decode_offset_msg_id(half.ext_fields["msgId"])[1]
        request = end_transaction_request(
            group="PG", tran_state_table_offset=queue_offset,
            commit_log_offset=commit_log_offset, commit_or_rollback=COMMIT,
        )  # fmt: skip
        answer = await held_until_acked(master, slave, client, request)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        assert master.store.get_max_offset_in_queue("TxT", 0) == 1

        # Not acknowledged in time: RocketMQ still answers SUCCESS (the commit is stored).
        half = await held_until_acked(master, slave, client, half_request("TxT", b"tx2"))
        request = end_transaction_request(
            group="PG", tran_state_table_offset=int(half.ext_fields["queueOffset"]),
            commit_log_offset=decode_offset_msg_id(half.ext_fields["msgId"])[1],
            commit_or_rollback=COMMIT,
        )  # fmt: skip
        start = trio.current_time()
        answer = await call(client, master.address, request)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        assert trio.current_time() - start >= 0.25  # it did wait for slaveTimeout
        assert master_service(master).statistics().slave_timeouts == 1
        assert master.store.get_max_offset_in_queue("TxT", 0) == 2


async def test_delay_offset_does_not_pass_a_re_put_the_slave_lacks(tmp_path: Path) -> None:
    async with sync_master_with_hand_slave(
        tmp_path, slave_timeout=300, message_delay_level=FAST_LEVELS
    ) as (master, slave, client):
        schedule = master.schedule
        service = master_service(master)

        def delay_offset() -> int:
            return schedule.delay_offsets.offset_table.get(1, 0)

        delayed = send_request("DelayT", b"later", properties={"DELAY": "1"})
        assert (await held_until_acked(master, slave, client, delayed)).code == ResponseCode.SUCCESS

        # Due after a second: the re-put is stored and waits; the offset stays put meanwhile.
        with trio.fail_after(10):
            await wait_for(lambda: service.statistics().waiting_sends == 1)
        assert master.store.get_max_offset_in_queue("DelayT", 0) == 1
        assert delay_offset() == 0
        await ack_all(master, slave)
        await wait_for(lambda: delay_offset() == 1)

        # The slave never acknowledges the next re-put: it times out, delivery is not
        # repeated, and the recorded offset waits until a slave has the bytes.
        assert (await held_until_acked(master, slave, client, delayed)).code == ResponseCode.SUCCESS
        await wait_for(lambda: service.statistics().slave_timeouts == 1)
        await wait_for(lambda: schedule.counters["delivered"] == 2)
        assert master.store.get_max_offset_in_queue("DelayT", 0) == 2
        assert delay_offset() == 1
        await ack_all(master, slave)
        await wait_for(lambda: delay_offset() == 2)
        assert master.store.get_max_offset_in_queue("DelayT", 0) == 2  # re-put once only
        assert schedule.counters["delivered"] == 2
