"""The transactional producer against a real BoltMQ cluster on loopback, on trio and asyncio.

This module runs its own cluster process whose broker checks unresolved half messages every
200 ms once they are a second old, so the check-back tests take a second or two. Every wait
has a deadline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from client import ClientInstance, Message, MQClientError, PullConsumer, SendStatus
from client.transaction import (
    COMMIT_MESSAGE,
    ROLLBACK_MESSAGE,
    UNKNOW,
    LocalTransactionState,
    TransactionProducer,
)
from protocol.bodies import ConsumeFromWhere
from protocol.message import MessageConst, MessageExt, MessageSysFlag

from .helpers import BoltProcess, free_port, poll_until, wait_for_route

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
Unique = Callable[[str], str]


@pytest.fixture(scope="module")
def tx_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BoltProcess]:
    """A registry + broker whose transaction check runs every 200 ms for halves over 1 s old."""
    home: Path = tmp_path_factory.mktemp("tx-cluster")
    ws_registry, ws_broker = free_port(), free_port()
    running = BoltProcess(
        home, "cluster", "--home", str(home), "--registryPort", "0", "--listenPort", "0",
        "--bindAddress", "127.0.0.1", "--fastPortEnable", "false",
        "--registryWebsocketPort", str(ws_registry), "--websocketListenPort", str(ws_broker),
        "--mapedFileSizeCommitLog", str(16 << 20), "--transactionCheckInterval", "200",
        "--transactionTimeOut", "1000",
    )  # fmt: skip
    running.found["ws_registry"] = f"ws://127.0.0.1:{ws_registry}/"
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(params=["tcp", "ws"])
def tx_namesrv(request: pytest.FixtureRequest, tx_cluster: BoltProcess) -> str:
    """The transaction cluster's registry over TCP, then over websocket (the broker's
    CHECK_TRANSACTION_STATE then reaches the producer over its websocket)."""
    return tx_cluster.found["ws_registry" if request.param == "ws" else "registry"]


def never_checked(message: MessageExt) -> LocalTransactionState:
    raise AssertionError(f"unexpected check of {message.msg_id}")


async def test_commit_makes_the_message_visible(
    tx_namesrv: str, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("TxTopic"), unique("TxPG")
    seen: list[tuple[Message, Any]] = []

    def local(message: Message, arg: Any) -> LocalTransactionState:
        seen.append((message, arg))
        return COMMIT_MESSAGE

    async with TransactionProducer(group, namesrv_addr=tx_namesrv,
                                   check_listener=never_checked) as producer:  # fmt: skip
        with anyio.fail_after(10):
            result = await producer.send_message_in_transaction(
                Message(topic, b"order placed", tags="TagT", keys="order-1"), local, arg=42
            )
        stats = producer.transaction_statistics()
    assert result.status is SendStatus.SEND_OK
    assert result.local_transaction_state is COMMIT_MESSAGE
    assert result.transaction_id == result.msg_id
    [(message, arg)] = seen
    assert arg == 42
    assert message.properties[MessageConst.UNIQ_KEY] == result.msg_id
    assert message.properties[MessageConst.TRAN_MSG] == "true"
    assert message.properties[MessageConst.PGROUP] == group
    assert stats["ended"] == 1 and stats["checks"] == 0
    async with PullConsumer(unique("CG"), namesrv_addr=tx_namesrv,
                            consume_from_where=FIRST) as consumer:  # fmt: skip
        await wait_for_route(consumer.instance, topic)
        await consumer.subscribe(topic)
        [got] = await poll_until(consumer, 1)
    assert got.body == b"order placed" and got.tags == "TagT" and got.keys == ["order-1"]
    assert got.msg_id == result.msg_id
    assert got.sys_flag & MessageSysFlag.TRANSACTION_MASK == MessageSysFlag.TRANSACTION_COMMIT
    assert MessageConst.TRAN_MSG not in got.properties
    assert got.properties[MessageConst.PGROUP] == group


async def test_rollback_drops_the_message(
    tx_cluster: BoltProcess, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("TxTopic")

    async def local(message: Message, decision: LocalTransactionState) -> LocalTransactionState:
        await anyio.sleep(0)  # an async local transaction is awaited
        return decision

    async with TransactionProducer(unique("TxPG"), namesrv_addr=tx_cluster.registry,
                                   check_listener=never_checked) as producer:  # fmt: skip
        with anyio.fail_after(10):
            dropped = await producer.send_message_in_transaction(
                Message(topic, b"rolled back"), local, ROLLBACK_MESSAGE
            )
            kept = await producer.send_message_in_transaction(
                Message(topic, b"committed"), local, COMMIT_MESSAGE
            )
    assert dropped.local_transaction_state is ROLLBACK_MESSAGE
    assert kept.local_transaction_state is COMMIT_MESSAGE
    async with PullConsumer(unique("CG"), namesrv_addr=tx_cluster.registry,
                            consume_from_where=FIRST) as consumer:  # fmt: skip
        await wait_for_route(consumer.instance, topic)
        await consumer.subscribe(topic)
        got = await poll_until(consumer, 1)
        assert [m.body for m in got] == [b"committed"]
        assert await consumer.poll(timeout=0.3) == []


async def test_unknown_outcome_is_settled_by_the_check_listener(
    tx_namesrv: str, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("TxTopic"), unique("TxPG")
    checked: list[MessageExt] = []

    def local(message: Message, arg: Any) -> LocalTransactionState:
        raise RuntimeError("the database did not answer")

    async def check(message: MessageExt) -> LocalTransactionState:
        checked.append(message)
        return COMMIT_MESSAGE

    async with TransactionProducer(group, namesrv_addr=tx_namesrv,
                                   check_listener=check) as producer:  # fmt: skip
        with anyio.fail_after(10):
            result = await producer.send_message_in_transaction(Message(topic, b"later"), local)
            assert result.local_transaction_state is UNKNOW
            async with PullConsumer(unique("CG"), namesrv_addr=tx_namesrv,
                                    consume_from_where=FIRST) as consumer:  # fmt: skip
                await wait_for_route(consumer.instance, topic)
                await consumer.subscribe(topic)
                [got] = await poll_until(consumer, 1)
        stats = producer.transaction_statistics()
    assert got.body == b"later" and got.msg_id == result.msg_id
    assert checked and checked[0].msg_id == result.transaction_id
    assert checked[0].topic == topic and checked[0].body == b"later"
    assert checked[0].properties[MessageConst.PGROUP] == group
    assert stats["checks"] >= 1 and stats["ended"] >= 2


async def test_checks_reach_the_producer_of_the_half_messages_group(
    tx_cluster: BoltProcess, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("TxTopic")
    commit_group, rollback_group = unique("TxCommitPG"), unique("TxRollbackPG")
    groups_checked: dict[str, set[str]] = {commit_group: set(), rollback_group: set()}

    def listener(group: str, decision: LocalTransactionState) -> Any:
        def check(message: MessageExt) -> LocalTransactionState:
            groups_checked[group].add(message.properties[MessageConst.PGROUP])
            return decision

        return check

    def unknown(message: Message, arg: Any) -> None:
        return None  # no decision: UNKNOW

    async with ClientInstance(tx_cluster.registry) as instance:
        committer = TransactionProducer(
            commit_group, instance=instance, check_listener=listener(commit_group, COMMIT_MESSAGE)
        )
        roller = TransactionProducer(
            rollback_group,
            instance=instance,
            check_listener=listener(rollback_group, ROLLBACK_MESSAGE),
        )
        async with committer, roller:
            with pytest.raises(MQClientError, match="already open"):
                async with TransactionProducer(commit_group, instance=instance,
                                               check_listener=never_checked):  # fmt: skip
                    pass
            with anyio.fail_after(10):
                kept = await committer.send_message_in_transaction(
                    Message(topic, b"commit me"), unknown
                )
                await roller.send_message_in_transaction(Message(topic, b"roll me back"), unknown)
                async with PullConsumer(unique("CG"), instance=instance,
                                        consume_from_where=FIRST) as consumer:  # fmt: skip
                    await wait_for_route(instance, topic)
                    await consumer.subscribe(topic)
                    got = await poll_until(consumer, 1)
                    while not groups_checked[rollback_group]:
                        await anyio.sleep(0.05)
                    assert await consumer.poll(timeout=0.3) == []
    assert [m.body for m in got] == [b"commit me"] and got[0].msg_id == kept.msg_id
    assert groups_checked == {commit_group: {commit_group}, rollback_group: {rollback_group}}
