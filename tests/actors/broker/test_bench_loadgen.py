"""The HA benchmark's load generator: its frames are the remoting client's, and what it counts
as stored is what the broker stored."""

from __future__ import annotations

import pytest
import trio

from bench.bench_produce_consume import _send, _send_fields
from bench.loadgen import SendFrames, produce
from boltmq import EmbeddedCluster
from protocol import RequestCode
from protocol.frame import decode, encode


def test_frames_decode_as_the_remoting_client_encodes_them() -> None:
    frame = SendFrames("TopicLoad", 4, b"payload").frame(3, 77, b"1700000000000")
    mine = decode(frame)
    client = _send(_send_fields("TopicLoad", 3), b"payload")
    assert client.ext_fields is not None
    client.ext_fields["g"] = "1700000000000"
    client.opaque = 77
    assert frame == encode(client)
    assert mine.code == RequestCode.SEND_MESSAGE_V2
    assert (mine.opaque, mine.ext_fields, mine.body) == (77, client.ext_fields, b"payload")


async def test_stored_count_matches_the_broker(cluster: EmbeddedCluster) -> None:
    with trio.fail_after(20):
        stored, latencies = await produce(
            cluster.broker_address, "TopicLoad", 0.3, 8, 4, b"x" * 100
        )
    assert stored == len(latencies) > 0
    store = cluster.broker.store
    assert sum(store.get_max_offset_in_queue("TopicLoad", q) for q in range(4)) == stored


async def test_a_refused_send_stops_it(cluster: EmbeddedCluster) -> None:
    with trio.fail_after(20), pytest.raises(RuntimeError, match="send failed"):
        await produce(cluster.broker_address, "Bad Topic!", 0.3, 2, 1, b"x")
