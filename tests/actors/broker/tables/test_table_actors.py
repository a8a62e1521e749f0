"""The table actors: casts seen by the next read, statistics, files, callbacks, timers, and a
crash restarted by the broker's supervisor with the table intact.

Standalone actors run in the test's nursery (timed cases on a MockClock, without sockets);
broker cases use a live embedded cluster on loopback. Every wait has a deadline.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import boltmq
from actors.broker.config import BrokerConfig
from actors.broker.tables.clients import (
    ClientManager,
    ConsumerHeartbeat,
    Heartbeat,
    UnregisterClient,
)
from actors.broker.tables.groups import AutoCreateGroup, SubscriptionGroupManager, UpdateGroup
from actors.broker.tables.locks import LockBatch, RebalanceLockManager, UnlockBatch
from actors.broker.tables.offsets import CommitOffset, CommitOffsets, ConsumerOffsetManager
from actors.broker.tables.table_actor import TableActor, TableWriteError
from actors.broker.tables.topics import (
    CreateTopicInSendBack,
    TopicManager,
    UpdateTopicConfig,
)
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.bodies import (
    ConsumeFromWhere,
    ConsumeType,
    MessageModel,
    MessageQueue,
    SubscriptionData,
    SubscriptionGroupConfig,
    TopicConfig,
)
from protocol.codes import LanguageCode
from protocol.headers import (
    QueryConsumerOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    encode_header,
)
from supervisors.actor import ActorStatus, ActorStopped, Request
from tests.actors.broker.helpers import SMALL_FILES, call, heartbeat_request, send_request
from tests.support.waiting import wait_until


async def wait_for(condition: Callable[[], bool], timeout: float = 10) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds."""
    await wait_until(condition, timeout, "the table condition", interval=0.01)


class Conn:
    """Stands in for a remoting connection: hashable, closed, with a peer name."""

    closed = True
    peer = "127.0.0.1:1"

    def send_oneway(self, request: object) -> None:
        raise AssertionError("nobody is told over a closed connection")


@attrs.frozen
class Poison:
    """A command no table actor takes: handling it raises, which crashes the actor."""


@attrs.frozen
class PoisonRequest(Request[None]):
    """A request no table actor takes: the caller gets the error, the actor carries on."""


def heartbeat(conn: Any, client_id: str, group: str, now: float) -> Heartbeat:
    consumer = ConsumerHeartbeat(
        group, ConsumeType.CONSUME_PASSIVELY, MessageModel.CLUSTERING,
        ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, (SubscriptionData(topic="T"),),
    )  # fmt: skip
    return Heartbeat(conn, client_id, LanguageCode.JAVA, 400, now, (consumer,), ("PG",))


# -- a cast is seen by the next read ---------------------------------------------------------


async def test_a_cast_is_read_inline_once_the_actor_ran(nursery: trio.Nursery) -> None:
    offsets = ConsumerOffsetManager(None)
    await nursery.start(offsets.run)
    offsets.cast_nowait(CommitOffset("G", "T", 0, 7))
    assert offsets.query_offset("G", "T", 0) == -1  # queued, not applied yet
    await trio.testing.wait_all_tasks_blocked()
    assert offsets.query_offset("G", "T", 0) == 7
    # A burst is drained in one scheduler pass (batch_limit), in order.
    for offset in range(100):
        offsets.cast_nowait(CommitOffset("G", "T", 1, offset))
    await trio.testing.wait_all_tasks_blocked()
    assert offsets.query_offset("G", "T", 1) == 99
    stats = offsets.statistics()
    assert (stats.commands_handled, stats.commits, stats.mailbox_used) == (101, 101, 0)


async def test_each_query_on_a_connection_sees_the_change_cast_before_it(
    tmp_path: Path,
) -> None:
    def update(offset: int) -> RemotingCommand:
        header = UpdateConsumerOffsetRequestHeader(
            consumer_group="G", topic="T", queue_id=0, commit_offset=offset
        )
        return RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, encode_header(header))

    query = RemotingCommand.request(
        RequestCode.QUERY_CONSUMER_OFFSET,
        encode_header(QueryConsumerOffsetRequestHeader(consumer_group="G", topic="T", queue_id=0)),
    )
    async with boltmq.embedded(tmp_path, **SMALL_FILES) as cluster, RemotingClient() as client:
        address = cluster.broker_address
        for offset in range(1, 200):
            assert (await call(client, address, update(offset))).code == ResponseCode.SUCCESS
            answer = await call(client, address, query)
            assert answer.ext_fields == {"offset": str(offset)}
        # A heartbeat (a cast) is seen by the next query of the group's members.
        assert (await call(client, address, heartbeat_request("c1", "CG", "T"))).code == 0
        members = await call(
            client,
            address,
            RemotingCommand.request(
                RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG"}
            ),
        )
        assert members.code == ResponseCode.SUCCESS, members.remark


