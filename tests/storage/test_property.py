"""Property: any interleaving of puts, batch puts, gets and restarts reads back exactly what
was put, in order, with the right queue and commit-log offsets (64 KiB commit-log files, so
many records and batches cross file ends)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.message import decode_record
from storage import (
    GetMessageStatus,
    MessageBatch,
    MessageExtBrokerInner,
    MessageStoreConfig,
    PutMessageStatus,
    open_message_store,
)

QUEUES = 3
CQ_ENTRIES = 16

put_op = st.tuples(st.just("put"), st.integers(0, QUEUES - 1), st.integers(0, 20_000))
batch_op = st.tuples(
    st.just("batch"),
    st.integers(0, QUEUES - 1),
    st.lists(st.integers(0, 6000), min_size=1, max_size=6),
)
get_op = st.tuples(
    st.just("get"), st.integers(0, QUEUES - 1), st.integers(0, 40), st.integers(1, 40)
)
restart_op = st.tuples(st.just("restart"))
operations = st.lists(
    st.one_of(put_op, put_op, batch_op, get_op, get_op, restart_op), min_size=1, max_size=40
)


def body_for(queue_id: int, n: int, size: int) -> bytes:
    stamp = f"{queue_id}:{n}:".encode()
    return (stamp * (size // len(stamp) + 1))[:size] if size >= len(stamp) else stamp


async def run_ops(root: Path, ops: list[tuple[object, ...]]) -> None:
    config = MessageStoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue_entries=CQ_ENTRIES,
        max_hash_slot_num=16,
        max_index_num=64,
    )
    model: list[list[tuple[bytes, int]]] = [[] for _ in range(QUEUES)]  # (body, phys)
    index = 0
    while index < len(ops):
        async with open_message_store(config) as store:
            while index < len(ops):
                op = ops[index]
                index += 1
                if op[0] == "restart":
                    break
                if op[0] == "put":
                    _, q, size = op
                    assert isinstance(q, int) and isinstance(size, int)
                    body = body_for(q, len(model[q]), size)
                    result = await store.put_message(
                        MessageExtBrokerInner(topic="P", body=body, queue_id=q)
                    )
                    assert result.status is PutMessageStatus.PUT_OK
                    assert result.queue_offset == len(model[q])
                    model[q].append((body, result.wrote_offset))
                elif op[0] == "batch":
                    _, q, sizes = op
                    assert isinstance(q, int) and isinstance(sizes, list)
                    bodies = [body_for(q, len(model[q]) + i, s) for i, s in enumerate(sizes)]
                    result = await store.put_messages(
                        MessageBatch(
                            "P", q, [(0, b, f"KEYS\x01k{i}") for i, b in enumerate(bodies)]
                        )
                    )
                    assert result.status is PutMessageStatus.PUT_OK
                    assert result.queue_offset == len(model[q])
                    file_size = config.mapped_file_size_commit_log
                    last = result.wrote_offset + result.wrote_bytes - 1
                    assert result.wrote_offset // file_size == last // file_size
                    offsets = [int(m[-16:], 16) for m in result.msg_ids]
                    model[q].extend(zip(bodies, offsets, strict=True))
                else:
                    _, q, offset, max_nums = op
                    assert isinstance(q, int) and isinstance(offset, int)
                    assert isinstance(max_nums, int)
                    check_get(
                        store.get_message("g", "P", q, offset, max_nums), model[q], offset, max_nums
                    )
            # Everything is still there, read back in full.
            for q in range(QUEUES):
                offset = 0
                while offset < len(model[q]):
                    got = store.get_message("g", "P", q, offset, 32)
                    check_get(got, model[q], offset, 32)
                    offset = got.next_begin_offset


def check_get(got: object, expected: list[tuple[bytes, int]], offset: int, max_nums: int) -> None:
    from storage import GetMessageResult

    assert isinstance(got, GetMessageResult)
    if not expected:
        assert got.status in (
            GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
            GetMessageStatus.NO_MESSAGE_IN_QUEUE,
        )
        return
    if offset == len(expected):
        assert got.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        return
    if offset > len(expected):
        assert got.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY
        assert got.next_begin_offset == len(expected)
        return
    assert got.status is GetMessageStatus.FOUND
    n = got.message_count
    assert 1 <= n <= max_nums
    assert got.next_begin_offset == offset + n
    for i, buffer in enumerate(got.buffers):
        record = decode_record(buffer)
        body, phys = expected[offset + i]
        assert record.body == body
        assert record.queue_offset == offset + i
        assert record.commit_log_offset == phys
        assert record.topic == "P"
    # Stopped only for a limit: count, 32 messages, 256 KiB or a consume-queue file end.
    if offset + n < len(expected) and n < min(max_nums, 32) and (offset + n) % CQ_ENTRIES:
        assert got.buffer_total_size + len(expected[offset + n][0]) + 100 > 256 * 1024


@given(operations)
@settings(max_examples=100, deadline=None)
def test_puts_and_gets_read_back_exactly(ops: list[tuple[object, ...]]) -> None:
    with tempfile.TemporaryDirectory() as root:
        trio.run(run_ops, Path(root), ops)
