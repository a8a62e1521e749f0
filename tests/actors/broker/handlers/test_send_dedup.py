"""The dedup index in a live broker: a send with a seen key is answered with the original
result and appends nothing, in a batch per message; a broker restart keeps the keys; a
different key, or none, appends."""

from __future__ import annotations

from pathlib import Path

import trio

import boltmq
from actors.broker.services.dedup import DedupIndex, DedupService, StoredMessage
from boltmq import EmbeddedCluster
from protocol import RemotingClient, RemotingCommand, ResponseCode
from protocol.message import BatchElement, MessageConst, encode_batch, properties_to_string
from tests.actors.broker.helpers import SMALL_FILES, call, send_request

KEY = MessageConst.DEDUP_KEY


def answer_of(response: RemotingCommand) -> tuple[str, str, str]:
    assert response.code == ResponseCode.SUCCESS, response.remark
    assert response.ext_fields is not None
    ext = response.ext_fields
    return ext["msgId"], ext["queueId"], ext["queueOffset"]


def max_offset(cluster: EmbeddedCluster, topic: str, queue_id: int = 0) -> int:
    return cluster.broker.store.get_max_offset_in_queue(topic, queue_id)


def batch_request(topic: str, keys: list[str | None], queue_id: int = 0) -> RemotingCommand:
    elements = [
        BatchElement(0, f"body {key}".encode(), properties_to_string({KEY: key} if key else {}))
        for key in keys
    ]
    return send_request(topic, encode_batch(elements), queue_id=queue_id, batch=True)


async def test_a_duplicate_key_is_answered_with_the_original_and_kept_over_a_restart(
    tmp_path: Path, client: RemotingClient
) -> None:
    async with boltmq.embedded(tmp_path, **SMALL_FILES) as cluster:
        broker = cluster.broker_address
        first = answer_of(await call(client, broker, send_request(
            "Dedup", b"one", properties={KEY: "job-1:0:1"})))  # fmt: skip
        again = answer_of(await call(client, broker, send_request(
            "Dedup", b"one again", queue_id=0, properties={KEY: "job-1:0:1"})))  # fmt: skip
        assert again == first
        assert max_offset(cluster, "Dedup") == 1
        other = answer_of(await call(client, broker, send_request(
            "Dedup", b"two", properties={KEY: "job-1:0:2"})))  # fmt: skip
        plain = answer_of(await call(client, broker, send_request("Dedup", b"no key")))
        assert (other[2], plain[2]) == ("1", "2")
        # The same key on another topic is another message.
        answer_of(await call(client, broker, send_request(
            "DedupOther", b"one", properties={KEY: "job-1:0:1"})))  # fmt: skip
        assert max_offset(cluster, "DedupOther") == 1
    async with boltmq.embedded(tmp_path, **SMALL_FILES) as cluster:
        broker = cluster.broker_address
        stats = cluster.broker.dedup.index.statistics()
        assert stats.keys == 3 and stats.rebuilt_keys == 3
        again = answer_of(await call(client, broker, send_request(
            "Dedup", b"one, after a restart", properties={KEY: "job-1:0:1"})))  # fmt: skip
        assert again == first
        assert max_offset(cluster, "Dedup") == 3
        new = answer_of(await call(client, broker, send_request(
            "Dedup", b"three", properties={KEY: "job-1:0:3"})))  # fmt: skip
        assert new[2] == "3"


