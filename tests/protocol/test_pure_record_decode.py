"""The pure pull decoder (`protocol.message._record.decode_records_py`) keeps the parsed
properties of what records share (all but their UNIQ_KEY value) from one record to the next:
every record must still get its own dictionary, equal (key order included) to what
`decode_record` parses, and a damaged answer must fail as `decode_record` fails."""

from __future__ import annotations

from collections.abc import Callable

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.message import (
    MessageConst,
    MessageFormatError,
    _record,
    decode_record,
    encode_record,
    iter_records,
    string_to_properties,
)
from tests.compiled import speedups as _speedups


def _record_with(properties: str, offset: int) -> bytes:
    return bytes(
        encode_record(
            topic="T", body=b"body", queue_id=1, properties=properties,
            born_host=("10.0.0.1", 5), store_host=("10.0.0.2", 10911), queue_offset=offset,
            physical_offset=offset * 200,
        )
    )  # fmt: skip


def test_records_sharing_properties_get_their_own_dictionaries() -> None:
    heads = ["WAIT\x01true\x02UNIQ_KEY\x01", "TAGS\x01a\x02KEYS\x01k k2\x02UNIQ_KEY\x01", ""]
    # The last piece repeats a name of the head, is empty, has no value, or ends the string.
    lasts = ["ID%04d", "ID%04d\x02", "ID%04d\x02TAGS\x01b", "ID%04d\x02WAIT", "ID%04d\x02\x01x"]
    texts = [head + last % n for n, (head, last) in enumerate((h, t) for h in heads for t in lasts)]
    data = b"".join(_record_with(text, n) for n, text in enumerate(texts))
    first = _record.decode_records_py(data)
    expected = [decode_record(data, pos) for pos in _offsets(first)]
    assert [attrs.astuple(m) for m in first] == [attrs.astuple(m) for m in expected]
    # A consumer may change what it was given (the client adds offsets to the properties):
    # the next decode does not see it.
    for message in first:
        message.properties[MessageConst.TAGS] = "changed"
        message.properties["MIN_OFFSET"] = "0"
    again = _record.decode_records_py(data)
    assert [m.properties for m in again] == [m.properties for m in expected]
    assert len({id(m.properties) for m in again}) == len(again)


def test_an_id_as_long_as_the_one_before_is_still_checked_for_a_separator() -> None:
    # Same bytes around the id, same length: the shortcut's case, but a separator in the id
    # makes two pieces of it (the second without a name/value separator: dropped).
    texts = [f"WAIT\x01true\x02UNIQ_KEY\x01{uniq}\x02CLUSTER\x01C" for uniq in
             ["abcd", "ab\x02d", "ab\x01d", "abcé"]]  # fmt: skip
    data = b"".join(_record_with(text, n) for n, text in enumerate(texts))
    decoded = _record.decode_records_py(data)
    assert [m.properties for m in decoded] == [string_to_properties(t) for t in texts]
    assert decoded[1].properties[MessageConst.UNIQ_KEY] == "ab"


def _offsets(messages: list[_record.MessageExt]) -> list[int]:
    positions = [0]
    for message in messages[:-1]:
        positions.append(positions[-1] + message.store_size)
    return positions


# Properties strings built to hit the template cache's edges: UNIQ_KEY first, last, twice,
# empty, without a separator, inside a value or a name; values holding \x01; names that
# repeat; empty pieces; characters of several UTF-8 lengths.
_names = st.sampled_from(
    ["UNIQ_KEY", "CLUSTER", "WAIT", "KEYS", "TAGS", "XUNIQ_KEY", "UNIQ_KE", "", "é", "名"]
)
_values = st.sampled_from(["", "true", "DefaultCluster", "a\x01b", "UNIQ_KEY\x01x", "ü", "😀"])
_pieces = st.one_of(
    st.tuples(_names, _values).map(lambda p: f"{p[0]}\x01{p[1]}"),
    _names,  # a piece without a separator
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=6),
)
_texts = st.lists(_pieces, max_size=7).map("\x02".join)
# Ids mostly of one length, as a producer's are (the shortcut needs the record before's
# length), with separators and multi-byte characters among them.
_id_chars = "0123456789ABCDEFé\x01\x02"
_ids = st.one_of(st.text(_id_chars, min_size=4, max_size=4), st.text(_id_chars, max_size=6))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_texts, st.lists(_ids, min_size=1, max_size=4)), min_size=1, max_size=4))
def test_properties_equal_a_full_parse_with_their_key_order(
    groups: list[tuple[str, list[str]]],
) -> None:
    # Each text is repeated with other ids in its first UNIQ_KEY value (where it has one),
    # as a producer's batch is: the records after the first take the shortcuts.
    texts = []
    for text, ids in groups:
        at = text.find("UNIQ_KEY\x01")
        for uniq in ids:
            texts.append(text if at < 0 else text[: at + 9] + uniq + text[at + 9 :])
    data = b"".join(_record_with(text, n) for n, text in enumerate(texts))
    decoded = _record.decode_records_py(data)
    assert [list(m.properties.items()) for m in decoded] == [
        list(string_to_properties(text).items()) for text in texts
    ]
    expected = [decode_record(data, pos) for pos in _offsets(decoded)]
    assert [attrs.astuple(m) for m in decoded] == [attrs.astuple(m) for m in expected]
    if _speedups is not None:  # the compiled twin gives the same
        compiled = _speedups.decode_records(data)
        assert [list(m.properties.items()) for m in compiled] == [
            list(m.properties.items()) for m in decoded
        ]


