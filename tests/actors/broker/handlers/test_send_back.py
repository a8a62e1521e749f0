"""CONSUMER_SEND_MSG_BACK through a live broker: retry level, reconsume count and properties,
the DLQ after the last retry or on a negative level, and refusals that store nothing."""

from __future__ import annotations

from pathlib import Path

import trio

from boltmq import EmbeddedCluster
from protocol import RemotingClient, ResponseCode
from protocol.message import MessageConst
from protocol.names import SCHEDULE_TOPIC
from tests.actors.broker.delays import (
    commit_log_offset,
    fast_delays_cluster,  # noqa: F401  # this module's `cluster`: delay levels of 1 s
    group_request,
    open_cluster,
    pull,
    send,
    send_back_request,
    wait_for_messages,
)
from tests.support.remoting import call


async def stored_offset(client: RemotingClient, address: str, topic: str, body: bytes) -> int:
    answer = await send(client, address, topic, body, properties={"TAGS": "TagA", "KEYS": "k1"})
    assert answer.ext_fields is not None
    return commit_log_offset(answer.ext_fields["msgId"])


def max_offset(cluster: EmbeddedCluster, topic: str, queue_id: int = 0) -> int:
    return cluster.broker.store.get_max_offset_in_queue(topic, queue_id)


async def test_send_back_goes_to_retry_with_level_and_count(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    address = cluster.broker_address
    offset = await stored_offset(client, address, "RetryT", b"first try")
    answer = await call(client, address, send_back_request(offset, "CG_retry"))
    assert answer.code == ResponseCode.SUCCESS, answer.remark

    # Stored first in the schedule topic at level 3 + reconsumeTimes(0) = 3, i.e. queue 2.
    scheduled = await pull(client, address, SCHEDULE_TOPIC, queue_id=2)
    assert len(scheduled) == 1
    held = scheduled[0]
    assert held.properties[MessageConst.DELAY] == "3"
    assert held.properties[MessageConst.REAL_TOPIC] == "%RETRY%CG_retry"
    assert held.reconsume_times == 1

    with trio.fail_after(5):
        (retry,) = await wait_for_messages(client, address, "%RETRY%CG_retry", 1)
    assert retry.body == b"first try"
    assert retry.reconsume_times == 1
    assert retry.flag == 7
    assert retry.born_timestamp == 1_700_000_000_000
    props = retry.properties
    assert props[MessageConst.RETRY_TOPIC] == "RetryT"
    assert props[MessageConst.TAGS] == "TagA" and props[MessageConst.KEYS] == "k1"
    assert MessageConst.DELAY not in props
    assert props[MessageConst.REAL_TOPIC] == "%RETRY%CG_retry"
    assert props[MessageConst.REAL_QID] == "0"
    original_id = props[MessageConst.ORIGIN_MESSAGE_ID]
    assert commit_log_offset(original_id) == offset

    # Second failure: from the retry message, level 3 + 1 = 4, count 2, same RETRY_TOPIC and
    # ORIGIN_MESSAGE_ID (the first message's id, not the retry's).
    answer = await call(client, address, send_back_request(retry.commit_log_offset, "CG_retry"))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    (held,) = await pull(client, address, SCHEDULE_TOPIC, queue_id=3)
    assert held.properties[MessageConst.DELAY] == "4"
    with trio.fail_after(5):
        retries = await wait_for_messages(client, address, "%RETRY%CG_retry", 2)
    again = retries[1]
    assert again.reconsume_times == 2
    assert again.properties[MessageConst.RETRY_TOPIC] == "RetryT"
    assert again.properties[MessageConst.ORIGIN_MESSAGE_ID] == original_id


async def test_requested_delay_level_wins(cluster: EmbeddedCluster, client: RemotingClient) -> None:
    address = cluster.broker_address
    offset = await stored_offset(client, address, "LevelT", b"x")
    answer = await call(client, address, send_back_request(offset, "CG_level", delay_level=6))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    (held,) = await pull(client, address, SCHEDULE_TOPIC, queue_id=5)
    assert held.properties[MessageConst.DELAY] == "6"
    assert held.reconsume_times == 1


async def test_dead_letter_after_group_retry_max_times(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    address = cluster.broker_address
    answer = await call(client, address, group_request("CG_dlq", retry_max_times=1))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    offset = await stored_offset(client, address, "DlqT", b"poison")
    assert (await call(client, address, send_back_request(offset, "CG_dlq"))).code == 0
    with trio.fail_after(5):
        (retry,) = await wait_for_messages(client, address, "%RETRY%CG_dlq", 1)
    assert retry.reconsume_times == 1
    # reconsumeTimes 1 >= retryMaxTimes 1: straight to the DLQ, no delay, count 2.
    answer = await call(client, address, send_back_request(retry.commit_log_offset, "CG_dlq"))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    (dead,) = await pull(client, address, "%DLQ%CG_dlq")
    assert dead.body == b"poison"
    assert dead.reconsume_times == 2
    assert MessageConst.DELAY not in dead.properties
    assert dead.properties[MessageConst.RETRY_TOPIC] == "DlqT"
    assert commit_log_offset(dead.properties[MessageConst.ORIGIN_MESSAGE_ID]) == offset
    assert max_offset(cluster, "%RETRY%CG_dlq") == 1
    topic = cluster.broker.topics.select("%DLQ%CG_dlq")
    assert topic is not None and topic.write_queue_nums == 1 and topic.perm == 6


async def test_header_max_reconsume_times_needs_client_version(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    address = cluster.broker_address
    offset = await stored_offset(client, address, "MaxT", b"m")
    # A C++ client (version 63) sends maxReconsumeTimes, but brokers honour it from 121 on.
    old = send_back_request(offset, "CG_max", max_reconsume_times=0, version=63)
    assert (await call(client, address, old)).code == ResponseCode.SUCCESS
    assert max_offset(cluster, "%DLQ%CG_max") == 0
    assert len(await pull(client, address, SCHEDULE_TOPIC, queue_id=2)) == 1
    new = send_back_request(offset, "CG_max", max_reconsume_times=0, version=401)
    assert (await call(client, address, new)).code == ResponseCode.SUCCESS
    (dead,) = await pull(client, address, "%DLQ%CG_max")
    assert dead.body == b"m" and dead.reconsume_times == 1


async def test_negative_level_goes_to_dlq_at_once(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    address = cluster.broker_address
    offset = await stored_offset(client, address, "NegT", b"n")
    answer = await call(client, address, send_back_request(offset, "CG_neg", delay_level=-1))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    (dead,) = await pull(client, address, "%DLQ%CG_neg")
    assert dead.body == b"n" and dead.reconsume_times == 1
    assert max_offset(cluster, "%RETRY%CG_neg") == 0
    assert all(max_offset(cluster, SCHEDULE_TOPIC, q) == 0 for q in range(8))


async def test_unknown_offset_refused_and_nothing_stored(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    address = cluster.broker_address
    await stored_offset(client, address, "BadT", b"b")
    before = cluster.broker.store.get_max_phy_offset()
    for bad in (before + 4096, before, -5, 3):
        answer = await call(client, address, send_back_request(bad, "CG_bad"))
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert answer.remark is not None and f"offset {bad}" in answer.remark
    assert cluster.broker.store.get_max_phy_offset() == before
    assert max_offset(cluster, "%RETRY%CG_bad") == 0


async def test_unknown_group_refused_without_auto_create(
    tmp_path: Path, client: RemotingClient
) -> None:
    async with open_cluster(tmp_path, auto_create_subscription_group=False) as cluster:
        address = cluster.broker_address
        offset = await stored_offset(client, address, "NoGroupT", b"g")
        before = cluster.broker.store.get_max_phy_offset()
        answer = await call(client, address, send_back_request(offset, "CG_missing"))
        assert answer.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        assert answer.remark is not None and "CG_missing" in answer.remark
        assert cluster.broker.store.get_max_phy_offset() == before
        assert cluster.broker.topics.select("%RETRY%CG_missing") is None
        assert "CG_missing" not in cluster.broker.groups.table

        # Created by an admin, the same request is taken.
        assert (await call(client, address, group_request("CG_missing"))).code == 0
        answer = await call(client, address, send_back_request(offset, "CG_missing"))
        assert answer.code == ResponseCode.SUCCESS, answer.remark


async def test_group_without_retry_queues_drops(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    address = cluster.broker_address
    assert (await call(client, address, group_request("CG_none", retry_queue_nums=0))).code == 0
    offset = await stored_offset(client, address, "NoneT", b"z")
    before = cluster.broker.store.get_max_phy_offset()
    answer = await call(client, address, send_back_request(offset, "CG_none"))
    assert answer.code == ResponseCode.SUCCESS
    assert cluster.broker.store.get_max_phy_offset() == before
