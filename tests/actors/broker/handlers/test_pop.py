"""RocketMQ 5's pop codes through a live broker on either store: pop and receipt handles,
invisible times ending in retries, acks, changes of invisible time, batch acks, dead letters,
long polls, NOTIFICATION, QUERY_ASSIGNMENT and refusals.

Invisible times are 1-2 s; every wait for a message coming back has a deadline."""

from __future__ import annotations

import json
from pathlib import Path

import trio

import boltmq
from boltmq import EmbeddedCluster
from protocol import RemotingClient, ResponseCode
from protocol.message import MessageConst
from tests.actors.broker.delays import group_request, send, wait_for_messages
from tests.actors.broker.pop_helpers import (
    Popped,
    ack_request,
    assignment_request,
    batch_ack_request,
    change_request,
    new_handle,
    notification_request,
    pop,
    pop_request,
)
from tests.support.remoting import call
from tests.support.waiting import wait_until


async def send_all(client: RemotingClient, address: str, topic: str, count: int) -> None:
    for i in range(count):
        await send(client, address, topic, f"m{i}".encode(), queue_id=0)


async def pop_until(
    client: RemotingClient,
    address: str,
    topic: str,
    count: int,
    group: str = "CG_pop",
    **kwargs: object,
) -> list[Popped]:
    """Pop until ``count`` messages came (callers bound this with fail_after)."""
    found: list[Popped] = []
    while len(found) < count:
        found += await pop(client, address, topic, group, poll_ms=500, **kwargs)
    return found


