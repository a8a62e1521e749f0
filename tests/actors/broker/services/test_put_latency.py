"""putMessageDistributeTime in GET_BROKER_RUNTIME_INFO: RocketMQ's 13 put-latency buckets,
counting every put the store answered (a batch is one put)."""

from __future__ import annotations

import pytest
import trio

import boltmq
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.bodies import KVTable
from storage.results import PUT_LATENCY_BUCKETS, put_latency_bucket, put_latency_text
from tests.actors.broker.helpers import send_request

pytestmark = pytest.mark.timeout(60)


def test_buckets_are_rocketmqs() -> None:
    assert len(PUT_LATENCY_BUCKETS) == 13
    assert [PUT_LATENCY_BUCKETS[put_latency_bucket(ms)] for ms in (-3, 0, 1, 9, 10, 49, 50)] == [
        "[<=0ms]", "[<=0ms]", "[0~10ms]", "[0~10ms]", "[10~50ms]", "[10~50ms]", "[50~100ms]",
    ]  # fmt: skip
    assert PUT_LATENCY_BUCKETS[put_latency_bucket(999)] == "[500ms~1s]"
    assert PUT_LATENCY_BUCKETS[put_latency_bucket(1000)] == "[1~2s]"
    assert PUT_LATENCY_BUCKETS[put_latency_bucket(9999)] == "[5~10s]"
    assert PUT_LATENCY_BUCKETS[put_latency_bucket(10_000)] == "[10s~]"
    text = put_latency_text([3, 1] + [0] * 11)
    assert text.startswith("[<=0ms]:3 [0~10ms]:1 [10~50ms]:0 ")
    assert text.endswith("[5~10s]:0 [10s~]:0")


async def runtime(client: RemotingClient, broker: str) -> dict[str, str]:
    answer = await client.invoke(
        broker, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
    )
    assert answer.code == ResponseCode.SUCCESS and answer.body is not None
    return KVTable.from_json(answer.body).table


def counts(text: str) -> list[int]:
    pairs = [part.rsplit(":", 1) for part in text.split()]
    assert [name for name, _ in pairs] == list(PUT_LATENCY_BUCKETS)
    return [int(n) for _, n in pairs]


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
async def test_every_put_is_counted_once(flush: str) -> None:
    async with boltmq.embedded(flush_disk_type=flush) as cluster, RemotingClient() as client:
        broker = cluster.broker_address
        with trio.fail_after(30):
            before = counts((await runtime(client, broker))["putMessageDistributeTime"])
            for i in range(7):
                answer = await client.invoke(broker, send_request("LatencyTopic", b"x" * (i + 1)))
                assert answer.code == ResponseCode.SUCCESS, answer.remark
            after = counts((await runtime(client, broker))["putMessageDistributeTime"])
    assert sum(after) - sum(before) == 7
    assert all(a >= b for a, b in zip(after, before, strict=True))
