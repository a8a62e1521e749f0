"""The admin client against a real BoltMQ cluster, on trio and on asyncio."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from client import Admin, Message, MQClientError, Producer, PullConsumer
from protocol.bodies import ConsumeFromWhere, SubscriptionGroupConfig
from protocol.codes import ResponseCode

from .helpers import over_both_transports, poll_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
Unique = Callable[[str], str]


async def wait_route(admin: Admin, topic: str) -> Any:
    """The broker registers a new topic with the registry just after answering."""
    with anyio.fail_after(10):
        while True:
            try:
                return await admin.route(topic)
            except MQClientError as exc:
                assert exc.code == ResponseCode.TOPIC_NOT_EXIST
                await anyio.sleep(0.05)


async def test_body_errors_propagate_unwrapped(cluster: Any, anyio_backend: str) -> None:
    with pytest.raises(MQClientError) as refused:
        async with Admin(namesrv_addr=cluster.namesrv) as admin:
            await admin.route("NoSuchTopicAnywhere")
    assert refused.value.code == ResponseCode.TOPIC_NOT_EXIST


@over_both_transports
async def test_cluster_info_and_masters(cluster: Any, anyio_backend: str) -> None:
    async with Admin(namesrv_addr=cluster.namesrv) as admin:
        info = await admin.cluster_info()
        masters = await admin.masters()
    assert masters == {cluster.found["broker_name"]: cluster.broker}
    [(cluster_name, names)] = info.cluster_addr_table.items()
    assert names == [cluster.found["broker_name"]]
    async with Admin(namesrv_addr=cluster.namesrv) as admin:
        assert await admin.masters(cluster_name) == masters
        with pytest.raises(MQClientError):
            await admin.masters("NoSuchCluster")


async def test_topic_create_stats_lag_delete(
    cluster: Any, unique: Unique, anyio_backend: str
) -> None:
    topic, group = unique("AdminTopic"), unique("CG")
    async with Admin(namesrv_addr=cluster.namesrv) as admin:
        [cluster_name] = (await admin.cluster_info()).cluster_addr_table
        assert await admin.create_topic(topic, cluster=cluster_name, queue_nums=6) == [
            cluster.broker
        ]
        route = await wait_route(admin, topic)
        assert [(q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas] == [(6, 6)]
        async with Producer(unique("PG"), namesrv_addr=cluster.namesrv) as producer:
            assert len(await producer.queues(topic)) == 6
            for i in range(9):
                await producer.send(Message(topic, f"s{i}".encode()))
        stats = await admin.topic_stats(topic)
        assert len(stats.offset_table) == 6
        assert sum(o.max_offset - o.min_offset for o in stats.offset_table.values()) == 9

        async with PullConsumer(group, namesrv_addr=cluster.namesrv, consume_from_where=FIRST,
                                auto_commit=False) as consumer:  # fmt: skip
            queues = await consumer.subscribe(topic)
            got = await poll_until(consumer, 9)
            # Commit all but the messages of the first queue: those are the lag.
            behind = sum(1 for m in got if m.queue_id == queues[0].queue_id)
            offsets = {q: consumer.position(q) or 0 for q in queues}
            offsets[queues[0]] = 0
            await consumer.commit(offsets)
            consume = await admin.consume_stats(group, topic)
            assert consume.lag == behind
            assert {mq.queue_id for mq in consume.offset_table} == set(range(6))
            connections = await admin.consumer_connections(group)
            assert consumer.instance.client_id in {c.client_id for c in connections.connection_set}

            # Reset to the beginning: every queue of the group back to 0.
            table = await admin.reset_offset_by_time(group, topic, 0)
            assert set(table.values()) == {0}
            assert [await consumer.committed(q) for q in queues] == [0] * 6

        await admin.delete_topic(topic, cluster=cluster_name)
        with pytest.raises(MQClientError) as refused:
            await admin.route(topic)
        assert refused.value.code == ResponseCode.TOPIC_NOT_EXIST
        with pytest.raises(MQClientError):
            await admin.topic_stats(topic)


async def test_group_create_and_delete(cluster: Any, unique: Unique, anyio_backend: str) -> None:
    group = unique("AdminGroup")
    async with Admin(namesrv_addr=cluster.namesrv) as admin:
        config = SubscriptionGroupConfig(group_name=group, retry_max_times=3)
        assert await admin.create_group(config) == [cluster.broker]
        await admin.delete_group(group)
        with anyio.fail_after(5), pytest.raises(MQClientError) as refused:
            await admin.consumer_connections(group)
        assert refused.value.code == ResponseCode.CONSUMER_NOT_ONLINE
