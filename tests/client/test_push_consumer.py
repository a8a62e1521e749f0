"""The push consumer against a real BoltMQ cluster, on trio and on asyncio.

Loopback only, the session's cluster process; every test has topics and groups of its own and
waits on conditions with deadlines (`wait_until`), never on a fixed sleep.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from client import (
    BlockingProducer,
    BlockingPushConsumer,
    ClientInstance,
    ConsumeConcurrentlyStatus,
    Message,
    MQClientError,
    Producer,
    PullConsumer,
    PushConsumer,
)
from client.rebalance import allocate_averagely
from protocol import names
from protocol.bodies import (
    ConsumeFromWhere,
    ConsumeMessageDirectlyResult,
    ConsumerRunningInfo,
    MessageModel,
    MessageQueue,
)
from protocol.client import RemotingClient
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    encode_header,
)
from protocol.message import MessageExt
from tests.support.waiting import wait_until

from .helpers import create_topic, over_both_transports, poll_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
OK = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER
Unique = Callable[[str], str]


class Inbox:
    """An async listener that records what it got and answers ``status``."""

    def __init__(self, status: Any = OK) -> None:
        self.status = status
        self.messages: list[MessageExt] = []

    async def __call__(self, messages: list[MessageExt]) -> Any:
        self.messages.extend(messages)
        return self.status

    def bodies(self) -> list[bytes]:
        return [m.body for m in self.messages]


def test_allocate_averagely_is_rocketmq_s_rule() -> None:
    queues = [MessageQueue(topic="T", broker_name="b", queue_id=i) for i in range(8)]
    cids = ["c3", "c1", "c2"]
    blocks = [[q.queue_id for q in allocate_averagely(queues, cids, c)] for c in ("c1", "c2", "c3")]
    assert blocks == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert allocate_averagely(queues, cids, "stranger") == []
    assert [q.queue_id for q in allocate_averagely(queues[:2], cids, "c3")] == []
    assert [q.queue_id for q in allocate_averagely(queues[:2], cids, "c2")] == [1]


@over_both_transports
async def test_three_consumers_share_eight_queues_then_two_take_over(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("PushTopic"), unique("CG")
    await create_topic(cluster, topic, 8)
    inbox = Inbox()

    def consumer() -> PushConsumer:
        push = PushConsumer(group, inbox, namesrv_addr=cluster.namesrv, consume_from_where=FIRST)
        push.subscribe(topic)
        return push

    consumers = [consumer(), consumer(), consumer()]

    def blocks(members: list[PushConsumer]) -> list[list[int]]:
        ordered = sorted(members, key=lambda c: c.instance.client_id)
        return [[q.queue_id for q in c.assignment() if q.topic == topic] for c in ordered]

    async with contextlib.AsyncExitStack() as stack:
        for push in consumers[:2]:
            await stack.enter_async_context(push)
        async with consumers[2]:
            # Every member rebalances when the broker tells it the group changed.
            await wait_until(lambda: blocks(consumers) == [[0, 1, 2], [3, 4, 5], [6, 7]])
            for push in consumers:
                cluster.assert_connected_over(push.instance)
        consumers.pop()  # the third left: the other two take its queues over
        await wait_until(lambda: blocks(consumers) == [[0, 1, 2, 3], [4, 5, 6, 7]])
        async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
            sent = {(await producer.send(Message(topic, f"m{i}".encode()))).msg_id
                    for i in range(40)}  # fmt: skip
        await wait_until(lambda: sent <= {m.msg_id for m in inbox.messages})
        assert {m.queue_id for m in inbox.messages} == set(range(8))


async def test_broadcasting_gives_every_consumer_every_message(
    cluster: Any, unique: Unique, anyio_backend: str, tmp_path: Path
) -> None:
    topic, group = unique("CastTopic"), unique("CG")
    await create_topic(cluster, topic, 4)
    inboxes = [Inbox(), Inbox()]
    async with contextlib.AsyncExitStack() as stack:
        for n, inbox in enumerate(inboxes):
            push = PushConsumer(group, inbox, namesrv_addr=cluster.namesrv, instance_name=f"b{n}",
                                message_model=MessageModel.BROADCASTING,
                                offset_store_dir=tmp_path)  # fmt: skip
            push.subscribe(topic)
            await stack.enter_async_context(push)
            assert len(push.assignment()) == 4  # all queues, no retry topic
        async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
            sent = sorted([(await producer.send(Message(topic, f"b{i}".encode()))).msg_id
                           for i in range(12)])  # fmt: skip
        for inbox in inboxes:
            await wait_until(lambda inbox=inbox: len(inbox.messages) >= 12)  # type: ignore[misc]
            assert sorted(m.msg_id for m in inbox.messages) == sent
    # Offsets went to a local file per consumer, written on close.
    files = sorted(tmp_path.glob(f"*/{group}/offsets.json"))
    assert len(files) == 2
    assert all(b'"offsetTable"' in f.read_bytes() for f in files)


async def test_tag_expression_delivers_only_those_tags(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("TagPush")
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        queue = (await producer.send(Message(topic, b"a0", tags="TagA"))).queue
        inbox = Inbox()
        push = PushConsumer(unique("CG"), inbox, namesrv_addr=cluster.namesrv,
                            consume_from_where=FIRST)  # fmt: skip
        push.subscribe(topic, "TagA || TagB")
        async with push:
            for i, tag in enumerate(["TagC", "TagB", "TagC", "TagA", "TagD", "TagB"], start=1):
                await producer.send(Message(topic, f"{tag[-1]}{i}".encode(), tags=tag),
                                    queue=queue)  # fmt: skip
            await producer.send(Message(topic, b"end", tags="TagA"), queue=queue)
            await wait_until(lambda: b"end" in inbox.bodies())
    assert sorted(inbox.bodies()) == sorted([b"a0", b"B2", b"A4", b"B6", b"end"])


async def test_unsubscribe_drops_the_topic_s_queues_and_stops_its_messages(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    kept, dropped = unique("KeptPush"), unique("DroppedPush")
    await create_topic(cluster, kept, 2)
    await create_topic(cluster, dropped, 2)
    inbox = Inbox()
    push = PushConsumer(unique("CG"), inbox, namesrv_addr=cluster.namesrv,
                        consume_from_where=FIRST)  # fmt: skip
    push.subscribe(kept)
    push.subscribe(dropped)

    def topics() -> set[str]:
        return {q.topic for q in push.assignment()}

    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer, push:
        await wait_until(lambda: {kept, dropped} <= topics())
        push.unsubscribe(dropped)
        await wait_until(lambda: dropped not in topics())
        assert kept in topics()
        await producer.send(Message(dropped, b"not for us"))
        await producer.send(Message(kept, b"for us"))
        await wait_until(lambda: b"for us" in inbox.bodies())
    assert inbox.bodies() == [b"for us"]


async def test_reconsume_later_comes_back_then_goes_to_the_dlq(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("RetryPush"), unique("CG")
    inbox = Inbox(LATER)
    # Delay level 1 (1 s) instead of the broker's 3 + reconsumeTimes (10 s and more).
    push = PushConsumer(group, inbox, namesrv_addr=cluster.namesrv, consume_from_where=FIRST,
                        max_reconsume_times=2, delay_level_when_next_consume=1)  # fmt: skip
    push.subscribe(topic)
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        sent = await producer.send(Message(topic, b"poison", tags="T", keys="k1"))
        async with push:
            await wait_until(lambda: push.statistics().sent_back >= 3, timeout=20)
            assert push.statistics().consumed_failed == 3
    got = inbox.messages[:3]
    assert [m.reconsume_times for m in got] == [0, 1, 2]
    assert {m.msg_id for m in got} == {sent.msg_id}
    assert {m.topic for m in got} == {topic}  # retries show the original topic
    assert {m.body for m in got} == {b"poison"}
    # The third failure is past maxReconsumeTimes: the broker stores it in %DLQ%<group>.
    async with PullConsumer(unique("CG"), namesrv_addr=cluster.namesrv,
                            consume_from_where=FIRST) as reader:  # fmt: skip
        dlq = names.dlq_topic(group)
        with anyio.fail_after(15):
            while True:
                with contextlib.suppress(Exception):
                    await reader.subscribe(dlq)
                    break
                await anyio.sleep(0.1)
        [dead] = await poll_until(reader, 1)
    assert dead.body == b"poison"
    assert dead.msg_id == sent.msg_id
    assert dead.reconsume_times == 3
    assert dead.keys == ["k1"]


@over_both_transports
async def test_restart_resumes_at_the_committed_offset(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("ResumePush"), unique("CG")
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        first = {(await producer.send(Message(topic, f"f{i}".encode()))).msg_id for i in range(10)}
        inbox = Inbox()
        push = PushConsumer(group, inbox, namesrv_addr=cluster.namesrv, consume_from_where=FIRST)
        push.subscribe(topic)
        async with push:
            await wait_until(lambda: len(inbox.messages) >= 10)
        assert {m.msg_id for m in inbox.messages} == first
        later = {(await producer.send(Message(topic, f"l{i}".encode()))).msg_id for i in range(5)}
        again = Inbox()
        second = PushConsumer(group, again, namesrv_addr=cluster.namesrv, consume_from_where=FIRST)
        second.subscribe(topic)
        async with second:
            await wait_until(lambda: len(again.messages) >= 5)
            await wait_until(lambda: second.statistics().cached_messages == 0)
    assert sorted(m.msg_id for m in again.messages) == sorted(later)


async def test_consume_from_last_offset_reads_a_fresh_queue_from_its_start(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    # A queue whose first message is still stored answers offset 0 to a new group, so even
    # CONSUME_FROM_LAST_OFFSET starts there (as RocketMQ does).
    topic = unique("LastPush")
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        early = await producer.send(Message(topic, b"early"))
        inbox = Inbox()
        push = PushConsumer(unique("CG"), inbox, namesrv_addr=cluster.namesrv)
        push.subscribe(topic)
        async with push:
            await wait_until(lambda: early.msg_id in {m.msg_id for m in inbox.messages})


@over_both_transports
async def test_running_info_and_consume_directly_through_the_broker(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("InfoPush"), unique("CG")
    inbox = Inbox()
    push = PushConsumer(group, inbox, namesrv_addr=cluster.namesrv, consume_from_where=FIRST)
    push.subscribe(topic, "TagA")
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        sent = await producer.send(Message(topic, b"direct", tags="TagA"))
        async with push, RemotingClient() as remoting:
            await wait_until(lambda: len(inbox.messages) >= 1)
            cluster.assert_connected_over(push.instance)
            client_id = push.instance.client_id
            header = GetConsumerRunningInfoRequestHeader(consumer_group=group, client_id=client_id)
            request = RemotingCommand.request(
                RequestCode.GET_CONSUMER_RUNNING_INFO, encode_header(header)
            )
            response = await remoting.invoke(cluster.broker, request, 5.0)
            assert response.code == ResponseCode.SUCCESS, response.remark
            info = ConsumerRunningInfo.from_json(response.body or b"")
            assert info.properties["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
            assert info.properties["PROP_CONSUMEORDERLY"] == "false"
            assert info.properties["PROP_THREADPOOL_CORE_SIZE"] == "20"
            assert int(info.properties["PROP_CONSUMER_START_TIMESTAMP"]) > 0
            subs = {s.topic: s.sub_string for s in info.subscription_set}
            assert subs == {topic: "TagA", names.retry_topic(group): "*"}
            assert sorted(info.mq_table, key=lambda q: (q.topic, q.queue_id)) == push.assignment()
            assert info.status_table[topic].consume_ok_tps > 0

            header2 = ConsumeMessageDirectlyResultRequestHeader(
                consumer_group=group, client_id=client_id, msg_id=sent.offset_msg_id
            )
            request = RemotingCommand.request(
                RequestCode.CONSUME_MESSAGE_DIRECTLY, encode_header(header2)
            )
            response = await remoting.invoke(cluster.broker, request, 5.0)
            assert response.code == ResponseCode.SUCCESS, response.remark
            result = ConsumeMessageDirectlyResult.from_json(response.body or b"")
            assert result.consume_result == "CR_SUCCESS"
            assert not result.order
            assert inbox.bodies() == [b"direct", b"direct"]

            header3 = GetConsumerRunningInfoRequestHeader(
                consumer_group="nobody", client_id=client_id
            )
            request = RemotingCommand.request(
                RequestCode.GET_CONSUMER_RUNNING_INFO, encode_header(header3)
            )
            response = await remoting.invoke(cluster.broker, request, 5.0)
            assert response.code == ResponseCode.CONSUMER_NOT_ONLINE


async def test_flow_control_stops_pulling_a_full_queue(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("FlowPush")
    release = anyio.Event()
    seen: list[bytes] = []

    async def slow(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        await release.wait()
        seen.extend(m.body for m in messages)
        return OK

    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        queue = (await producer.send(Message(topic, b"m0"))).queue
        for i in range(1, 60):
            await producer.send(Message(topic, f"m{i}".encode()), queue=queue)
    push = PushConsumer(unique("CG"), slow, namesrv_addr=cluster.namesrv, consume_from_where=FIRST,
                        pull_batch_size=4, pull_threshold_for_queue=10)  # fmt: skip
    push.subscribe(topic)
    async with push:
        await wait_until(lambda: push.statistics().flow_control_pauses > 0)
        # Over the threshold the pulls pause: at most one batch beyond it is cached.
        assert 10 < push.statistics().cached_messages <= 10 + 4
        release.set()
        await wait_until(lambda: len(seen) == 60)
    assert sorted(seen) == sorted(f"m{i}".encode() for i in range(60))


async def test_a_listener_exception_means_reconsume_later(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("RaisePush")
    calls: list[tuple[bytes, int]] = []

    def flaky(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:  # runs in a thread
        calls.extend((m.body, m.reconsume_times) for m in messages)
        if messages[0].reconsume_times == 0:
            raise RuntimeError("not yet")
        return OK

    push = PushConsumer(unique("CG"), flaky, namesrv_addr=cluster.namesrv,
                        consume_from_where=FIRST, delay_level_when_next_consume=1)  # fmt: skip
    push.subscribe(topic)
    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        await producer.send(Message(topic, b"x"))
        async with push:
            await wait_until(lambda: len(calls) >= 2, timeout=15)
            await wait_until(lambda: push.statistics().consumed_ok == 1)
    assert calls == [(b"x", 0), (b"x", 1)]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_blocking_push_consumer(cluster: Any, unique: Unique, backend: str) -> None:
    topic = unique("BlockingPush")
    got: list[bytes] = []
    arrived = threading.Event()

    def listener(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        got.extend(m.body for m in messages)
        if len(got) >= 3:
            arrived.set()
        return OK

    with BlockingProducer(unique("PG"), namesrv_addr=cluster.namesrv, backend=backend) as p:
        for i in range(3):
            p.send(Message(topic, f"p{i}".encode()))
    consumer = BlockingPushConsumer(unique("CG"), listener, namesrv_addr=cluster.namesrv,
                                    backend=backend, consume_from_where=FIRST)  # fmt: skip
    consumer.subscribe(topic)
    with consumer:
        assert {q.topic for q in consumer.assignment()} >= {topic}
        assert arrived.wait(10)
        deadline = time.monotonic() + 10
        while consumer.statistics().consumed_ok < 3:  # counted once the listener returned
            assert time.monotonic() < deadline
            time.sleep(0.01)
    assert sorted(got) == [b"p0", b"p1", b"p2"]


async def test_a_topic_created_after_start_is_consumed_without_waiting_a_rebalance_interval(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    # At start the topic has no route: the consumer looks again soon, backing off, not only
    # every rebalance interval (set far beyond the deadline here).
    topic = unique("Later")
    inbox = Inbox()
    push = PushConsumer(unique("CG"), inbox, namesrv_addr=cluster.namesrv,
                        consume_from_where=FIRST, rebalance_interval=300)  # fmt: skip
    push.subscribe(topic)
    async with push:
        assert push.assignment() == []
        await create_topic(cluster, topic, queues=2)
        await wait_until(lambda: sum(q.topic == topic for q in push.assignment()) == 2, timeout=15)
        async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
            sent = await producer.send(Message(topic, b"after"))
        await wait_until(lambda: sent.msg_id in {m.msg_id for m in inbox.messages})


class EarlyHeartbeatsLost(ClientInstance):
    """A client whose heartbeats do not reach the broker (as when they time out) until it
    first asks a broker for a group's members."""

    lost = 0
    asked = 0

    async def send_heartbeat_to_all_brokers(self) -> None:
        if self.consumers and not self.asked:
            self.lost += 1
            return
        await super().send_heartbeat_to_all_brokers()

    async def invoke_broker(
        self, address: str, request: RemotingCommand, timeout: float | None = None
    ) -> RemotingCommand:
        self.asked += request.code == RequestCode.GET_CONSUMER_LIST_BY_GROUP
        return await super().invoke_broker(address, request, timeout)


