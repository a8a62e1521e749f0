"""The pure batch write a column at a time against the same write a record at a time.

`storage.inline_batch.write_batch_records_py` writes a plain batch (what producers send: no
TAGS or KEYS, the header's properties following every element the same way, each UNIQ_KEY the
last piece) with whole-batch calls, and anything else record by record. Both must leave the
same records, consume-queue entries, offsets and index keys; the plain path must also refuse
(write nothing, answer -1) every batch it cannot write exactly. In-memory buffers, and one
store in tmp_path against the buffer path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.message._batch import (
    SameSizedElements,
    decode_batch_tuples_py,
    encode_batch_tuples,
)
from storage import MessageBatch, open_message_store
from storage.consume_queue import ENTRY
from storage.inline_batch import (
    _entry_lanes,
    _index_keys,
    _PlainBatch,
    _write_records_one_by_one,
    write_batch_records_py,
)
from storage.results import PutMessageResult, PutMessageStatus
from tests.storage.helpers import small_config, store_files

# Names and values of producers' properties, plus what the plain path must turn away: a name
# ending in S (maybe TAGS or KEYS), UNIQ_KEY not last or empty or not after a separator, a
# trailing separator, an empty string, non-ASCII text.
_name = st.sampled_from(["WAIT", "UNIQ_KEY", "TAGS", "KEYS", "MIN_OFFSET", "K\u00e9", ""])
_value = st.text(st.sampled_from(["7", "F", "a", "0", " ", "\u00e9", "\U0001f600"]), max_size=6)
_props = st.lists(st.tuples(_name, _value), max_size=4).map(
    lambda pieces: "\x02".join(f"{n}\x01{v}" for n, v in pieces)
) | st.sampled_from(["", "WAIT\x01true\x02UNIQ_KEY\x01AC11", "WAIT\x01true\x02", "\x02"])
_elements = st.lists(
    st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=64), _props),
    min_size=1, max_size=6,
)  # fmt: skip
_producer_batches = st.lists(
    st.tuples(st.integers(0, 3), st.binary(max_size=64), st.text("0123456789ABCDEF", min_size=1)),
    min_size=1, max_size=6,
).map(lambda items: [(f, b, f"WAIT\x01true\x02UNIQ_KEY\x01{u}") for f, b, u in items])  # fmt: skip
_header = st.sampled_from([b"", b"CLUSTER\x01DefaultCluster", b"\xc3\xa9\x01x"])


def _write_plain_batch(
    view: memoryview, pos: int, base: int, elements: list[tuple[int, bytes, str]],
    header: bytes, topic_part: bytes, *args: Any,
) -> int:  # fmt: skip
    """The plain write, or -1 (nothing written) when it does not take the batch."""
    topic = args[-1]
    index_keys = args[-2]
    plain = _PlainBatch.of(elements, header, topic_part, topic, index_keys is not None)
    if plain is None or not plain.fits(view, pos):
        return -1
    return plain.write(view, pos, base, *args[:-1])


def _write(fn: Any, elements: list[tuple[int, bytes, str]], header: bytes, index: bool,
           room: int = 4096) -> tuple[Any, ...]:  # fmt: skip
    buf = bytearray(b"\xee" * room)
    entries = bytearray(b"old")
    offsets: list[int] = [1]
    keys: list[tuple[str, int]] | None = [("before", 1)] if index else None
    end = fn(
        memoryview(buf), 7, 1 << 33, elements, header, b"\x05Topic", 3, 0x40, 1_700_000_000_000,
        b"\x7f\x00\x00\x01", 40000, 1_700_000_000_001, b"\x0a\x00\x00\x02", 10911, 2, 123,
        entries, offsets, keys, "Topic",
    )  # fmt: skip
    return end, bytes(buf), bytes(entries), offsets, keys


@settings(max_examples=400, deadline=None)
@given(_elements, _header, st.booleans())
def test_the_plain_write_equals_the_write_record_by_record_or_refuses(
    elements: list[tuple[int, bytes, str]], header: bytes, index: bool
) -> None:
    plain = _write(_write_plain_batch, elements, header, index)
    if plain[0] == -1:  # refused: nothing written, nothing added
        assert plain[1:] == (b"\xee" * 4096, b"old", [1], [("before", 1)] if index else None)
    else:
        assert plain == _write(_write_records_one_by_one, elements, header, index)


@settings(max_examples=200, deadline=None)
@given(_producer_batches, _header, st.booleans())
def test_a_producers_batch_takes_the_plain_write(
    elements: list[tuple[int, bytes, str]], header: bytes, index: bool
) -> None:
    plain = _write(_write_plain_batch, elements, header, index)
    assert plain[0] > 7
    assert plain == _write(_write_records_one_by_one, elements, header, index)
    if index:
        assert plain[4] is not None and len(plain[4]) == 1 + len(elements)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(2, 6), st.integers(0, 64), st.sampled_from(["", "AC11", "\u00e9"]), _header,
    st.booleans(), st.sampled_from(["WAIT\x01true\x02UNIQ_KEY\x01", "UNIQ_KEY\x01", "K\x01"]),
    st.sampled_from([None, 0, -1, 7]),
)  # fmt: skip
def test_a_same_sized_batch_is_written_from_its_decoded_columns_as_from_its_tuples(
    count: int, body_len: int, tail: str, header: bytes, index: bool, head: str, flag: int | None
) -> None:
    """The broker's decode hands a batch of same-sized elements over with its columns and raw
    properties (`SameSizedElements`); the plain write takes those instead of the tuples and
    must write the same bytes, entries, offsets and keys (or refuse the same batches). With
    one FLAG for all (``flag``; None: each its own), it packs only what differs per record."""
    elements = [
        (k % 3 if flag is None else flag, bytes([k]) * body_len, f"{head}{tail}{k:02X}")
        for k in range(count)
    ]
    decoded = decode_batch_tuples_py(encode_batch_tuples(elements))
    assert type(decoded) is SameSizedElements and decoded == elements
    from_columns = _write(_write_plain_batch, decoded, header, index)
    assert from_columns == _write(_write_plain_batch, list(decoded), header, index)
    if from_columns[0] != -1:
        assert from_columns == _write(_write_records_one_by_one, elements, header, index)


@pytest.mark.parametrize("count", [2, 255, 256, 257])
@pytest.mark.parametrize("header", [b"", b"CLUSTER\x01DefaultCluster"])
def test_a_uniform_batch_up_to_the_packed_length_and_past_it(count: int, header: bytes) -> None:
    """A uniform batch (one size, one FLAG) of up to 256 records is packed by one struct, a
    longer one joined from pieces: both the bytes of the record by record write."""
    elements = [(5, b"%04d" % k, f"WAIT\x01true\x02UNIQ_KEY\x01{k:032X}") for k in range(count)]
    decoded = decode_batch_tuples_py(encode_batch_tuples(elements))
    assert type(decoded) is SameSizedElements
    room = count * 200
    packed = _write(_write_plain_batch, decoded, header, True, room=room)
    assert packed[0] > 7
    assert packed == _write(_write_records_one_by_one, elements, header, True, room=room)


def test_an_empty_batch_is_written_as_nothing() -> None:
    assert _write(write_batch_records_py, [], b"CLUSTER\x01C", True) == (
        7,
        b"\xee" * 4096,
        b"old",
        [1],
        [("before", 1)],
    )


def test_a_plain_batch_past_the_end_of_the_file_is_left_to_the_record_by_record_write() -> None:
    elements = [(0, b"x" * 100, "WAIT\x01true\x02UNIQ_KEY\x01AC11")] * 3
    assert _write(_write_plain_batch, elements, b"", True, room=400)[0] == -1


def test_a_batchs_msg_ids_are_each_records_store_host_and_offset() -> None:
    offsets = [0, 255, 1 << 40]
    result = PutMessageResult(PutMessageStatus.PUT_OK, physical_offsets=offsets,
                              msg_id_prefix="7F00000100002A9F")  # fmt: skip
    ids = ["7F00000100002A9F0000000000000000", "7F00000100002A9F00000000000000FF",
           "7F00000100002A9F0000010000000000"]  # fmt: skip
    assert result.msg_ids == ids and result.msg_id == ",".join(ids)
    odd = PutMessageResult(PutMessageStatus.PUT_OK, physical_offsets=[1, 2], msg_id_prefix="%d")
    assert odd.msg_id == "%d0000000000000001,%d0000000000000002"
    assert PutMessageResult(PutMessageStatus.PUT_OK).msg_id == ""


@given(st.lists(st.text(st.sampled_from(["7", "F", "\x00", "\u00e9", "\U0001f600"])), min_size=1))
def test_index_keys_are_each_value_after_its_topic(values: list[str]) -> None:
    """The keys read by one decode and one split, values holding a NUL (the split's
    separator) or multi-byte characters included."""
    raw = tuple(value.encode() for value in values)
    assert _index_keys("T", raw, len(raw)) == [f"T#{value}" for value in values]


@given(
    st.lists(st.integers(0, (1 << 63) - 1), max_size=70),
    st.sampled_from(["7F00000100002A9F", "C0A80001000027A3", ""]),
)
def test_a_batchs_msg_id_is_its_msg_ids_joined(offsets: list[int], prefix: str) -> None:
    """The batch answer's msgId (offsets packed and written as hex at once) against each
    record's id on its own."""
    result = PutMessageResult(PutMessageStatus.PUT_OK, physical_offsets=offsets,
                              msg_id_prefix=prefix)  # fmt: skip
    assert result.msg_id == ",".join(f"{prefix}{offset:016X}" for offset in offsets)


