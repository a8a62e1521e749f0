"""Transactional messages (sheet 3.15): half messages, commit, rollback, refusals, check-back.

Loopback only, port 0, a real store in ``tmp_path``, a deadline on every wait. The check-back
tests shorten transactionCheckInterval through the config so they take a second or two.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import trio

import boltmq
from boltmq import EmbeddedCluster
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.connection import Connection, Dispatcher
from protocol.headers import CheckTransactionStateRequestHeader, decode_header
from protocol.message import (
    MessageExt,
    MessageSysFlag,
    decode_offset_msg_id,
    decode_record,
    iter_records,
)
from protocol.names import CID_RMQ_SYS_TRANS, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from tests.actors.broker.helpers import SMALL_FILES, STORES, call, pull_request
from tests.actors.broker.transactions_helpers import (
    end_transaction_request,
    half_request,
    producer_heartbeat,
    send_request,
)

COMMIT = MessageSysFlag.TRANSACTION_COMMIT
ROLLBACK = MessageSysFlag.TRANSACTION_ROLLBACK
TOPIC = "TxTopic"


class Half:
    """What the broker answered to a half-message send."""

    def __init__(self, answer: RemotingCommand) -> None:
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        assert answer.ext_fields is not None
        self.msg_id = answer.ext_fields["msgId"]
        self.queue_id = int(answer.ext_fields["queueId"])
        self.queue_offset = int(answer.ext_fields["queueOffset"])
        self.commit_log_offset = decode_offset_msg_id(self.msg_id)[1]


async def send_half(
    client: RemotingClient, cluster: EmbeddedCluster, body: bytes, **kwargs: Any
) -> Half:
    return Half(await call(client, cluster.broker_address, half_request(TOPIC, body, **kwargs)))


def stored(cluster: EmbeddedCluster, topic: str, queue_id: int = 0) -> list[MessageExt]:
    """Every record of one queue, read from the store."""
    result = cluster.broker.store.get_message("TEST", topic, queue_id, 0, 1000)
    try:
        return [decode_record(buffer) for buffer in result.buffers]
    finally:
        result.release()


async def pulled(client: RemotingClient, cluster: EmbeddedCluster) -> list[MessageExt]:
    """What a consumer pulling queue 0 of the real topic gets."""
    answer = await call(client, cluster.broker_address, pull_request(TOPIC))
    if answer.code != ResponseCode.SUCCESS:
        return []
    assert answer.body is not None
    return list(iter_records(answer.body))


async def end(
    client: RemotingClient, cluster: EmbeddedCluster, half: Half, kind: int, group: str = "PG"
) -> RemotingCommand:
    request = end_transaction_request(
        group=group, tran_state_table_offset=half.queue_offset,
        commit_log_offset=half.commit_log_offset, commit_or_rollback=kind,
    )  # fmt: skip
    return await call(client, cluster.broker_address, request)


@pytest.fixture(params=STORES)
async def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    # Check-back off (a day between rounds): these tests drive check_once themselves.
    async with boltmq.embedded(
        tmp_path, store=request.param, transaction_check_interval=86_400_000, **SMALL_FILES
    ) as running:
        yield running


@pytest.fixture
async def client() -> Any:
    async with RemotingClient() as remoting:
        yield remoting


async def test_half_message_is_stored_aside_and_commit_makes_it_readable(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    # The topic exists with a normal message in queue 0, so an empty pull is not ambiguous.
    normal = await call(client, cluster.broker_address, send_request(TOPIC, b"normal"))
    assert normal.code == ResponseCode.SUCCESS
    half = await send_half(client, cluster, b"tx body", extra={"KEYS": "order-1"})
    assert half.queue_id == 0

    [record] = stored(cluster, TRANS_HALF_TOPIC)
    assert record.commit_log_offset == half.commit_log_offset
    assert record.queue_offset == half.queue_offset == 0
    assert record.properties["REAL_TOPIC"] == TOPIC
    assert record.properties["REAL_QID"] == "0"
    assert record.properties["PGROUP"] == "PG"
    assert record.sys_flag & MessageSysFlag.TRANSACTION_MASK == MessageSysFlag.TRANSACTION_NOT_TYPE
    assert [m.body for m in await pulled(client, cluster)] == [b"normal"]

    answer = await end(client, cluster, half, COMMIT)
    assert answer.code == ResponseCode.SUCCESS, answer.remark

    messages = await pulled(client, cluster)
    assert [m.body for m in messages] == [b"normal", b"tx body"]
    final = messages[1]
    assert final.topic == TOPIC and final.queue_id == 0
    assert final.sys_flag & MessageSysFlag.TRANSACTION_MASK == COMMIT
    assert final.prepared_transaction_offset == half.commit_log_offset
    assert final.properties["UNIQ_KEY"] == "UNIQ-1"
    assert final.properties["KEYS"] == "order-1"
    assert final.properties["TAGS"] == "TagT"
    assert final.properties["PGROUP"] == "PG"
    for gone in ("REAL_TOPIC", "REAL_QID", "TRAN_MSG"):
        assert gone not in final.properties
    assert final.born_timestamp == record.born_timestamp

    [op] = stored(cluster, TRANS_OP_HALF_TOPIC)
    assert op.body == b"0" and op.tags == "d"


async def test_rollback_is_never_readable(cluster: EmbeddedCluster, client: RemotingClient) -> None:
    await send_half(client, cluster, b"first")
    half = await send_half(client, cluster, b"rolled back", uniq_key="UNIQ-2")
    assert half.queue_offset == 1
    answer = await end(client, cluster, half, ROLLBACK)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert await pulled(client, cluster) == []
    assert cluster.broker.store.get_max_offset_in_queue(TOPIC, 0) == 0
    [op] = stored(cluster, TRANS_OP_HALF_TOPIC)
    assert op.body == b"1" and op.tags == "d"
    # "Unknown" (0) is a no-op.
    answer = await end(client, cluster, half, MessageSysFlag.TRANSACTION_NOT_TYPE)
    assert answer.code == ResponseCode.SUCCESS
    assert len(stored(cluster, TRANS_OP_HALF_TOPIC)) == 1


async def test_bad_end_transactions_change_nothing(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    normal = await call(client, cluster.broker_address, send_request("Other", b"plain"))
    plain_offset = decode_offset_msg_id(normal.ext_fields["msgId"])[1]  # type: ignore[index]
    half = await send_half(client, cluster, b"tx")
    cases = [
        (end_transaction_request(group="WrongGroup", tran_state_table_offset=0,
                                 commit_log_offset=half.commit_log_offset,
                                 commit_or_rollback=COMMIT), "producer group wrong"),
        (end_transaction_request(group="PG", tran_state_table_offset=0,
                                 commit_log_offset=half.commit_log_offset + 1,
                                 commit_or_rollback=COMMIT), "Find prepared transaction"),
        (end_transaction_request(group="PG", tran_state_table_offset=10**9,
                                 commit_log_offset=10**9, commit_or_rollback=ROLLBACK),
         "Find prepared transaction"),
        (end_transaction_request(group="PG", tran_state_table_offset=5,
                                 commit_log_offset=half.commit_log_offset,
                                 commit_or_rollback=COMMIT), "state table offset wrong"),
        (end_transaction_request(group="PG", tran_state_table_offset=0,
                                 commit_log_offset=plain_offset, commit_or_rollback=COMMIT),
         "not a prepared"),
        (end_transaction_request(group="PG", tran_state_table_offset=0,
                                 commit_log_offset=half.commit_log_offset,
                                 commit_or_rollback=3), "commitOrRollback 3"),
    ]  # fmt: skip
    before = cluster.broker.store.get_max_phy_offset()
    for request, remark in cases:
        answer = await call(client, cluster.broker_address, request)
        assert answer.code == ResponseCode.SYSTEM_ERROR, (remark, answer.remark)
        assert answer.remark is not None and remark in answer.remark
    assert cluster.broker.store.get_max_phy_offset() == before
    assert stored(cluster, TRANS_OP_HALF_TOPIC) == []
    assert cluster.broker.store.get_max_offset_in_queue(TOPIC, 0) == 0
    assert cluster.broker.transactions.statistics().refused == len(cases)

    # The right one still works, sent oneway as producers do.
    request = end_transaction_request(
        group="PG", tran_state_table_offset=0, commit_log_offset=half.commit_log_offset,
        commit_or_rollback=COMMIT, oneway=True,
    )  # fmt: skip
    await client.invoke_oneway(cluster.broker_address, request)
    with trio.fail_after(5):
        while not await pulled(client, cluster):
            await trio.sleep(0.01)
    assert [m.body for m in await pulled(client, cluster)] == [b"tx"]


async def test_transactional_batch_is_refused(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    from protocol.message import BatchElement, encode_batch

    body = encode_batch([BatchElement(flag=0, body=b"a", properties="")])
    request = send_request(TOPIC, body, properties={"TRAN_MSG": "true", "PGROUP": "PG"}, batch=True)
    answer = await call(client, cluster.broker_address, request)
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL
    assert cluster.broker.store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0) == 0


class CheckingProducer:
    """A producer connection that answers CHECK_TRANSACTION_STATE as a real one does."""

    def __init__(self, verdict: int | None) -> None:
        self.verdict = verdict  # None: never answer
        self.checks: list[tuple[CheckTransactionStateRequestHeader, MessageExt]] = []
        self.dispatcher = Dispatcher()
        self.dispatcher.register(RequestCode.CHECK_TRANSACTION_STATE, self.on_check)

    def on_check(self, connection: Connection, request: RemotingCommand) -> None:
        assert request.is_oneway and request.body is not None
        header = decode_header(CheckTransactionStateRequestHeader, request.ext_fields)
        message = decode_record(request.body)
        self.checks.append((header, message))
        if self.verdict is None:
            return
        connection.send_oneway(
            end_transaction_request(
                group=message.properties["PGROUP"],
                tran_state_table_offset=header.tran_state_table_offset,
                commit_log_offset=header.commit_log_offset,
                commit_or_rollback=self.verdict,
                msg_id=header.msg_id or "",
                from_transaction_check=True,
                oneway=True,
            )
        )


@pytest.mark.parametrize("store", STORES)
async def test_unknown_transaction_is_resolved_by_the_check_back(
    tmp_path: Path, store: str
) -> None:
    producer = CheckingProducer(verdict=COMMIT)
    async with (
        boltmq.embedded(
            tmp_path,
            store=store,
            transaction_check_interval=50,
            transaction_time_out=0,
            **SMALL_FILES,
        ) as cluster,
        RemotingClient(producer.dispatcher) as client,
    ):
        answer = await call(client, cluster.broker_address, producer_heartbeat("p@1", "PG"))
        assert answer.code == ResponseCode.SUCCESS
        half = await send_half(client, cluster, b"in doubt")
        with trio.fail_after(10):
            while not await pulled(client, cluster):
                await trio.sleep(0.02)
        [final] = await pulled(client, cluster)
        assert final.body == b"in doubt"

        [(header, message)] = producer.checks
        # The check names the re-put copy and carries the message as the producer sent it.
        assert header.tran_state_table_offset == 1
        assert header.commit_log_offset > half.commit_log_offset
        assert header.msg_id == header.transaction_id == "UNIQ-1"
        assert header.offset_msg_id is not None
        assert decode_offset_msg_id(header.offset_msg_id)[1] == header.commit_log_offset
        assert message.topic == TOPIC and message.queue_id == 0 and message.body == b"in doubt"
        assert message.properties["TRANSACTION_CHECK_TIMES"] == "1"
        assert message.commit_log_offset == header.commit_log_offset
        assert final.prepared_transaction_offset == header.commit_log_offset

        # Once resolved, later rounds leave it alone and the progress moves past both copies.
        rounds = cluster.broker.transactions.statistics().check_rounds
        with trio.fail_after(10):
            while cluster.broker.transactions.statistics().check_rounds < rounds + 3:
                await trio.sleep(0.02)
        assert len(producer.checks) == 1
        assert len(await pulled(client, cluster)) == 1
        offsets = cluster.broker.offsets
        assert offsets.query_offset(CID_RMQ_SYS_TRANS, TRANS_HALF_TOPIC, 0) == 2
        assert offsets.query_offset(CID_RMQ_SYS_TRANS, TRANS_OP_HALF_TOPIC, 0) == 1


async def test_unanswered_half_is_discarded_after_the_max_checks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    producer = CheckingProducer(verdict=MessageSysFlag.TRANSACTION_NOT_TYPE)
    caplog.set_level(logging.WARNING, logger="boltmq.broker.transaction")
    async with (
        boltmq.embedded(
            tmp_path, transaction_check_interval=30, transaction_time_out=0,
            transaction_check_max=3, **SMALL_FILES,
        ) as cluster,
        RemotingClient(producer.dispatcher) as client,
    ):  # fmt: skip
        await call(client, cluster.broker_address, producer_heartbeat("p@1", "PG"))
        await send_half(client, cluster, b"never decided")
        service = cluster.broker.transactions
        with trio.fail_after(10):
            while service.statistics().discarded < 1:
                await trio.sleep(0.02)
        assert [m.properties["TRANSACTION_CHECK_TIMES"] for _, m in producer.checks] == [
            "1",
            "2",
            "3",
        ]
        assert [h.tran_state_table_offset for h, _ in producer.checks] == [1, 2, 3]
        assert await pulled(client, cluster) == []
        assert any("discarded after 3 checks" in r.getMessage() for r in caplog.records)
        # Nothing more is asked.
        rounds = service.statistics().check_rounds
        with trio.fail_after(10):
            while service.statistics().check_rounds < rounds + 3:
                await trio.sleep(0.02)
        assert len(producer.checks) == 3 and service.statistics().discarded == 1
        offsets = cluster.broker.offsets
        assert offsets.query_offset(CID_RMQ_SYS_TRANS, TRANS_HALF_TOPIC, 0) == 4


async def test_young_halves_wait_for_the_transaction_timeout(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    import time

    await send_half(client, cluster, b"young", born_timestamp=time.time_ns() // 1_000_000)
    round_ = await cluster.broker.transactions.check_once()  # transactionTimeOut is 6 s
    assert (round_.checked, round_.half_offset) == (0, 0)
    assert cluster.broker.store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0) == 1


async def test_check_progress_survives_a_restart(tmp_path: Path) -> None:
    settings: dict[str, Any] = {"transaction_check_interval": 86_400_000, **SMALL_FILES}
    async with boltmq.embedded(tmp_path, **settings) as cluster, RemotingClient() as client:
        first = await send_half(client, cluster, b"rolled back")
        await send_half(client, cluster, b"in doubt", uniq_key="UNIQ-2")
        assert (await end(client, cluster, first, ROLLBACK)).code == ResponseCode.SUCCESS
        round_ = await cluster.broker.transactions.check_once()  # no producer to ask: re-put only
        assert (round_.half_offset, round_.op_offset, round_.checked) == (2, 1, 1)
        assert cluster.broker.transactions.statistics().checks_unsent == 1

    async with boltmq.embedded(tmp_path, **settings) as cluster:
        offsets = cluster.broker.offsets
        assert offsets.query_offset(CID_RMQ_SYS_TRANS, TRANS_HALF_TOPIC, 0) == 2
        assert offsets.query_offset(CID_RMQ_SYS_TRANS, TRANS_OP_HALF_TOPIC, 0) == 1
        round_ = await cluster.broker.transactions.check_once()
        assert (round_.half_offset, round_.checked) == (3, 1)
        # Resumed at the re-put copy: the next copy counts its second check, and the
        # rolled-back half was never looked at again.
        halves = stored(cluster, TRANS_HALF_TOPIC)
        assert [h.properties.get("TRANSACTION_CHECK_TIMES") for h in halves] == [
            None,
            None,
            "1",
            "2",
        ]
        assert [h.body for h in halves] == [b"rolled back", b"in doubt", b"in doubt", b"in doubt"]


async def test_half_older_than_the_file_reserved_time_is_discarded_unchecked(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    await send_half(client, cluster, b"ancient", born_timestamp=1_000_000_000_000)  # 2001
    round_ = await cluster.broker.transactions.check_once()
    assert (round_.checked, round_.discarded, round_.half_offset) == (0, 1, 1)
    assert cluster.broker.store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0) == 1


async def test_delay_properties_do_not_delay_a_transaction(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    half = await send_half(
        client, cluster, b"not delayed", extra={"DELAY": "3", "__STARTDELIVERTIME": "9999999999999"}
    )
    [record] = stored(cluster, TRANS_HALF_TOPIC)
    assert "DELAY" not in record.properties and "__STARTDELIVERTIME" not in record.properties
    assert (await end(client, cluster, half, COMMIT)).code == ResponseCode.SUCCESS
    assert [m.body for m in await pulled(client, cluster)] == [b"not delayed"]