async def test_queues_are_assigned_at_start_even_when_the_first_heartbeats_were_lost(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    # The broker does not list a consumer whose heartbeat it has not seen; the first rebalance
    # must send one and ask again, so the queues are there when start returns.
    topic = unique("Lost")
    await create_topic(cluster, topic, queues=2)
    async with EarlyHeartbeatsLost(cluster.namesrv) as instance:
        push = PushConsumer(unique("CG"), Inbox(), instance=instance, consume_from_where=FIRST)
        push.subscribe(topic)
        async with push:
            assert instance.lost >= 1
            assert sum(q.topic == topic for q in push.assignment()) == 2


async def test_bad_settings_fail_clearly(cluster: Any, unique: Unique, anyio_backend: str) -> None:
    with pytest.raises(TypeError, match="callable"):
        PushConsumer("cg", "not a listener", namesrv_addr=cluster.namesrv)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="namesrv_addr"):
        PushConsumer("cg", Inbox())
    lonely = PushConsumer(unique("CG"), Inbox(), namesrv_addr=cluster.namesrv)
    with pytest.raises(MQClientError, match="subscribe"):
        async with lonely:
            pass
    with pytest.raises(ValueError, match="RETRY"):
        lonely.subscribe(names.retry_topic("someone_else"))
    group, topic = unique("CG"), unique("Twice")
    async with ClientInstance(cluster.namesrv) as shared:
        first = PushConsumer(group, Inbox(), instance=shared)
        first.subscribe(topic)
        second = PushConsumer(group, Inbox(), instance=shared)
        second.subscribe(topic)
        async with first:
            with pytest.raises(MQClientError, match="already runs"):
                async with second:
                    pass
            assert shared.call_targets[group] is first


async def test_listener_calls_run_concurrently_up_to_the_limit(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic = unique("ConcPush")
    gate = anyio.Event()
    running = 0
    most = 0

    async def listener(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await gate.wait()
        running -= 1
        return OK

    async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
        for i in range(10):
            await producer.send(Message(topic, f"c{i}".encode()))
    push = PushConsumer(unique("CG"), listener, namesrv_addr=cluster.namesrv,
                        consume_from_where=FIRST, consume_thread_max=4)  # fmt: skip
    push.subscribe(topic)
    async with push:
        # Four running, six waiting for a worker (the last pulls may land a moment later).
        await wait_until(lambda: running == 4 and push.statistics().in_flight == 10)
        assert running == 4
        gate.set()
        await wait_until(lambda: push.statistics().consumed_ok == 10)
    assert most == 4