async def test_pop_hands_out_messages_with_handles_and_hides_them(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    address = cluster.broker_address
    await send_all(client, address, "PopT", 3)
    answer = await call(client, address, pop_request("PopT", invisible_ms=60_000))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    ext = answer.ext_fields or {}
    assert ext["invisibleTime"] == "60000" and ext["reviveQid"] == "0"
    popped = await pop(client, address, "PopT")  # nothing left to hand out
    assert popped == []
    again = await pop(client, address, "PopT", "CG_other")  # another group has its own
    assert [p.message.body for p in again] == [b"m0", b"m1", b"m2"]
    handle = again[0].handle.split(" ")
    assert len(handle) == 8
    assert handle[4] == "0" and handle[5] == cluster.broker.config.broker_name
    assert [p.offset for p in again] == [0, 1, 2]
    assert all(p.message.topic == "PopT" and p.message.reconsume_times == 0 for p in again)


async def test_unacked_message_comes_back_and_acked_ones_never(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    address = cluster.broker_address
    await send_all(client, address, "PopBack", 3)
    first = await pop(client, address, "PopBack", invisible_ms=1000)
    assert len(first) == 3
    for done in first[:2]:
        answer = await call(client, address, ack_request("PopBack", done))
        assert answer.code == ResponseCode.SUCCESS, answer.remark
    with trio.fail_after(15):
        (back,) = await pop_until(client, address, "PopBack", 1, invisible_ms=60_000)
    assert back.message.body == b"m2"
    assert back.message.reconsume_times == 1
    assert back.message.topic == "PopBack"  # shown under the topic popped
    assert back.message.properties[MessageConst.RETRY_TOPIC] == "PopBack"
    assert back.handle.split(" ")[4] == "1"  # read from %RETRY%CG_pop_PopBack
    # A second ack of an acked message is refused; nothing else comes back.
    answer = await call(client, address, ack_request("PopBack", first[0]))
    assert answer.code == ResponseCode.NO_MESSAGE
    # A RocketMQ 5 front acks a retry under the retry topic's own name.
    answer = await call(client, address, ack_request("%RETRY%CG_pop_PopBack", back))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert await pop(client, address, "PopBack", poll_ms=2500) == []


async def test_change_invisible_time_gives_a_new_handle_and_retires_the_old(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    address = cluster.broker_address
    await send_all(client, address, "PopChange", 1)
    (popped,) = await pop(client, address, "PopChange", invisible_ms=1000)
    answer = await call(client, address, change_request("PopChange", popped, 60_000))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    changed = new_handle(popped, answer)
    assert changed.handle != popped.handle
    # Past the first invisible time the message stays away: the change extended it.
    assert await pop(client, address, "PopChange", poll_ms=2500) == []
    answer = await call(client, address, ack_request("PopChange", popped))
    assert answer.code == ResponseCode.NO_MESSAGE  # the old handle acks no more
    answer = await call(client, address, ack_request("PopChange", changed))
    assert answer.code == ResponseCode.SUCCESS, answer.remark


async def test_change_to_a_short_time_brings_the_message_back_sooner(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    address = cluster.broker_address
    await send_all(client, address, "PopShorter", 1)
    (popped,) = await pop(client, address, "PopShorter", invisible_ms=600_000)
    answer = await call(client, address, change_request("PopShorter", popped, 1000))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    with trio.fail_after(15):
        (back,) = await pop_until(client, address, "PopShorter", 1)
    assert back.message.body == b"m0" and back.message.reconsume_times == 1


async def test_batch_ack(cluster: EmbeddedCluster, client: RemotingClient) -> None:
    address = cluster.broker_address
    await send_all(client, address, "PopBatch", 4)
    popped = await pop(client, address, "PopBatch", invisible_ms=1000)
    assert len(popped) == 4
    answer = await call(client, address, batch_ack_request("PopBatch", popped[1:]))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    with trio.fail_after(15):
        (back,) = await pop_until(client, address, "PopBatch", 1)
    assert back.message.body == b"m0"
    # Acked twice: refused, naming the offsets.
    answer = await call(client, address, batch_ack_request("PopBatch", popped[1:2]))
    assert answer.code == ResponseCode.NO_MESSAGE


async def test_max_attempts_then_dead_letter(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    address = cluster.broker_address
    answer = await call(client, address, group_request("CG_dlq", retry_max_times=1))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    await send_all(client, address, "PopDlq", 1)
    deliveries = []
    with trio.fail_after(20):
        deliveries += await pop_until(client, address, "PopDlq", 1, "CG_dlq", invisible_ms=1000)
        deliveries += await pop_until(client, address, "PopDlq", 1, "CG_dlq", invisible_ms=1000)
        # retryMaxTimes 1: two deliveries, then the dead-letter queue.
        (dead,) = await wait_for_messages(client, address, "%DLQ%CG_dlq", 1)
    assert [d.message.reconsume_times for d in deliveries] == [0, 1]
    assert dead.body == b"m0" and dead.reconsume_times == 2
    assert dead.properties[MessageConst.RETRY_TOPIC] == "PopDlq"
    assert await pop(client, address, "PopDlq", "CG_dlq") == []


async def test_pop_waits_for_a_message_and_times_out_without_one(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    address = cluster.broker_address
    await send_all(client, address, "PopWait", 1)
    assert len(await pop(client, address, "PopWait")) == 1
    started = trio.current_time()
    answer = await call(client, address, pop_request("PopWait", poll_ms=700))
    assert answer.code == ResponseCode.POLLING_TIMEOUT
    assert trio.current_time() - started >= 0.6  # it did wait

    async def send_later() -> None:
        await trio.sleep(0.3)
        await send(client, address, "PopWait", b"late", queue_id=0)

    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send_later)
            popped = await pop(client, address, "PopWait", poll_ms=10_000)
    assert [p.message.body for p in popped] == [b"late"]


async def test_notification_answers_on_arrival(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    address = cluster.broker_address
    await send_all(client, address, "PopNote", 1)
    answer = await call(client, address, notification_request("PopNote"))
    assert answer.code == ResponseCode.SUCCESS and (answer.ext_fields or {})["hasMsg"] == "true"
    assert len(await pop(client, address, "PopNote")) == 1
    answer = await call(client, address, notification_request("PopNote", poll_ms=300))
    assert (answer.ext_fields or {})["hasMsg"] == "false"

    async def send_later() -> None:
        await trio.sleep(0.3)
        await send(client, address, "PopNote", b"late", queue_id=0)

    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send_later)
            answer = await call(client, address, notification_request("PopNote", poll_ms=10_000))
    assert (answer.ext_fields or {})["hasMsg"] == "true"


async def test_query_assignment_lists_the_readable_queues(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    address = cluster.broker_address
    await send_all(client, address, "PopAssign", 1)
    answer = await call(client, address, assignment_request("PopAssign"))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assignments = json.loads(answer.body or b"")["messageQueueAssignments"]
    queues = cluster.broker.topics.select("PopAssign")
    assert queues is not None
    assert sorted(a["messageQueue"]["queueId"] for a in assignments) == list(
        range(queues.read_queue_nums)
    )
    assert {a["mode"] for a in assignments} == {"POP"}
    assert {a["messageQueue"]["brokerName"] for a in assignments} == {
        cluster.broker.config.broker_name
    }
    answer = await call(client, address, assignment_request("NoSuchTopic"))
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST


async def test_tag_filter_on_pop(cluster: EmbeddedCluster, client: RemotingClient) -> None:
    address = cluster.broker_address
    for tag in ("TagA", "TagB", "TagA"):
        await send(client, address, "PopTags", tag.encode(), queue_id=0, properties={"TAGS": tag})
    popped = await pop(client, address, "PopTags", exp="TagA", exp_type="TAG")
    assert [p.message.body for p in popped] == [b"TagA", b"TagA"]


async def test_bad_input_is_refused_and_loses_nothing(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    address = cluster.broker_address
    answer = await call(client, address, pop_request("NoSuchTopic"))
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST
    await send_all(client, address, "PopBad", 1)
    for invisible in (0, -5, 13 * 3600 * 1000):
        answer = await call(client, address, pop_request("PopBad", invisible_ms=invisible))
        assert answer.code == ResponseCode.INVALID_PARAMETER, invisible
        assert "invisibleTime" in (answer.remark or "")
    answer = await call(client, address, pop_request("PopBad", max_msgs=33))
    assert answer.code == ResponseCode.INVALID_PARAMETER
    (popped,) = await pop(client, address, "PopBad", invisible_ms=60_000)
    for handle in ("", "1 2 3", "x 1 2 0 0 broker 0 0", "0 1 2 0 9 broker 0 0"):
        answer = await call(client, address, ack_request("PopBad", Popped(popped.message, handle)))
        assert answer.code in (ResponseCode.INVALID_PARAMETER, ResponseCode.SYSTEM_ERROR), handle
        assert answer.remark
    answer = await call(client, address, change_request("PopBad", popped, -1))
    assert answer.code == ResponseCode.INVALID_PARAMETER
    # Nothing was lost to the refusals: the message still acks with its handle.
    answer = await call(client, address, ack_request("PopBad", popped))
    assert answer.code == ResponseCode.SUCCESS, answer.remark


async def test_sql92_filter_on_pop(sql_cluster: EmbeddedCluster, client: RemotingClient) -> None:
    address = sql_cluster.broker_address
    for n in (1, 5, 9):
        await send(client, address, "PopSql", str(n).encode(), queue_id=0, properties={"n": str(n)})
    popped = await pop(client, address, "PopSql", exp="n > 3", exp_type="SQL92")
    assert [p.message.body for p in popped] == [b"5", b"9"]
    answer = await call(client, address, pop_request("PopSql", exp="n >", exp_type="SQL92"))
    assert answer.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED


async def test_fifo_pop_hands_out_a_queues_next_message_only_after_the_ack(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    address = cluster.broker_address
    await send_all(client, address, "PopFifo", 3)

    async def fifo(attempt: str, **kwargs: object) -> list[Popped]:
        return await pop(client, address, "PopFifo", queue_id=0, max_msgs=1, order=True,
                         attempt_id=attempt, **kwargs)  # fmt: skip

    (first,) = await fifo("a1")
    assert first.message.body == b"m0"
    assert first.handle.split(" ")[3] == "999"  # RocketMQ's FIFO revive queue id
    assert await fifo("a2") == []  # held until m0 is acked
    (again,) = await fifo("a1")  # the same attempt gets the same message, same handle
    assert again.handle == first.handle and again.message.body == b"m0"
    answer = await call(client, address, ack_request("PopFifo", first))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    (second,) = await fifo("a3", invisible_ms=1000)
    assert second.message.body == b"m1"
    # Not acked: past its invisible time the same message comes back first, counted.
    with trio.fail_after(15):
        back: list[Popped] = []
        while not back:
            back = await fifo("a4", poll_ms=300)
    assert back[0].message.body == b"m1" and back[0].message.reconsume_times == 1
    answer = await call(client, address, ack_request("PopFifo", back[0]))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    (third,) = await fifo("a5")
    assert third.message.body == b"m2"


async def test_fifo_message_past_max_attempts_goes_to_the_dlq_and_the_queue_moves_on(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    address = cluster.broker_address
    answer = await call(client, address, group_request("CG_fifo_dlq", retry_max_times=1))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    await send_all(client, address, "PopFifoDlq", 2)
    bodies: list[tuple[bytes, int]] = []
    with trio.fail_after(20):
        while len(bodies) < 3:
            got = await pop(
                client, address, "PopFifoDlq", "CG_fifo_dlq", queue_id=0, max_msgs=1,
                order=True, invisible_ms=1000, poll_ms=300,
            )  # fmt: skip
            bodies += [(p.message.body, p.message.reconsume_times) for p in got]
        (dead,) = await wait_for_messages(client, address, "%DLQ%CG_fifo_dlq", 1)
    # Two deliveries of m0 (retryMaxTimes 1), then the queue goes on with m1.
    assert bodies == [(b"m0", 0), (b"m0", 1), (b"m1", 0)]
    assert dead.body == b"m0" and dead.reconsume_times == 2


async def test_many_in_flight_all_come_back_once(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    address = cluster.broker_address
    for i in range(120):
        await send(client, address, "PopMany", f"m{i}".encode(), queue_id=i % 4)
    first: list[Popped] = []
    with trio.fail_after(20):
        while len(first) < 120:
            first += await pop(client, address, "PopMany", max_msgs=16, invisible_ms=1000)
    back: list[Popped] = []
    with trio.fail_after(30):
        while len(back) < 120:
            back += await pop(client, address, "PopMany", poll_ms=300, max_msgs=32)
    assert sorted(p.message.body for p in back) == sorted(p.message.body for p in first)
    assert {p.message.reconsume_times for p in back} == {1}


async def test_pops_past_the_hold_bound_answer_polling_full(
    tmp_path: Path, client: RemotingClient
) -> None:
    async with boltmq.embedded(tmp_path, store="memory", max_held_pulls=1) as cluster:
        address = cluster.broker_address
        await send_all(client, address, "PopFull", 1)
        assert len(await pop(client, address, "PopFull")) == 1
        held: list[Popped] = []

        async def hold_one() -> None:
            held.extend(await pop(client, address, "PopFull", poll_ms=20_000))

        with trio.fail_after(15):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(hold_one)
                await wait_until(lambda: cluster.broker.pull_hold.held == 1, 10, "a held pop")
                answer = await call(client, address, pop_request("PopFull", poll_ms=5000))
                assert answer.code == ResponseCode.POLLING_FULL
                answer = await call(client, address, notification_request("PopFull", poll_ms=5000))
                assert (answer.ext_fields or {})["pollingFull"] == "true"
                await send(client, address, "PopFull", b"late", queue_id=0)
        assert [p.message.body for p in held] == [b"late"]


async def test_a_changed_handle_with_the_pops_start_offset_still_acks(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    address = cluster.broker_address
    await send_all(client, address, "PopChangeStart", 2)
    popped = await pop(client, address, "PopChangeStart", queue_id=0)
    assert [p.offset for p in popped] == [0, 1]
    answer = await call(client, address, change_request("PopChangeStart", popped[1], 60_000))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    # RocketMQ's proxy (local mode) keeps the pop's start offset as the first field.
    fields = new_handle(popped[1], answer).handle.split(" ")
    fields[0] = popped[1].handle.split(" ")[0]
    assert fields[0] == "0"
    kept = Popped(popped[1].message, " ".join(fields))
    answer = await call(client, address, ack_request("PopChangeStart", kept))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
