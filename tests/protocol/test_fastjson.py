"""The fastjson dialect: bare numeric keys, object keys, compact output, clear errors."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.fastjson import FastjsonDecodeError, ObjectKey, dumps, loads

MQ0 = {"brokerName": "b", "queueId": 0, "topic": "t"}
MQ1 = {"brokerName": "b", "queueId": 1, "topic": "t"}


def test_standard_json_is_plain_orjson() -> None:
    text = b'{"a": [1, 2.5, "x", true, null], "b": {"c": {}}}'
    assert loads(text) == orjson.loads(text)
    assert loads(text.decode()) == orjson.loads(text)


def test_bare_numeric_keys_come_back_as_text() -> None:
    assert loads(b'{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}') == {
        "0": "10.0.0.1:10911",
        "1": "10.0.0.2:10911",
    }
    assert loads('{"offsetTable":{"t@g":{0:12, 1 : 7, -1:3}}}') == {
        "offsetTable": {"t@g": {"0": 12, "1": 7, "-1": 3}}
    }
    assert loads("{brokerName:1}") == {"brokerName": 1}


def test_object_keys() -> None:
    text = (
        b'{"consumeTps":0.0,"offsetTable":{'
        b'{"brokerName":"b","queueId":0,"topic":"t"}:{"brokerOffset":9,"consumerOffset":3},'
        b'{"topic":"t","queueId":1,"brokerName":"b"}:{"brokerOffset":4,"consumerOffset":4}}}'
    )
    doc = loads(text)
    table = doc["offsetTable"]
    assert table[ObjectKey.of(MQ0)] == {"brokerOffset": 9, "consumerOffset": 3}
    # Key order inside the object does not matter: the pairs are sorted.
    assert table[ObjectKey.of(MQ1)] == {"brokerOffset": 4, "consumerOffset": 4}
    assert [key.as_dict() for key in table] == [MQ0, MQ1]
    assert doc["consumeTps"] == 0.0


def test_nested_object_keys() -> None:
    text = '{{"a":{"b":[1,{"c":2}]},"z":null}:{{"inner":1}:[{5:"five"}]}}'
    doc = loads(text)
    (outer_key,) = doc
    assert outer_key.as_dict() == {"a": {"b": [1, {"c": 2}]}, "z": None}
    assert hash(outer_key) == hash(ObjectKey.of({"z": None, "a": {"b": [1, {"c": 2}]}}))
    (inner_key,) = doc[outer_key]
    assert inner_key == ObjectKey.of({"inner": 1})
    assert doc[outer_key][inner_key] == [{"5": "five"}]


def test_dumps_writes_fastjson_form_compact_and_sorted() -> None:
    assert dumps({"offsetTable": {"t@g": {10: 1, 2: 5}}}) == b'{"offsetTable":{"t@g":{2:5,10:1}}}'
    assert dumps({ObjectKey.of(MQ1): 2, ObjectKey.of(MQ0): 1}) == (
        b'{{"brokerName":"b","queueId":0,"topic":"t"}:1,'
        b'{"brokerName":"b","queueId":1,"topic":"t"}:2}'
    )
    # No odd keys: standard JSON, still compact and sorted.
    assert dumps({"b": [1.5, None], "a": "\u00e9\n"}) == b'{"a":"\xc3\xa9\\n","b":[1.5,null]}'
    # Integers beyond 64 bits and keys of the wrong kind.
    assert dumps({1: 2**70}) == b"{1:" + str(2**70).encode() + b"}"
    with pytest.raises(TypeError, match="map key"):
        dumps({1.5: 1, 1: 2})


def test_dumps_then_loads_with_object_keys() -> None:
    original = {"offsetTable": {ObjectKey.of(MQ0): {"x": [1, 2]}, ObjectKey.of(MQ1): {}}}
    assert loads(dumps(original)) == original


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (b"{", "expected an object key"),
        (b'{"a" 1}', "expected ':'"),
        (b"{0:}", "unexpected character '}'"),
        (b"[1,2", "expected ',' or ']'"),
        (b'{"a":1} x', "extra data"),
        (b"", "found the end of the text"),
        (b'{"a":tru}', "unexpected character 't'"),
        (b'{"a":"\\q"}', "Invalid \\escape"),
        (b'{"a":"open', "Unterminated string"),
        (b"{1:2,}", "expected an object key"),
        (b"\xff\xfe", "not UTF-8"),
        (b"{" + b"{0:" * 600 + b"1" + b"}" * 601, "nesting deeper"),
    ],
)
def test_bad_input_raises_value_error_with_position(text: bytes, where: str) -> None:
    with pytest.raises(FastjsonDecodeError) as caught:
        loads(text)
    assert isinstance(caught.value, ValueError)
    assert where in str(caught.value)
    assert "line 1 column" in str(caught.value)


def test_error_position_counts_lines() -> None:
    with pytest.raises(FastjsonDecodeError, match="line 3 column 3"):
        loads("{\n0:1,\n1:}")


# -- properties ---------------------------------------------------------------------------------

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
PLAIN = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
KEYS = st.text(max_size=6) | st.builds(
    ObjectKey.of, st.dictionaries(st.text(max_size=4), SCALARS, max_size=3)
)
WITH_OBJECT_KEYS = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(WITH_OBJECT_KEYS)
def test_round_trip_with_object_keys(value: Any) -> None:
    assert loads(dumps(value)) == value


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.integers(-(2**31), 2**31), PLAIN, max_size=6))
def test_int_keys_come_back_as_their_text(table: dict[int, Any]) -> None:
    assert loads(dumps({"t": table})) == {"t": {str(key): value for key, value in table.items()}}


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=40) | st.text(alphabet='{}[]:,"0123 abtrue-', max_size=40))
def test_garbage_raises_only_value_error(data: bytes | str) -> None:
    try:
        loads(data)
    except ValueError:
        pass
