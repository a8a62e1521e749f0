"""A batch send encoded straight into the commit log (`storage.inline_batch.append_batch`).

Two real stores in tmp_path with small files (64 KiB commit log, 64-entry consume queues) and
one fixed clock: one takes the batches as the send path does (`put_messages_nowait`, written in
place), the other through the buffer path (`encode_batch`, then appended and patched). Every
commit-log, consume-queue and index file must come out byte for byte the same.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from storage import (
    GetMessageStatus,
    MessageBatch,
    PutMessageResult,
    PutMessageStatus,
    open_message_store,
)
from storage._encode import encode_batch
from storage._hash import tags_code
from storage._record import split_properties
from storage.commit_log import EncodedPut
from storage.group_commit import CommitGroup
from storage.inline_batch import _last_uniq_key, append_batch, write_batch_records_py
from tests.storage.helpers import small_config, store_files

NOW = 1_700_000_000_000
ELEMENT_PROPS = [
    "",
    "TAGS\x01TagA",
    "TAGS\x01TagB\x02KEYS\x01k1 k2\x02",
    "UNIQ_KEY\x01AC1100010000000000000001\x02TAGS\x01TagA",
]


def batch(n: int) -> MessageBatch:
    """Batch ``n``: 1 to 5 elements of varied bodies and properties, on one of 3 queues."""
    elements = [
        (k, f"body-{n}-{k}-".encode() * (3 + (n + k) % 7), ELEMENT_PROPS[(n + k) % 4])
        for k in range(1 + n % 5)
    ]
    return MessageBatch(
        topic="BatchTopic",
        queue_id=n % 3,
        elements=elements,
        properties="" if n % 2 else "WAIT\x01true\x02CLUSTER\x01DefaultCluster",
        born_timestamp=NOW - n,
        born_host=("127.0.0.1", 40000 + n),
    )


async def test_batches_written_in_place_match_the_buffer_path_byte_for_byte(
    tmp_path: Path,
) -> None:
    total = 120  # about 1.5 commit-log files, so batches meet a file's end too
    roots = {"in-place": tmp_path / "in-place", "buffer": tmp_path / "buffer"}
    for how, root in roots.items():
        async with open_message_store(small_config(root, clock=lambda: NOW)) as store:
            results: list[PutMessageResult] = []
            for n in range(total):
                if how == "in-place":
                    answered: list[PutMessageResult] = []
                    store.put_messages_nowait(batch(n), answered.append)
                    # ASYNC_FLUSH: answered before put_messages_nowait returns.
                    assert len(answered) == 1
                    results.append(answered[0])
                else:
                    results.append(await store.put_messages(batch(n)))
            assert all(r.status is PutMessageStatus.PUT_OK for r in results)
            assert store.statistics().commit_log_files > 1
            # The third element of a batch of 3 or more is on its queue, with its keys.
            got = store.get_message("g", "BatchTopic", 2, 0, 64)
            assert got.status is GetMessageStatus.FOUND
            got.release()
            assert store.query_message("BatchTopic", "k1", 1000, 0, 2**62).buffers
    assert store_files(roots["in-place"]) == store_files(roots["buffer"])


async def test_append_batch_leaves_what_it_does_not_take_to_the_buffer_path(
    tmp_path: Path,
) -> None:
    async with open_message_store(small_config(tmp_path, clock=lambda: NOW)) as store:
        commit_log = store.commit_log
        store_host = store.config.store_host
        await store.put_messages(batch(0))  # the commit log has a file
        group = CommitGroup(NOW)
        prefix = "7F00000100002A9F"
        too_large = MessageBatch("BatchTopic", 0, [(0, b"x" * 2000, "")])
        for refused in (
            MessageBatch("BatchTopic", 0, []),  # empty: encode_batch answers MESSAGE_ILLEGAL
            MessageBatch("T" * 200, 0, [(0, b"x", "")]),  # topic too long
            MessageBatch("BatchTopic", 0, [(0, b"x", "P\x01" + "v" * 40000)]),  # properties
        ):
            assert (
                append_batch(commit_log, refused, store_host, 4 << 20, group, prefix, True) is None
            )
            assert not isinstance(encode_batch(refused, store_host, 4 << 20), EncodedPut)
        # A prepared transaction record takes no queue offset: CommitLog.append writes it.
        prepared = MessageBatch("BatchTopic", 0, [(0, b"x", "")], sys_flag=0x4)
        assert append_batch(commit_log, prepared, store_host, 4 << 20, group, prefix, True) is None
        # Larger than maxMessageSize: not taken, and the buffer path refuses it.
        assert append_batch(commit_log, too_large, store_host, 1000, group, prefix, True) is None
        # More than the rest of the file: not taken (the buffer path writes the blank first).
        big = MessageBatch("BatchTopic", 0, [(0, b"x" * 15000, "")] * 3)
        answered: list[PutMessageResult] = []
        store.put_messages_nowait(big, answered.append)  # fits the first file
        assert append_batch(commit_log, big, store_host, 4 << 20, group, prefix, True) is None
        assert group.records == 0 and not group.inline
        store.put_messages_nowait(big, answered.append)  # at the start of the next file
        assert [(r.status, r.msg_num) for r in answered] == [(PutMessageStatus.PUT_OK, 3)] * 2
        assert answered[0].wrote_offset < 65536 == answered[1].wrote_offset
        assert store.statistics().put_messages == 1 + 3 + 3  # completes the open group


# Property strings built of the pieces the quick UNIQ_KEY read must get right: the name at the
# start or after a separator, inside another name, with an empty value, repeated.
_uniq_props = st.lists(
    st.sampled_from(["UNIQ_KEY", "\x01", "\x02", "a", "XUNIQ_KEY", "UNIQ_KEY\x01", "\x02UNIQ_KEY"]),
    max_size=8,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(_uniq_props)
def test_the_quick_uniq_key_read_agrees_with_the_parser(properties: str) -> None:
    quick = _last_uniq_key(properties)
    if quick is not None:  # None: the writer parses instead
        assert quick == split_properties(properties).get("UNIQ_KEY")


def test_a_producers_batch_is_written_with_its_uniq_keys_indexed() -> None:
    elements = [(0, b"body %d" % n, f"WAIT\x01true\x02UNIQ_KEY\x01ID{n:04d}") for n in range(3)]
    elements.append((0, b"tagged", "TAGS\x01TagA\x02UNIQ_KEY\x01ID9999"))
    entries = bytearray()
    offsets: list[int] = []
    keys: list[tuple[str, int]] = []
    end = write_batch_records_py(
        memoryview(bytearray(4096)), 0, 100, elements, b"CLUSTER\x01C", b"\x01T", 0, 0, 0,
        b"\x7f\x00\x00\x01", 1, 2, b"\x7f\x00\x00\x01", 3, 0, 5, entries, offsets, keys, "T",
    )  # fmt: skip
    assert offsets[0] == 100 and offsets == sorted(set(offsets)) and end > offsets[-1] - 100
    assert keys == [(f"T#ID{n:04d}", offsets[n]) for n in range(3)] + [("T#ID9999", offsets[3])]
    tags = [
        int.from_bytes(entries[n * 20 + 12 : n * 20 + 20], "big", signed=True) for n in range(4)
    ]
    assert tags == [0, 0, 0, tags_code("TagA")]