# A batch's records as a broker stores them, of a few layouts (body and id lengths, hosts):
# runs of one layout are decoded by one struct, and a record of another layout ends a run.
_batch_records = st.lists(
    st.tuples(
        _ids,
        st.sampled_from([b"", b"b" * 7, b"b" * 64]),
        st.sampled_from([("10.0.0.1", 5), ("10.0.0.3", 5), ("::1", 5)]),
        st.sampled_from(["T", "U"]),  # same length: only the bytes differ
        st.sampled_from(["WAIT\x01true", "WAIT\x01fals", "KEYS\x01true"]),
    ),
    min_size=1,
    max_size=12,
)
# Where a damaged byte hurts a record most: its size, magic code, sysflag (the host
# families) and body length; else anywhere.
_field_offsets = st.one_of(st.sampled_from([0, 3, 4, 7, 36, 39, 84, 87]), st.integers(0, 200))


@settings(max_examples=300, deadline=None)
@given(_batch_records, st.data())
def test_runs_of_one_layout_decode_as_record_by_record(
    records: list[tuple[str, bytes, tuple[str, int], str, str]], data: st.DataObject
) -> None:
    parts = [
        encode_record(
            topic=topic, body=body, queue_id=1, born_host=host, store_host=("10.0.0.2", 9),
            properties=f"{head}\x02UNIQ_KEY\x01{uniq}\x02CLUSTER\x01DefaultCluster",
            queue_offset=n, physical_offset=n * 200,
        )
        for n, (uniq, body, host, topic, head) in enumerate(records)
    ]  # fmt: skip
    encoded = bytearray(b"".join(parts))
    whole = bytes(encoded)
    expected = _outcome(lambda buf: list(iter_records(buf)), whole)
    assert _outcome(_record.decode_records_py, whole) == expected
    if _speedups is not None:
        assert _outcome(_speedups.decode_records, whole) == expected
    # Damaged: the same records up to the same error at the same offset.
    starts = [sum(len(p) for p in parts[:k]) for k in range(len(parts))]
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.sampled_from(starts)) + data.draw(_field_offsets)
        encoded[min(at, len(encoded) - 1)] = data.draw(st.integers(0, 255))
    damaged = bytes(encoded[: data.draw(st.integers(1, len(encoded)))])
    assert _outcome(_record.decode_records_py, damaged) == _outcome(
        lambda buf: list(iter_records(buf)), damaged
    )


def test_a_record_unlike_the_run_before_it_is_decoded_on_its_own() -> None:
    # Four records of one layout; the third is changed in each field a run relies on.
    def batch() -> bytearray:
        texts = [f"WAIT\x01true\x02UNIQ_KEY\x01ID{n:02d}\x02CLUSTER\x01C" for n in range(4)]
        return bytearray(b"".join(_record_with(text, n) for n, text in enumerate(texts)))

    size = len(batch()) // 4
    third = 2 * size
    changes: dict[str, Callable[[bytearray], None]] = {
        "magic": lambda b: b.__setitem__(third + 7, b[third + 7] ^ 1),
        "born host IPv6 bit": lambda b: b.__setitem__(third + 39, b[third + 39] | 0x10),
        "size": lambda b: b.__setitem__(third + 3, b[third + 3] - 1),
        "body length": lambda b: b.__setitem__(third + 87, b[third + 87] + 1),
        "topic": lambda b: b.__setitem__(third + 88 + 4 + 1, ord("U")),
        "property after the id": lambda b: b.__setitem__(third + size - 1, ord("D")),
        "separator in the id": lambda b: b.__setitem__(third + size - 14, 2),
        "id not UTF-8": lambda b: b.__setitem__(third + size - 14, 0xFF),
    }
    for name, change in changes.items():
        data = batch()
        change(data)
        expected = _outcome(lambda buf: list(iter_records(buf)), bytes(data))
        assert _outcome(_record.decode_records_py, bytes(data)) == expected, name


def _outcome(decode: Callable[[bytes], list[_record.MessageExt]], data: bytes) -> object:
    try:
        return [(attrs.astuple(m), list(m.properties)) for m in decode(data)]
    except MessageFormatError as exc:
        return str(exc)