async def test_a_batch_is_deduplicated_per_message(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    broker = cluster.broker_address
    first = answer_of(await call(client, broker, batch_request("DedupBatch", ["a", "b"])))
    ids = first[0].split(",")
    assert len(ids) == 2 and first[2] == "0"
    # Sent again with two more: only c, the keyless one and d are stored; the answer lists
    # every message's id in the batch's order, the originals for a and b.
    mixed = answer_of(await call(client, broker, batch_request(
        "DedupBatch", ["a", "b", "c", None, "d", "c"])))  # fmt: skip
    mixed_ids = mixed[0].split(",")
    assert mixed_ids[:2] == ids and mixed[2] == "0"
    assert len(set(mixed_ids[2:5])) == 3 and mixed_ids[5] == mixed_ids[2]
    assert max_offset(cluster, "DedupBatch") == 5
    # Every message a duplicate: nothing appended, the originals answered.
    again = answer_of(await call(client, broker, batch_request("DedupBatch", ["c", "d", "a"])))
    assert again[0].split(",") == [mixed_ids[2], mixed_ids[4], ids[0]]
    assert max_offset(cluster, "DedupBatch") == 5


async def test_concurrent_sends_of_one_key_append_once(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    broker = cluster.broker_address
    answers: list[RemotingCommand] = []

    async def send() -> None:
        request = send_request("DedupRace", b"racing", properties={KEY: "the-key"})
        answers.append(await call(client, broker, request))

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(send)
    assert max_offset(cluster, "DedupRace") == 1
    ok = {answer_of(a) for a in answers if a.code == ResponseCode.SUCCESS}
    busy = [a for a in answers if a.code != ResponseCode.SUCCESS]
    assert len(ok) == 1, ok  # every SEND_OK names the one stored message
    assert all(a.code == ResponseCode.SYSTEM_BUSY and "being stored" in (a.remark or "")
               for a in busy)  # fmt: skip


async def test_dedup_max_keys_zero_stores_duplicates(tmp_path: Path,
                                                     client: RemotingClient) -> None:  # fmt: skip
    async with boltmq.embedded(tmp_path, dedup_max_keys=0, **SMALL_FILES) as cluster:
        for _ in range(2):
            answer_of(await call(client, cluster.broker_address, send_request(
                "DedupOff", b"x", properties={KEY: "k"})))  # fmt: skip
        assert max_offset(cluster, "DedupOff") == 2


async def test_the_rebuild_reads_only_the_window_over_several_commit_log_files(
    file_cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    broker = file_cluster.broker_address
    body = b"x" * 2000  # 256 KiB files: about 120 records each, so 600 span five files
    answers = []
    for n in range(600):
        request = send_request("DedupScan", body, properties={KEY: f"k{n}"})
        answers.append(answer_of(await call(client, broker, request)))
    store = file_cluster.broker.store
    assert store.get_max_phy_offset() > 4 * SMALL_FILES["mapped_file_size_commit_log"]
    # A window that starts at record 450's store time, on a clock standing at the last one's.
    times = [store.get_message_store_timestamp("DedupScan", 0, n) for n in range(600)]
    start, now = times[450], times[599]
    assert now > start  # 150 round trips take more than a millisecond
    inside = sum(1 for t in times if t >= start)
    index = DedupIndex(window_ms=now - start, max_keys=10_000, clock=lambda: now)
    scanned, found = DedupService(index, store).rebuild()
    assert found == inside
    assert scanned < 600  # whole files older than the window were skipped
    assert index.lookup("DedupScan", "k599") == StoredMessage(answers[599][0], 0, 599)
    assert index.lookup("DedupScan", f"k{600 - inside - 1}") is None


async def test_the_rebuild_decodes_only_records_that_hold_the_key(
    file_cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    broker = file_cluster.broker_address
    keyed = {}
    for n in range(300):
        properties = {KEY: f"k{n}"} if n % 3 == 0 else {"other": "v"}
        # One body that holds the key's name as a record's properties would: decoded, no key.
        body = f"{KEY}\x01not a key\x02".encode() if n == 1 else b"x" * 2000
        answer = answer_of(await call(client, broker, send_request(
            "DedupSparse", body, properties=properties)))  # fmt: skip
        if n % 3 == 0:
            keyed[f"k{n}"] = StoredMessage(answer[0], 0, n)
    now = file_cluster.broker.store.get_message_store_timestamp("DedupSparse", 0, 299)
    index = DedupIndex(window_ms=3_600_000, max_keys=10_000, clock=lambda: now)
    scanned, found = DedupService(index, file_cluster.broker.store).rebuild()
    assert found == len(keyed) == 100
    assert scanned == 101  # the keyed records and the one body; 199 others stepped over
    assert all(index.lookup("DedupSparse", key) == stored for key, stored in keyed.items())
    assert index.lookup("DedupSparse", "not a key") is None