async def test_producers_batches_in_the_store_match_the_buffer_path_byte_for_byte(
    tmp_path: Path,
) -> None:
    """Batches as a producer sends them, through `append_batch` (the plain write on the pure
    path) and through the buffer path: the same commit-log, consume-queue and index files."""
    now = 1_700_000_000_000

    def producer_batch(n: int) -> MessageBatch:
        uniq = "WAIT\x01true\x02UNIQ_KEY\x017F00000100"
        elements = [(0, b"m%d-%d." % (n, k) * (60 + 30 * k), f"{uniq}{n:04X}{k:04X}")
                    for k in range(1 + n % 4)]  # fmt: skip
        return MessageBatch("PlainTopic", n % 2, elements, "CLUSTER\x01DefaultCluster",
                            born_timestamp=now - n, born_host=("127.0.0.1", 40000 + n))  # fmt: skip

    roots = {"in-place": tmp_path / "in-place", "buffer": tmp_path / "buffer"}
    for how, root in roots.items():
        async with open_message_store(small_config(root, clock=lambda: now)) as store:
            for n in range(60):  # about a commit-log file and a half
                if how == "in-place":
                    answered: list[PutMessageResult] = []
                    store.put_messages_nowait(producer_batch(n), answered.append)
                    assert [r.status for r in answered] == [PutMessageStatus.PUT_OK]
                else:
                    assert (await store.put_messages(producer_batch(n))).ok
            assert store.statistics().commit_log_files > 1
            found = store.query_message("PlainTopic", "7F00000100003B0002", 10, 0, 2**62)
            assert len(found.buffers) == 1
    assert store_files(roots["in-place"]) == store_files(roots["buffer"])


