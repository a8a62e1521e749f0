"""Reading dispatch metadata back from the commit log in batches (recovery, replicated data):
the consume queues and the index it rebuilds are byte-identical to the ones the group commits
wrote, across file ends, chunk ends, records larger than a chunk, transactions and keys."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import trio
from hypothesis import given
from hypothesis import strategies as st

from protocol.message import MessageSysFlag
from protocol.names import SCHEDULE_TOPIC, TIMER_TOPIC
from storage import (
    FileMessageStore,
    MessageExtBrokerInner,
    MessageStoreConfig,
    PutMessageStatus,
    open_message_store,
)
from storage._record import split_properties
from storage.consume_queue import ENTRY
from storage.dispatch import DISPATCH_CHUNK, _property
from storage.store_config import DEFAULT_SCHEDULE_DELAYS_MS
from tests.storage.helpers import small_config, store_files

MakeConfig = Callable[..., MessageStoreConfig]

_PIECES = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "XTAGS", "", "a", "\x01", "\x02", " "])


@given(st.lists(_PIECES, max_size=12))
def test_property_lookup_reads_what_the_dict_parse_reads(pieces: list[str]) -> None:
    text = "".join(pieces)
    parsed = split_properties(text)
    for name in ("TAGS", "KEYS", "UNIQ_KEY"):
        found = _property(text.encode(), f"{name}\x01".encode())
        assert found.decode() == parsed.get(name, "")


def _message(i: int) -> MessageExtBrokerInner:
    properties = {"TAGS": f"Tag{i % 3}"}
    if i % 2:
        properties["UNIQ_KEY"] = f"U{i:08d}"
    if i % 5 == 0:
        properties["KEYS"] = f"k{i} shared  k{i}b"
    sys_flag = 0
    if i % 7 == 3:
        sys_flag = MessageSysFlag.TRANSACTION_PREPARED
    elif i % 11 == 4:
        sys_flag = MessageSysFlag.TRANSACTION_ROLLBACK
    msg = MessageExtBrokerInner(
        topic=f"Topic{i % 2}",
        body=bytes([i % 251]) * (200 + (i * 37) % 900),
        queue_id=i % 3,
        sys_flag=sys_flag,
        properties=properties,
    )
    if i % 13 == 6 and not sys_flag:  # delayed: level = queue id + 1
        msg.topic, msg.queue_id = SCHEDULE_TOPIC, i % 4
        properties["DELAY"] = str(i % 4 + 1)
    elif i % 13 == 9 and not sys_flag:  # timed: the broker sets the tags code to the start
        start = 1_800_000_000_000 + i
        msg.topic, msg.queue_id, msg.tags_code = TIMER_TOPIC, 2, start
        properties["__STARTDELIVERTIME"] = str(start)
    return msg


async def _fill(config: MessageStoreConfig, messages: list[MessageExtBrokerInner]) -> None:
    async with open_message_store(config) as store:
        # Groups of concurrent puts (one store timestamp each) with pauses between them.
        for start in range(0, len(messages), 25):
            async with trio.open_nursery() as puts:
                for msg in messages[start : start + 25]:
                    puts.start_soon(_put, store, msg)
            await trio.sleep(0.002)


async def _put(store: FileMessageStore, msg: MessageExtBrokerInner) -> None:
    result = await store.put_message(msg)
    assert result.status is PutMessageStatus.PUT_OK


async def _rebuilt(config: MessageStoreConfig, root: Path) -> MessageStoreConfig:
    """A store of the same commit log alone, opened (so everything is dispatched again)."""
    shutil.copytree(config.commit_log_dir, root / "commitlog")
    copy = small_config(
        root,
        mapped_file_size_commit_log=config.mapped_file_size_commit_log,
        max_message_size=config.max_message_size,
    )
    async with open_message_store(copy):
        pass
    return copy


async def test_rebuilt_queues_and_index_are_byte_identical(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    config = make_config()
    await _fill(config, [_message(i) for i in range(400)])
    assert len(list(config.commit_log_dir.iterdir())) > 3  # several file ends crossed
    assert {SCHEDULE_TOPIC, TIMER_TOPIC} <= {p.name for p in config.consume_queue_dir.iterdir()}
    copy = await _rebuilt(config, tmp_path / "copy")
    assert store_files(copy.consume_queue_dir) == store_files(config.consume_queue_dir)
    # Index files are named by their creation time: compare them in order.
    assert list(store_files(copy.index_dir).values()) == list(
        store_files(config.index_dir).values()
    )
    assert len(store_files(config.index_dir)) > 1


async def test_a_delayed_record_is_queued_under_its_due_time(make_config: MakeConfig) -> None:
    config = make_config()
    async with open_message_store(config) as store:
        msg = MessageExtBrokerInner(
            topic=SCHEDULE_TOPIC, body=b"later", queue_id=2, properties={"DELAY": "3"}
        )
        result = await store.put_message(msg)
        assert result.status is PutMessageStatus.PUT_OK
    entry = (config.consume_queue_dir / SCHEDULE_TOPIC / "2").iterdir().__next__().read_bytes()
    phys, _, tags_code = ENTRY.unpack_from(entry, 0)
    assert phys == result.wrote_offset
    assert tags_code == result.store_timestamp + DEFAULT_SCHEDULE_DELAYS_MS[2] != 0


async def test_records_larger_than_a_chunk_are_dispatched(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    size = DISPATCH_CHUNK + DISPATCH_CHUNK // 2
    config = make_config(mapped_file_size_commit_log=8 * DISPATCH_CHUNK, max_message_size=2 * size)
    messages = [_message(i) for i in range(40)]
    for i in (3, 4, 17):
        messages[i].body = bytes([i]) * size
        messages[i].sys_flag = 0
    await _fill(config, messages)
    copy = await _rebuilt(config, tmp_path / "copy")
    assert store_files(copy.consume_queue_dir) == store_files(config.consume_queue_dir)
    assert list(store_files(copy.index_dir).values()) == list(
        store_files(config.index_dir).values()
    )
