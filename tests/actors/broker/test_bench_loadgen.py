"""The HA benchmark's load generator: its frames are the remoting client's, and what it counts
as stored is what the broker stored."""

from __future__ import annotations

import pytest
import trio

from bench.bench_produce_consume import _produce, _send, _send_fields
from bench.loadgen import SendFrames, produce
from boltmq import EmbeddedCluster
from protocol import RemotingClient, RequestCode
from protocol.frame import decode, encode
from storage._record import read_dispatch_request


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


def _uniq_keys(cluster: EmbeddedCluster, topic: str) -> list[str]:
    """The UNIQ_KEY of each message stored in ``topic`` ("" where it has none)."""
    store = cluster.broker.store
    found: list[str] = []
    for queue_id in range(8):
        offset = 0
        while True:
            got = store.get_message("BenchCheck", topic, queue_id, offset, 256)
            if not got.buffers:
                break
            found += [read_dispatch_request(record, 0).uniq_key for record in got.buffers]
            offset = got.next_begin_offset
            got.release()
    return found


@pytest.mark.parametrize("batch", [1, 32])
async def test_bench_broker_keys_have_the_store_index_every_message(
    cluster: EmbeddedCluster, batch: int
) -> None:
    """`python -m bench broker --keys`: each message a fresh UNIQ_KEY, found by the store's
    index; without it the messages carry none."""
    topic = f"BenchKeys{batch}"
    async with RemotingClient() as client:
        with trio.fail_after(30):
            await _produce(client, cluster.broker_address, topic, 0.2, 2, batch=batch)
            plain = len(_uniq_keys(cluster, topic))
            stored, _ = await _produce(
                client, cluster.broker_address, topic, 0.3, 2, batch=batch, keys=True
            )
    keys = _uniq_keys(cluster, topic)
    assert plain > 0 and stored > 0 and len(keys) == plain + stored
    assert [key for key in keys if key] and len(set(keys) - {""}) == stored
    assert sum(1 for key in keys if not key) == plain
    store = cluster.broker.store
    for key in [key for key in keys if key][:: max(stored // 50, 1)]:
        found = store.query_message(topic, key, 4, 0, 2**62)
        assert len(found.buffers) == 1
