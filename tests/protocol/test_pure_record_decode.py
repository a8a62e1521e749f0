"""The pure pull decoder (`protocol.message._record.decode_records_py`) keeps the parsed
properties of what records share (all but their last piece) from one record to the next:
every record must still get its own dictionary, equal to what `decode_record` parses."""

from __future__ import annotations

import attrs

from protocol.message import MessageConst, _record, decode_record, encode_record


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


def _offsets(messages: list[_record.MessageExt]) -> list[int]:
    positions = [0]
    for message in messages[:-1]:
        positions.append(positions[-1] + message.store_size)
    return positions
