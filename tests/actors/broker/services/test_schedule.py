"""Delay levels and __STARTDELIVERTIME through a live broker, on the real clock: when a
delayed message arrives, that it survives a restart and arrives once, and the refusals."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from boltmq import EmbeddedCluster
from protocol import RemotingClient, ResponseCode
from protocol.message import BatchElement, MessageConst, decode_record, encode_batch
from protocol.names import SCHEDULE_TOPIC, TIMER_TOPIC
from tests.actors.broker.delays import (
    commit_log_offset,
    fast_delays_cluster,  # noqa: F401  # this module's `cluster`: delay levels of 1 s
    open_cluster,
    pull,
    send,
    send_request,
    wait_for_messages,
)
from tests.actors.broker.helpers import STORES


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def store_time_of(cluster: EmbeddedCluster, msg_id: str) -> int:
    record = cluster.broker.store.look_message_by_offset(commit_log_offset(msg_id))
    assert record is not None
    return decode_record(record).store_timestamp


@pytest.mark.parametrize("store", STORES)
async def test_level_two_arrives_after_five_seconds(
    tmp_path: Path, client: RemotingClient, store: str
) -> None:
    async with open_cluster(tmp_path, store) as cluster:  # RocketMQ's levels: level 2 is 5 s
        address = cluster.broker_address
        answer = await send(client, address, "DelayT", b"later", properties={"DELAY": "2"})
        assert answer.ext_fields is not None
        assert answer.ext_fields["queueId"] == "0"  # the queue asked for, as RocketMQ answers
        stored_at = store_time_of(cluster, answer.ext_fields["msgId"])
        assert await pull(client, address, "DelayT") == []
        with trio.fail_after(8):
            found = []
            while not found:  # long polls: answered when the message is re-put
                found = await pull(client, address, "DelayT", suspend_ms=2000)
        seen_at = now_ms()
        (delivered,) = found
        assert delivered.body == b"later"
        assert 5000 <= delivered.store_timestamp - stored_at <= 6500
        assert seen_at - stored_at >= 5000
        assert MessageConst.DELAY not in delivered.properties
        assert delivered.properties[MessageConst.REAL_TOPIC] == "DelayT"
        assert delivered.properties[MessageConst.REAL_QID] == "0"
        # The consume queue of the real topic carries the TAGS hash again (no TAGS: 0).
        assert cluster.broker.schedule.statistics().delivered == 1


async def test_due_messages_survive_restart_and_arrive_once(
    tmp_path: Path, client: RemotingClient
) -> None:
    levels = {"message_delay_level": "1s 3s"}
    async with open_cluster(tmp_path, **levels) as cluster:
        address = cluster.broker_address
        level_one = {"DELAY": "1"}
        for i in range(3):
            await send(client, address, "RestartT", f"early {i}".encode(), properties=level_one)
        with trio.fail_after(5):
            await wait_for_messages(client, address, "RestartT", 3)
        # Due during the restart (level 1) and after it (level 2): all still held at shutdown.
        for i in range(2):
            await send(client, address, "RestartT", f"due {i}".encode(), properties={"DELAY": "1"})
        for i in range(4):
            await send(client, address, "RestartT", f"late {i}".encode(), properties={"DELAY": "2"})
        assert cluster.broker.store.get_max_offset_in_queue("RestartT", 0) == 3
    delay_offsets = tmp_path / "store" / "config" / "delayOffset.json"
    assert delay_offsets.read_text().startswith('{"offsetTable":{1:3')  # fastjson form

    async with open_cluster(tmp_path, **levels) as cluster:
        address = cluster.broker_address
        with trio.fail_after(8):
            delivered = await wait_for_messages(client, address, "RestartT", 9)
            while any(cluster.broker.schedule.statistics().pending_by_level.values()):
                await trio.sleep(0.05)
        bodies = [m.body.decode() for m in delivered]
        assert sorted(bodies) == sorted(
            [f"early {i}" for i in range(3)]
            + [f"due {i}" for i in range(2)]
            + [f"late {i}" for i in range(4)]
        )
        assert cluster.broker.store.get_max_offset_in_queue("RestartT", 0) == 9
    assert delay_offsets.read_text() == '{"offsetTable":{1:5,2:4}}'

    # A third start has nothing left to deliver.
    async with open_cluster(tmp_path, **levels) as cluster:
        stats = cluster.broker.schedule.statistics()
        assert stats.pending_by_level == {1: 0, 2: 0}
        assert cluster.broker.store.get_max_offset_in_queue("RestartT", 0) == 9


@pytest.mark.parametrize("store", STORES)
async def test_start_deliver_time_held_until_due(
    tmp_path: Path, client: RemotingClient, store: str
) -> None:
    async with open_cluster(tmp_path, store) as cluster:
        address = cluster.broker_address
        start = now_ms()
        soon, later = start + 1500, start + 3500
        await send(client, address, "TimerT", b"soon", properties={"__STARTDELIVERTIME": str(soon)})
        await send(
            client, address, "TimerT", b"later", queue_id=1,
            properties={"__STARTDELIVERTIME": str(later), "TAGS": "TagT"},
        )  # fmt: skip
        assert cluster.broker.store.get_max_offset_in_queue(TIMER_TOPIC, 1) == 1
        assert cluster.broker.store.get_max_offset_in_queue(TIMER_TOPIC, 2) == 1
        for queue_id, due, body in ((0, soon, b"soon"), (1, later, b"later")):
            with trio.fail_after(6):
                (found,) = await wait_for_messages(client, address, "TimerT", 1, queue_id)
            assert found.body == body
            assert due <= found.store_timestamp <= due + 1500
            assert found.properties[MessageConst.START_DELIVER_TIME] == str(due)
            assert found.properties[MessageConst.REAL_TOPIC] == "TimerT"
        stats = cluster.broker.schedule.statistics()
        # soon: queue 1, then 0; later: queue 2, 1, then 0 (fewer when the loop runs late).
        assert 1 <= stats.timer_hops <= 3 and stats.delivered == 2 and stats.pending_timer == 0
        assert cluster.broker.topics.select(TIMER_TOPIC) is not None


async def test_start_deliver_time_limits(tmp_path: Path, client: RemotingClient) -> None:
    async with open_cluster(tmp_path, timer_max_delay_sec=60) as cluster:
        address = cluster.broker_address
        store = cluster.broker.store
        before = store.get_max_phy_offset()
        for value, words in ((str(now_ms() + 120_000), "timerMaxDelaySec=60"), ("soon", "epoch")):
            answer = await client.invoke(
                address, send_request("TooFarT", properties={"__STARTDELIVERTIME": value})
            )
            assert answer.code == ResponseCode.MESSAGE_ILLEGAL
            assert answer.remark is not None and words in answer.remark
        assert store.get_max_phy_offset() == before
        # A start time already past is an ordinary send.
        past = str(now_ms() - 1000)
        await send(client, address, "TooFarT", b"now", properties={"__STARTDELIVERTIME": past})
        assert store.get_max_offset_in_queue("TooFarT", 0) == 1


async def test_delay_level_clamped_and_bad_values(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    address = cluster.broker_address
    store = cluster.broker.store
    await send(client, address, "ClampT", b"c", properties={"DELAY": "99"})
    (held,) = await pull(client, address, SCHEDULE_TOPIC, queue_id=7)  # 8 levels configured
    assert held.properties[MessageConst.DELAY] == "8"
    await send(client, address, "ClampT", b"zero", properties={"DELAY": "0"})
    assert store.get_max_offset_in_queue("ClampT", 0) == 1

    before = store.get_max_phy_offset()
    answer = await client.invoke(address, send_request("ClampT", properties={"DELAY": "x"}))
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL
    assert answer.remark is not None and "DELAY" in answer.remark
    batch_body = encode_batch([BatchElement(0, b"a"), BatchElement(0, b"b")])
    answer = await client.invoke(
        address, send_request("ClampT", batch_body, batch=True, properties={"DELAY": "1"})
    )
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL
    assert answer.remark is not None and "batch" in answer.remark
    assert store.get_max_phy_offset() == before
