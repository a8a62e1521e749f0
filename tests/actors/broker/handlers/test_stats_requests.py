"""Statistics over the wire: the counts match the traffic the test sends, consume stats show
the lag, runtime info, topic stats, stats data, who consumes a topic and the time span."""

from __future__ import annotations

import pytest
import trio

from boltmq import EmbeddedCluster
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.bodies import (
    BrokerStatsData,
    ConsumeStats,
    GroupList,
    KVTable,
    MessageQueue,
    QueryConsumeTimeSpanBody,
    TopicStatsTable,
)
from protocol.headers import (
    GetConsumeStatsRequestHeader,
    GetTopicStatsInfoRequestHeader,
    QueryConsumeTimeSpanRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewBrokerStatsDataRequestHeader,
    encode_header,
)
from tests.actors.broker.helpers import heartbeat_request, pull_request, send_request

TOPIC = "StatsTopic"


def request(code: int, header: object) -> RemotingCommand:
    return RemotingCommand.request(code, encode_header(header))


async def traffic(cluster: EmbeddedCluster, client: RemotingClient) -> tuple[int, int]:
    """5 messages to queue 0 and 3 to queue 1; group CG pulls all and commits 3 on queue 0.

    Returns (bytes stored = bytes pulled, messages pulled)."""
    broker = cluster.broker_address
    for i in range(5):
        assert (await client.invoke(broker, send_request(TOPIC, b"x" * (10 + i)))).code == 0
    for _ in range(3):
        answer = await client.invoke(broker, send_request(TOPIC, b"y", queue_id=1))
        assert answer.code == 0
    pulled = 0
    size = 0
    for queue_id in (0, 1):
        answer = await client.invoke(broker, pull_request(TOPIC, queue_id=queue_id))
        assert answer.code == ResponseCode.SUCCESS and answer.body is not None
        size += len(answer.body)
        pulled += 5 if queue_id == 0 else 3
    commit = UpdateConsumerOffsetRequestHeader(
        consumer_group="CG", topic=TOPIC, queue_id=0, commit_offset=3
    )
    assert (
        await client.invoke(broker, request(RequestCode.UPDATE_CONSUMER_OFFSET, commit))
    ).code == 0
    return size, pulled


async def test_counts_match_the_traffic(cluster: EmbeddedCluster, client: RemotingClient) -> None:
    with trio.fail_after(10):
        size, pulled = await traffic(cluster, client)
        # A pull that finds nothing is not counted.
        empty = await client.invoke(cluster.broker_address, pull_request(TOPIC, 5))
        assert empty.code == ResponseCode.PULL_NOT_FOUND
    stats = cluster.broker.stats
    assert stats.topic_put[TOPIC] == [8, size, 8]
    assert stats.group_get[TOPIC] == {"CG": [pulled, size, 2]}
    assert stats.broker_put[0] == 8 and stats.broker_get[0] == 8


async def test_consume_stats_show_the_lag(cluster: EmbeddedCluster, client: RemotingClient) -> None:
    broker = cluster.broker
    with trio.fail_after(10):
        await traffic(cluster, client)
        broker.stats.sample()  # as the 10 s sampler would
        header = GetConsumeStatsRequestHeader(consumer_group="CG", topic=TOPIC)
        answer = await client.invoke(
            cluster.broker_address, request(RequestCode.GET_CONSUME_STATS, header)
        )
        # No topic: every topic the group has offsets for.
        every = await client.invoke(
            cluster.broker_address,
            request(
                RequestCode.GET_CONSUME_STATS, GetConsumeStatsRequestHeader(consumer_group="CG")
            ),
        )
    assert answer.code == ResponseCode.SUCCESS and answer.body is not None
    assert answer.body.startswith(b'{"consumeTps":')
    stats = ConsumeStats.from_json(answer.body)
    name = broker.config.broker_name
    table = {mq.queue_id: wrapper for mq, wrapper in stats.offset_table.items()}
    assert set(stats.offset_table) == {
        MessageQueue(topic=TOPIC, broker_name=name, queue_id=q) for q in range(4)
    }
    stored = broker.store.get_message_store_timestamp(TOPIC, 0, 2)
    assert (table[0].broker_offset, table[0].consumer_offset, table[0].last_timestamp) == (
        5,
        3,
        stored,
    )
    assert (table[1].broker_offset, table[1].consumer_offset, table[1].last_timestamp) == (3, 0, 0)
    assert table[2].broker_offset == 0
    # 8 messages pulled within the one sampled window of 10 s.
    assert stats.consume_tps == pytest.approx(0.8)
    assert every.body is not None
    assert ConsumeStats.from_json(every.body).offset_table == stats.offset_table