# -- statistics ----------------------------------------------------------------------------


async def test_each_actor_counts_its_table(nursery: trio.Nursery) -> None:
    topics = TopicManager(BrokerConfig(), None)
    offsets = ConsumerOffsetManager(None)
    groups = SubscriptionGroupManager(None)
    clients = ClientManager()
    locks = RebalanceLockManager()
    for actor in (topics, offsets, groups, clients, locks):
        await nursery.start(actor.run)
    base_topics = topics.statistics().topics
    await topics.call(UpdateTopicConfig(TopicConfig(topic_name="T")))
    await offsets.call(CommitOffsets("G", "T", {0: 1, 1: 2}))
    await groups.call(UpdateGroup(SubscriptionGroupConfig(group_name="G")))
    clients.cast_nowait(heartbeat(Conn(), "c1", "G", 0.0))
    mqs = tuple(MessageQueue(topic="T", broker_name="b", queue_id=i) for i in range(2))
    await locks.call(LockBatch("G", mqs, "c1"))
    await locks.call(LockBatch("G", mqs, "c2"))
    await trio.testing.wait_all_tasks_blocked()

    t = topics.statistics()
    assert (t.name, t.status, t.topics, t.data_version) == (
        "topics",
        ActorStatus.RUNNING,
        base_topics + 1,
        1,
    )
    assert t.system_topics == len(topics.system_topics) and t.file_writes == 0
    o = offsets.statistics()
    assert (o.topic_groups, o.queue_offsets, o.commits) == (1, 2, 2)
    g = groups.statistics()
    assert (g.groups, g.data_version) == (len(groups.table), 1)
    c = clients.statistics()
    assert (c.consumer_groups, c.consumer_channels, c.producer_groups, c.producer_channels) == (
        1, 1, 1, 1
    )  # fmt: skip
    assert (c.channels_expired, c.notifications) == (0, 0)  # no notifier set
    lk = locks.statistics()
    assert (lk.groups, lk.locked_queues, lk.granted, lk.refused) == (1, 2, 2, 2)
    for stats in (t, o, g, c, lk):
        assert (stats.errors, stats.restarts, stats.dropped) == (0, 0, 0)


# -- files ---------------------------------------------------------------------------------


