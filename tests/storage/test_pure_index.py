"""The pure-Python index writer (`storage.index_file.put_index_entries_py`) against a plain
reference loop, on any path: it hashes keys whose head it has cached from the head's hash and
the last six characters, and must give the hash of the whole key, chain buckets and stop at
the entry limit exactly as the plain loop does."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from storage import _hash
from storage.index_file import _put_columns, put_index_entries_py


def _reference(
    buf: bytearray, keys: list[tuple[str, int]], start: int, slots: int, entries_start: int,
    number: int, limit: int, time_diff: int, slot_count: int, phy_offset: int,
) -> tuple[int, int, int, int]:  # fmt: skip
    i = start
    while i < len(keys) and number < limit:
        key, phy_offset = keys[i]
        i += 1
        h = _hash.java_hash_uncached(key)
        khash = 0 if h == -0x80000000 else abs(h)
        slot_pos = 40 + (khash % slots) * 4
        (previous,) = struct.unpack_from(">i", buf, slot_pos)
        if previous <= 0 or previous > number:
            previous = 0
            slot_count += 1
        struct.pack_into(">iqii", buf, entries_start + number * 20, khash, phy_offset, time_diff,
                         previous)  # fmt: skip
        struct.pack_into(">i", buf, slot_pos, number)
        number += 1
    return i, number, slot_count, phy_offset


# Keys as the store makes them ("<topic>#<UNIQ_KEY>": a few heads, varying last characters,
# some of them not ASCII), keys too short for the head cache, and any short text.
_long_key = st.builds(
    lambda head, tail: head + tail,
    st.sampled_from(["Topic#0A0B0C0D1234ABCDEF01000003", "T#k\u00e9000000000", "T#kkkkkkkkk"]),
    st.text(st.sampled_from(["0", "9", "A", "F", "\u00e9", "\U0001f600"]), max_size=7),
)
_keys = st.lists(
    st.tuples(
        _long_key | st.text(st.sampled_from(["T", "#", "k", "\u00e9"]), max_size=12),
        st.integers(0, 2**62),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(_keys, st.integers(1, 7), st.integers(0, 45), st.integers(0, 45), st.booleans())
def test_pure_index_writer_equals_the_plain_loop(
    keys: list[tuple[str, int]], slots: int, limit: int, start: int, warm: bool
) -> None:
    """Few slots, so buckets chain; a limit below the key count, so the file fills; a start
    past the end; the head cache warm (every key hashed once before) or as it happens."""
    if warm:
        for key, _ in keys:
            _hash.java_hash_py(key)
    entries_start = 40 + slots * 4
    outcomes = []
    for fn in (_reference, put_index_entries_py):
        buf = bytearray(entries_start + 50 * 20)
        buf[40:44] = (3).to_bytes(4, "big")  # a slot pointing past the entry count
        buf[44:48] = (0x80000001).to_bytes(4, "big")  # one negative as Java reads it
        first = fn(buf, keys, start, slots, entries_start, 1, limit, 17, 0, -1)
        second = fn(buf, keys, 0, slots, entries_start, first[1], limit, 18, first[2], first[3])
        outcomes.append((first, second, bytes(buf)))
    assert outcomes[0] == outcomes[1]


# A group's keys as producers make them: runs of one topic and producer (one head, six
# varying hex characters), now and then another head, another length or a key not ASCII.
_HEADS = [
    "TopicA#7F0000011A2B3C4D5E6F7A8B9C",
    "TopicB#0A000002FFEEDDCCBBAA00112233",
    "T#x0123456789",
]
_producer_key = st.builds(
    lambda head, tail: head + tail,
    st.sampled_from(_HEADS),
    st.text(st.sampled_from("0123456789ABCDEF"), min_size=6, max_size=6),
)
_group_keys = st.lists(
    st.tuples(
        _producer_key
        | st.just("TopicA#7F0000011A2B3C4D5E6F7A8B9C00000\u00e9")
        | st.just("TopicA#7F0000011A2B3C4D5E6F7A8B9C0000001"),
        st.integers(0, 2**62),
    ),
    max_size=300,
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_producer_key, min_size=1, max_size=4),
    st.integers(0, 40),
    _group_keys,
    st.sampled_from([7, 977, 5_000_000]),
    st.lists(st.tuples(st.integers(0, 6), st.sampled_from([2, 5, 400, 0x80000000, 0xFFFFFFFF]))),
)
def test_the_column_writer_equals_the_plain_loop(
    runs: list[str], repeats: int, mixed: list[tuple[str, int]], slots: int,
    planted: list[tuple[int, int]],
) -> None:  # fmt: skip
    """Long runs of one producer's keys (written a column at a time), groups mixing producers,
    lengths and keys not ASCII (cut into runs, short ones key by key), slots few enough that
    keys share one (the loop takes those runs) or many; slots planted with entry numbers
    ahead of the writer, or negative as Java reads them."""
    keys = [(key[:-3] + f"{n:03X}", n * 97) for key in runs for n in range(repeats)] + mixed
    entries_start = 40 + slots * 4
    outcomes = []
    for fn in (_reference, put_index_entries_py):
        buf = bytearray(entries_start + 700 * 20)
        for index, value in planted:  # into the slot of one of the first keys
            if index < len(keys):
                struct.pack_into(">I", buf, 40 + (_key_hash(keys[index][0]) % slots) * 4, value)
        first = fn(buf, keys, 0, slots, entries_start, 1, 700, 17, 0, -1)
        second = fn(buf, keys, 0, slots, entries_start, first[1], 700, 18, first[2], first[3])
        outcomes.append((first, second, bytes(buf)))
    assert outcomes[0] == outcomes[1]


def _key_hash(key: str) -> int:
    h = _hash.java_hash_uncached(key)
    return 0 if h == -0x80000000 else abs(h)


def test_a_producers_run_is_written_a_column_at_a_time() -> None:
    """The usual group (one producer's keys of one topic) takes the column writer, with the
    plain loop's bytes; a run with two keys in one slot is left to the loop, untouched."""
    keys = [(f"TopicA#7F0000011A2B3C4D5E6F7A8B{n:06X}", n * 1000) for n in range(64)]
    entries_start = 40 + 5_000_000 * 4
    mine, theirs = bytearray(entries_start + 70 * 20), bytearray(entries_start + 70 * 20)
    assert _put_columns(mine, keys, 5_000_000, entries_start, 1, 9, 0) == (65, 64)
    assert _reference(theirs, keys, 0, 5_000_000, entries_start, 1, 70, 9, 0, -1)[1:3] == (65, 64)
    assert mine == theirs
    one_slot = bytearray(40 + 4 + 70 * 20)
    assert _put_columns(one_slot, keys, 1, 44, 1, 9, 0) is None
    assert not any(one_slot)