async def test_runtime_info(file_cluster: EmbeddedCluster, client: RemotingClient) -> None:
    with trio.fail_after(10):
        await traffic(file_cluster, client)
        answer = await client.invoke(
            file_cluster.broker_address,
            RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO),
        )
    assert answer.code == ResponseCode.SUCCESS and answer.body is not None
    table = KVTable.from_json(answer.body).table
    assert all(isinstance(value, str) for value in table.values())
    store = file_cluster.broker.store.statistics()
    assert table["brokerVersion"] == "409" and table["brokerVersionDesc"] == "V4_9_8"
    assert table["msgPutTotalTodayNow"] == "8" and table["msgGetTotalTodayNow"] == "8"
    assert table["msgPutTotalTodayMorning"] == "0" and table["msgGetTotalYesterdayMorning"] == "0"
    assert table["putMessageTimesTotal"] == str(store.put_messages)
    assert table["commitLogMaxOffset"] == str(store.commit_log_max_offset)
    assert table["runtime"].startswith("[ 0 days, 0 hours, ")
    assert table["commitLogDirCapacity"].startswith("Total : ")
    assert 0.0 <= float(table["commitLogDiskRatio"]) <= 1.0
    for key in ("bootTimestamp", "earliestMessageTimeStamp", "dispatchBehindBytes", "putTps",
                "getTransferedTps", "remainHowManyDataToFlush", "putMessageSizeTotal"):  # fmt: skip
        assert key in table


async def test_topic_stats(cluster: EmbeddedCluster, client: RemotingClient) -> None:
    broker = cluster.broker
    with trio.fail_after(10):
        await traffic(cluster, client)
        answer = await client.invoke(
            cluster.broker_address,
            request(RequestCode.GET_TOPIC_STATS_INFO, GetTopicStatsInfoRequestHeader(topic=TOPIC)),
        )
        unknown = await client.invoke(
            cluster.broker_address,
            request(RequestCode.GET_TOPIC_STATS_INFO, GetTopicStatsInfoRequestHeader(topic="Nope")),
        )
    assert answer.code == ResponseCode.SUCCESS and answer.body is not None
    table = {
        mq.queue_id: offset
        for mq, offset in TopicStatsTable.from_json(answer.body).offset_table.items()
    }
    assert sorted(table) == [0, 1, 2, 3]
    assert (table[0].min_offset, table[0].max_offset) == (0, 5)
    assert table[0].last_update_timestamp == broker.store.get_message_store_timestamp(TOPIC, 0, 4)
    assert (table[1].max_offset, table[2].max_offset, table[2].last_update_timestamp) == (3, 0, 0)
    assert unknown.code == ResponseCode.TOPIC_NOT_EXIST


async def test_view_broker_stats_data(cluster: EmbeddedCluster, client: RemotingClient) -> None:
    def view(name: str, key: str) -> RemotingCommand:
        header = ViewBrokerStatsDataRequestHeader(stats_name=name, stats_key=key)
        return request(RequestCode.VIEW_BROKER_STATS_DATA, header)

    with trio.fail_after(10):
        size, _ = await traffic(cluster, client)
        cluster.broker.stats.sample()
        puts = await client.invoke(cluster.broker_address, view("TOPIC_PUT_NUMS", TOPIC))
        bytes_got = await client.invoke(
            cluster.broker_address, view("GROUP_GET_SIZE", f"{TOPIC}@CG")
        )
        missing = await client.invoke(cluster.broker_address, view("TOPIC_PUT_NUMS", "Nope"))
    assert puts.code == ResponseCode.SUCCESS and puts.body is not None
    data = BrokerStatsData.from_json(puts.body)
    assert (data.stats_minute.sum, data.stats_minute.tps, data.stats_minute.avgpt) == (8, 0.8, 1.0)
    assert data.stats_hour.sum == 0  # the first 10-minute sample comes later
    assert (
        bytes_got.body is not None
        and BrokerStatsData.from_json(bytes_got.body).stats_minute.sum == size
    )
    assert missing.code == ResponseCode.SYSTEM_ERROR and "not exist" in (missing.remark or "")


async def test_who_consumes_and_time_span(cluster: EmbeddedCluster, client: RemotingClient) -> None:
    broker = cluster.broker
    with trio.fail_after(10):
        await traffic(cluster, client)
        heartbeat = await client.invoke(
            cluster.broker_address, heartbeat_request("c1", "Live", TOPIC)
        )
        assert heartbeat.code == 0
        who = await client.invoke(
            cluster.broker_address,
            request(
                RequestCode.QUERY_TOPIC_CONSUME_BY_WHO,
                QueryTopicConsumeByWhoRequestHeader(topic=TOPIC),
            ),
        )
        span = await client.invoke(
            cluster.broker_address,
            request(
                RequestCode.QUERY_CONSUME_TIME_SPAN,
                QueryConsumeTimeSpanRequestHeader(topic=TOPIC, group="CG"),
            ),
        )
    assert who.body is not None and GroupList.from_json(who.body).group_list == ["CG", "Live"]
    assert span.code == ResponseCode.SUCCESS and span.body is not None
    spans = {
        s.message_queue.queue_id: s
        for s in QueryConsumeTimeSpanBody.from_json(span.body).consume_time_span_set
    }
    store = broker.store
    first = spans[0]
    assert first.min_time_stamp == store.get_message_store_timestamp(TOPIC, 0, 0)
    assert first.max_time_stamp == store.get_message_store_timestamp(TOPIC, 0, 4)
    assert first.consume_time_stamp == store.get_message_store_timestamp(TOPIC, 0, 2)
    assert first.delay_time >= 0
    assert b"consumeTimeStampStr" in span.body