async def test_offsets_are_written_after_the_interval_and_at_stop(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    offsets = ConsumerOffsetManager(path, interval_ms=50)
    async with trio.open_nursery() as nursery:
        await nursery.start(offsets.run)
        offsets.cast_nowait(CommitOffset("G", "T", 0, 1))
        await wait_for(lambda: offsets.statistics().file_writes == 1)
        assert b'"T@G":{0:1}' in path.read_bytes()
        # Changed again and stopped before the interval: the stop writes it.
        offsets.interval = 3600
        offsets.cast_nowait(CommitOffset("G", "T", 0, 2))
        with trio.fail_after(10):
            await offsets.aclose()
    assert b'"T@G":{0:2}' in path.read_bytes()
    assert b'"T@G":{0:1}' in path.with_name(path.name + ".bak").read_bytes()
    # A new actor loads the file before it runs.
    again = ConsumerOffsetManager(path)
    assert again.load() and again.query_offset("G", "T", 0) == 2


async def test_call_persisted_answers_once_the_file_holds_the_change(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    offsets = ConsumerOffsetManager(path, interval_ms=3_600_000)  # batching never writes
    async with trio.open_nursery() as nursery:
        await nursery.start(offsets.run)
        offsets.cast_nowait(CommitOffset("G", "T", 0, 1))  # a hot-path cast, batched
        with trio.fail_after(10):
            await offsets.call_persisted(CommitOffsets("Admin", "T", {0: 7}))
        # Written on the operator's change: the cast before it too, in the same snapshot.
        assert b'"T@Admin":{0:7}' in path.read_bytes()
        assert b'"T@G":{0:1}' in path.read_bytes()
        assert offsets.statistics().file_writes == 1
        with trio.fail_after(10):
            await offsets.aclose()


async def test_call_persisted_says_when_the_file_cannot_be_written(tmp_path: Path) -> None:
    blocker = tmp_path / "config"
    blocker.write_text("a file where the table's directory should be")
    path = blocker / "consumerOffset.json"
    offsets = ConsumerOffsetManager(path, interval_ms=3_600_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(offsets.run)
        with trio.fail_after(10), pytest.raises(TableWriteError) as refused:
            await offsets.call_persisted(CommitOffsets("Admin", "T", {0: 7}))
        assert refused.value.code == ResponseCode.SYSTEM_ERROR
        assert f"could not be written to {path}" in refused.value.remark
        assert offsets.query_offset("Admin", "T", 0) == 7  # applied in memory all the same
        assert offsets.statistics().file_errors >= 1
        with trio.fail_after(10):
            await offsets.aclose()


async def test_nothing_is_written_when_nothing_changed(tmp_path: Path) -> None:
    path = tmp_path / "subscriptionGroup.json"
    groups = SubscriptionGroupManager(path)
    async with trio.open_nursery() as nursery:
        await nursery.start(groups.run)
        groups.cast_nowait(AutoCreateGroup(next(iter(groups.table))))  # exists: no change
        with trio.fail_after(10):
            await groups.aclose()
    assert not path.exists()


# -- call_nowait -----------------------------------------------------------------------------


async def test_call_nowait_answers_through_callbacks_in_the_actor(nursery: trio.Nursery) -> None:
    topics = TopicManager(BrokerConfig(), None)
    await nursery.start(topics.run)
    answers: list[Any] = []
    errors: list[Exception] = []
    topics.call_nowait(CreateTopicInSendBack("%RETRY%G", 2), answers.append, errors.append)
    assert topics.select("%RETRY%G") is None
    await trio.testing.wait_all_tasks_blocked()
    assert [cfg.topic_name for cfg in answers] == ["%RETRY%G"] and not errors
    assert topics.select("%RETRY%G") == answers[0]
    # A request the actor refuses reaches on_error; the actor carries on.
    topics.call_nowait(PoisonRequest(), answers.append, errors.append)
    await trio.testing.wait_all_tasks_blocked()
    assert len(answers) == 1 and isinstance(errors[0], TypeError)
    stats = topics.statistics()
    assert (stats.status, stats.restarts) == (ActorStatus.RUNNING, 0)
    with trio.fail_after(10):
        await topics.aclose()
    with pytest.raises(ActorStopped):
        topics.call_nowait(CreateTopicInSendBack("X", 1), answers.append, errors.append)


# -- timers ----------------------------------------------------------------------------------


async def test_the_scanner_drops_silent_clients_and_tells_the_rest(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    clients = ClientManager(channel_expired_ms=120_000, scan_interval=10.0)
    told: list[tuple[str, int]] = []
    clients.notifier = lambda group, connections: told.append((group, len(connections)))
    await nursery.start(clients.run)
    quiet, chatty = Conn(), Conn()
    clients.cast_nowait(heartbeat(quiet, "quiet", "G", trio.current_time()))
    clients.cast_nowait(heartbeat(chatty, "chatty", "G", trio.current_time()))
    await trio.testing.wait_all_tasks_blocked()
    assert told == [("G", 1), ("G", 2)]  # each member that joined changed the group
    for _ in range(10):  # the chatty one heartbeats every 30 s
        await trio.sleep(30)
        clients.cast_nowait(heartbeat(chatty, "chatty", "G", trio.current_time()))
    info = clients.get_consumer_group_info("G")
    assert info is not None and info.client_ids() == ["chatty"]
    assert told[-1] == ("G", 1)  # told when the quiet one was dropped
    assert clients.statistics().channels_expired == 2  # its consumer and producer channels
    clients.cast_nowait(UnregisterClient(chatty, "PG", "G"))  # type: ignore[arg-type]
    await trio.testing.wait_all_tasks_blocked()
    assert clients.consumer_table == {} and clients.producer_table == {}


async def test_a_lock_lease_runs_out_after_a_minute(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    locks = RebalanceLockManager(lock_max_live_time_ms=60_000)
    await nursery.start(locks.run)
    mq = MessageQueue(topic="T", broker_name="b", queue_id=0)
    assert await locks.call(LockBatch("G", (mq,), "A")) == [mq]
    await trio.sleep(59)
    assert await locks.call(LockBatch("G", (mq,), "B")) == []
    assert locks.locked_by("G", mq) == "A"
    await trio.sleep(2)
    assert locks.locked_by("G", mq) is None
    assert await locks.call(LockBatch("G", (mq,), "B")) == [mq]
    assert await locks.call(UnlockBatch("G", (mq,), "B")) == 1


# -- a crash --------------------------------------------------------------------------------


async def fill(cluster: boltmq.EmbeddedCluster, name: str) -> Callable[[], bool]:
    """Put something in table ``name`` through its actor; a check that it is still there."""
    broker = cluster.broker
    if name == "topics":
        await broker.topics.call(UpdateTopicConfig(TopicConfig(topic_name="Kept")))
        return lambda: broker.topics.select("Kept") is not None
    if name == "offsets":
        await broker.offsets.call(CommitOffsets("G", "Kept", {0: 5}))
        return lambda: broker.offsets.query_offset("G", "Kept", 0) == 5
    if name == "groups":
        await broker.groups.call(UpdateGroup(SubscriptionGroupConfig(group_name="Kept")))
        return lambda: "Kept" in broker.groups.table
    if name == "clients":
        broker.clients.cast_nowait(heartbeat(Conn(), "c1", "Kept", trio.current_time()))
        await wait_for(lambda: broker.clients.get_consumer_group_info("Kept") is not None)
        return lambda: broker.clients.get_consumer_group_info("Kept") is not None
    mq = MessageQueue(topic="Kept", broker_name="b", queue_id=0)
    await broker.locks.call(LockBatch("G", (mq,), "c1"))
    return lambda: broker.locks.locked_by("G", mq) == "c1"


@pytest.mark.parametrize("name", ["topics", "offsets", "groups", "clients", "locks"])
async def test_a_crashed_table_actor_is_restarted_with_its_table(tmp_path: Path, name: str) -> None:
    async with boltmq.embedded(tmp_path, **SMALL_FILES) as cluster:
        broker = cluster.broker
        actor: TableActor[Any] = getattr(broker, name)
        kept = await fill(cluster, name)
        assert kept()
        actor.cast_nowait(Poison())
        await wait_for(
            lambda: actor.statistics().restarts == 1 and actor.status is ActorStatus.RUNNING
        )
        assert broker.supervisor is not None
        [child] = [c for c in broker.supervisor.statistics().children if c.name == name]
        assert child.restarts == 1 and child.last_error is not None
        assert "TypeError" in child.last_error and "Poison" in child.last_error
        assert kept()  # the table survived the restart
        # The broker's own record carries each table actor's, restart included.
        [record] = [t for t in broker.statistics().tables if t.name == actor.name]
        assert record.restarts == 1
        assert (await fill(cluster, name))()  # and the actor serves again
    if name == "offsets":
        saved = (tmp_path / "store" / "config" / "consumerOffset.json").read_bytes()
        assert b'"Kept@G":{0:5}' in saved


async def test_offsets_committed_after_a_restart_are_persisted(tmp_path: Path) -> None:
    async with boltmq.embedded(tmp_path, **SMALL_FILES) as cluster:
        offsets = cluster.broker.offsets
        offsets.cast_nowait(Poison())  # type: ignore[arg-type]
        await wait_for(
            lambda: offsets.statistics().restarts == 1 and offsets.status is ActorStatus.RUNNING
        )
        await offsets.call(CommitOffsets("After", "T", {3: 4}))
    saved = (tmp_path / "store" / "config" / "consumerOffset.json").read_bytes()
    assert b'"T@After":{3:4}' in saved


# -- topics created on the send path ---------------------------------------------------------


async def test_a_retry_send_past_its_limit_creates_both_topics(tmp_path: Path) -> None:
    async with boltmq.embedded(tmp_path, **SMALL_FILES) as cluster, RemotingClient() as client:
        address = cluster.broker_address
        request = send_request("%RETRY%Fresh", b"x", reconsume_times=3, max_reconsume_times=3)
        answer = await call(client, address, request)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        topics = cluster.broker.topics
        assert topics.select("%RETRY%Fresh") is not None
        dlq = topics.select("%DLQ%Fresh")
        assert dlq is not None and dlq.write_queue_nums == 1
        # Sent again: both exist, served inline.
        assert (await call(client, address, request)).code == ResponseCode.SUCCESS
