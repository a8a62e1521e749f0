"""RocketMQ 5's pop codes through a live broker on either store: pop and receipt handles,
invisible times ending in retries, acks, changes of invisible time, batch acks, dead letters,
long polls, NOTIFICATION, QUERY_ASSIGNMENT and refusals.

Invisible times are 1-2 s; every wait for a message coming back has a deadline."""

from __future__ import annotations

import trio

from boltmq import EmbeddedCluster
from protocol import RemotingClient, ResponseCode
from protocol.message import MessageConst
from tests.actors.broker.delays import send
from tests.actors.broker.pop_helpers import (
    Popped,
    ack_request,
    pop,
    pop_request,
)
from tests.support.remoting import call


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
    answer = await call(client, address, ack_request("PopBack", back))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert await pop(client, address, "PopBack", poll_ms=2500) == []