def test_consume_queue_entries_of_equal_records_come_out_of_lanes_as_packed_one_by_one() -> None:
    for count, size, start in ((1, 90, 0), (32, 1181, 1 << 33), (1024, 200, (1 << 62) + 7),
                               (1025, 200, 5)):  # fmt: skip
        packed = b"".join(
            ENTRY.pack(offset, size, 0) for offset in range(start, start + count * size, size)
        )
        assert _entry_lanes(count, size, start) == packed
        assert _entry_lanes(count, size, start) == packed  # cached lanes


# Same-sized properties whose UNIQ_KEY piece sits at one place in some batches and not in
# others: its value's length traded against a padding value's, a piece after it, a value with
# a separator or a name ending in S, or no UNIQ_KEY at all; mostly one shape for the batch.
_layout = st.tuples(
    st.sampled_from(["", "\x02WAIT\x01true", "\x02TAGS\x01a", "\x03", "S\x01"]),
    st.sampled_from(["", "\x02", "\x01", "S", "\u00e9"]),
    st.lists(st.tuples(st.integers(0, 4), st.booleans()), min_size=2, max_size=6),
    st.integers(0, 4),
)


@settings(max_examples=300, deadline=None)
@given(_layout, _header, st.booleans())
def test_a_same_sized_batch_read_from_its_raw_properties_is_written_as_record_by_record(
    layout: tuple[str, str, list[tuple[int, bool]], int], header: bytes, index: bool
) -> None:
    after, odd, shapes, uniform = layout
    elements = []
    for k, (pad, uniq) in enumerate(shapes):
        pad = pad if uniform == 0 else uniform  # mostly every UNIQ_KEY at one place
        name = "UNIQ_KEY" if uniq or uniform else "UNIQ_KEX"
        value = f"{odd}{k:02X}" + "F" * (4 - pad)
        elements.append((1, b"body", f"A\x01{'x' * pad}\x02{name}\x01{value}{after}"))
    decoded = decode_batch_tuples_py(encode_batch_tuples(elements))
    assert type(decoded) is SameSizedElements
    written = _write(_write_plain_batch, decoded, header, index)
    if written[0] == -1:
        assert written[1:] == (b"\xee" * 4096, b"old", [1], [("before", 1)] if index else None)
    else:
        assert written == _write(_write_records_one_by_one, elements, header, index)
