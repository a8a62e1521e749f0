"""Typed headers: golden client captures, round trips, V2 letters and error remarks."""

from __future__ import annotations

import json
import re
import types
import typing
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingError
from protocol.headers import (
    MSG_REGION,
    REQUEST_HEADERS,
    RESPONSE_HEADERS,
    SEND_V2_KEYS,
    TRACE_ON,
    CreateTopicRequestHeader,
    DeleteTopicRequestHeader,
    GetMaxOffsetRequestHeader,
    GetRouteInfoRequestHeader,
    PullMessageRequestHeader,
    QueryDataVersionResponseHeader,
    QueryMessageRequestHeader,
    RegisterBrokerRequestHeader,
    ResetOffsetRequestHeader,
    SendFields,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    UnregisterClientRequestHeader,
    _send_pull,
    decode_header,
    decode_request_header,
    decode_send_fields,
    decode_send_header,
    encode_header,
    encode_send_header_v2,
    encode_send_response,
    wire_keys,
)

# Real client frames (Java, C++, Go, Node), one JSON object per line (sheet section 11).
CAPTURES = Path(__file__).resolve().parent / "data" / "client-captures.jsonl"

# Verbatim extFields of real client frames (sheet section 11), so these tests stand alone.
CPP_SEND = {
    "AccessKey": "",
    "OnsChannel": "ALIYUN",
    "Signature": "yrJNHkVEQkl/lMTI9vY3QJ9tRFc=",
    "batch": "0",
    "bornTimestamp": "1795346749782",
    "defaultTopic": "TBW102",
    "defaultTopicQueueNums": 4,
    "flag": 0,
    "producerGroup": "ProbePG",
    "properties": "KEYS\x01k1\x02TAGS\x01TagA\x02",
    "queueId": 0,
    "reconsumeTimes": "0",
    "sysFlag": 0,
    "topic": "ProbeTopic",
    "unitMode": "0",
}
CPP_PULL = {
    "AccessKey": "",
    "OnsChannel": "ALIYUN",
    "Signature": "Ztd6nPgvXOOWe0NNfnqgPA01uNE=",
    "commitOffset": "-1",
    "consumerGroup": "ProbeCG",
    "maxMsgNums": 32,
    "queueId": 0,
    "queueOffset": "0",
    "subVersion": "1795346750287",
    "subscription": "*",
    "suspendTimeoutMillis": "15000",
    "sysFlag": 6,
    "topic": "%RETRY%ProbeCG",
}
CPP_UNREGISTER = {
    "AccessKey": "",
    "OnsChannel": "ALIYUN",
    "Signature": "TPe2Z0oTrqf/bhaoR/7FOy8ANgU=",
    "clientID": "14043-127.0.0.1@DEFAULT",
    "consumerGroup": "",
    "producerGroup": "ProbePG",
}
JAVA_BATCH_V2 = {
    "a": "DemoPG_268ff60a",
    "b": "Demo_268ff60a",
    "c": "TBW102",
    "d": "4",
    "e": "2",
    "f": "0",
    "g": "1795350272982",
    "h": "0",
    "i": "WAIT\x01true",
    "j": "0",
    "k": "false",
    "m": "true",
}
ALI_ONS_V2 = {
    "a": "ProbeJSPG",
    "b": "ProbeTopicJS",
    "c": "TBW102",
    "d": 4,
    "e": 2,
    "f": 0,
    "g": 1795346819001,
    "h": 0,
    "i": "TAGS\x01TagA\x02KEYS\x01jk0\x02",
    "j": 0,
    "k": False,
}
ALI_ONS_CREATE_TOPIC = {
    "topic": "Demo_f51e3264",
    "defaultTopic": "TBW102",
    "readQueueNums": 4,
    "writeQueueNums": 4,
    "perm": 6,
    "topicFilterType": "SINGLE_TAG",
    "topicSysFlag": 0,
    "order": False,
}


def load_captures() -> list[dict[str, Any]]:
    """Every capture line."""
    return [json.loads(line) for line in CAPTURES.read_text().splitlines() if line.strip()]


# -- golden inputs ------------------------------------------------------------------------------


def test_cpp_send_with_numbers_and_zero_one_booleans() -> None:
    header = decode_request_header(RequestCode.SEND_MESSAGE, CPP_SEND)
    assert header == SendMessageRequestHeader(
        producer_group="ProbePG",
        topic="ProbeTopic",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=0,
        sys_flag=0,
        born_timestamp=1795346749782,
        flag=0,
        properties="KEYS\x01k1\x02TAGS\x01TagA\x02",
        reconsume_times=0,
        unit_mode=False,
        batch=False,
    )


def test_cpp_pull() -> None:
    header = decode_header(PullMessageRequestHeader, CPP_PULL)
    assert header.commit_offset == -1
    assert header.max_msg_nums == 32
    assert header.sys_flag == 6
    assert header.sub_version == 1795346750287
    assert header.subscription == "*"
    assert header.expression_type is None


def test_cpp_unregister_blank_group_is_absent() -> None:
    header = decode_header(UnregisterClientRequestHeader, CPP_UNREGISTER)
    assert header.client_id == "14043-127.0.0.1@DEFAULT"
    assert header.producer_group == "ProbePG"
    assert header.consumer_group is None
    assert "consumerGroup" not in encode_header(header)
    assert encode_header(header)["clientID"] == "14043-127.0.0.1@DEFAULT"


def test_java_batch_is_decided_by_m_flag() -> None:
    header = decode_request_header(RequestCode.SEND_BATCH_MESSAGE, JAVA_BATCH_V2)
    assert header.batch is True
    assert header.topic == "Demo_268ff60a"
    assert header.born_timestamp == 1795350272982
    # The C++ client sends batches as code 310; the flag decides there too.
    assert decode_request_header(RequestCode.SEND_MESSAGE_V2, JAVA_BATCH_V2).batch is True


def test_ali_ons_v2_numbers_and_json_booleans() -> None:
    header = decode_send_header(ALI_ONS_V2, v2=True)
    assert header.queue_id == 2
    assert header.born_timestamp == 1795346819001
    assert header.unit_mode is False
    assert header.batch is False
    assert header.max_reconsume_times is None


def test_ali_ons_create_topic() -> None:
    header = decode_header(CreateTopicRequestHeader, ALI_ONS_CREATE_TOPIC)
    assert (header.read_queue_nums, header.perm, header.order) == (4, 6, False)
    assert header.topic_filter_type == "SINGLE_TAG"


def test_every_capture_decodes_into_its_header_class() -> None:
    decoded = 0
    for capture in load_captures():
        ext = json.loads(capture["raw_header"]).get("extFields")
        header = decode_request_header(capture["code"], ext)
        cls = REQUEST_HEADERS.get(capture["code"])
        if cls is None:
            assert header is None
            continue
        assert isinstance(header, cls), capture["name"]
        decoded += 1
        # Whatever the client sent, the decoded header re-encodes to strings that decode back.
        again = encode_header(header)
        assert all(type(value) is str for value in again.values())
        assert decode_header(cls, again) == header
        if isinstance(header, SendMessageRequestHeader):
            assert decode_send_header(encode_send_header_v2(header), v2=True) == header
    assert decoded >= 25


# -- encoding -----------------------------------------------------------------------------------


def test_encode_is_strings_with_true_false_and_no_none() -> None:
    header = RegisterBrokerRequestHeader(
        broker_name="broker-a",
        broker_addr="10.0.0.1:10911",
        cluster_name="DefaultCluster",
        ha_server_addr="10.0.0.1:10912",
        broker_id=0,
        compressed=True,
        body_crc32=123,
    )
    assert encode_header(header) == {
        "brokerName": "broker-a",
        "brokerAddr": "10.0.0.1:10911",
        "clusterName": "DefaultCluster",
        "haServerAddr": "10.0.0.1:10912",
        "brokerId": "0",
        "compressed": "true",
        "bodyCrc32": "123",
    }
    assert encode_header(GetRouteInfoRequestHeader(topic="T")) == {"topic": "T"}
    assert encode_header(QueryDataVersionResponseHeader(changed=False)) == {"changed": "false"}


def test_send_response_carries_region_and_trace() -> None:
    ext = encode_send_response(
        SendMessageResponseHeader(
            msg_id="0A00000100002A9F0000000000000000", queue_id=3, queue_offset=7
        )
    )
    assert ext == {
        "msgId": "0A00000100002A9F0000000000000000",
        "queueId": "3",
        "queueOffset": "7",
        MSG_REGION: "DefaultRegion",
        TRACE_ON: "true",
    }
    ext = encode_send_response(
        SendMessageResponseHeader(msg_id="X", queue_id=0, queue_offset=0, transaction_id="T1"),
        region="eu",
        trace_on=False,
    )
    assert (ext["transactionId"], ext[MSG_REGION], ext[TRACE_ON]) == ("T1", "eu", "false")


def test_wire_key_oddities() -> None:
    assert wire_keys(UnregisterClientRequestHeader)["client_id"] == "clientID"
    assert wire_keys(SendMessageRequestHeader)["broker_name"] == "bname"
    assert wire_keys(QueryMessageRequestHeader)["unique_key_query"] == "_UNIQUE_KEY_QUERY"
    assert wire_keys(ResetOffsetRequestHeader)["is_force"] == "isForce"
    assert wire_keys(GetRouteInfoRequestHeader)["accept_standard_json_only"] == (
        "acceptStandardJsonOnly"
    )


def test_v2_letters_follow_the_sheet() -> None:
    assert SEND_V2_KEYS == {
        "producer_group": "a",
        "topic": "b",
        "default_topic": "c",
        "default_topic_queue_nums": "d",
        "queue_id": "e",
        "sys_flag": "f",
        "born_timestamp": "g",
        "flag": "h",
        "properties": "i",
        "reconsume_times": "j",
        "unit_mode": "k",
        "max_reconsume_times": "l",
        "batch": "m",
        "broker_name": "n",
    }
    header = decode_send_header(JAVA_BATCH_V2)
    assert encode_send_header_v2(header) == {**JAVA_BATCH_V2, "m": "true"}


# -- errors -------------------------------------------------------------------------------------


def test_missing_required_field_names_class_and_field() -> None:
    ext = {key: value for key, value in CPP_SEND.items() if key != "topic"}
    with pytest.raises(RemotingError) as caught:
        decode_request_header(RequestCode.SEND_MESSAGE, ext)
    assert caught.value.code == ResponseCode.SYSTEM_ERROR
    assert caught.value.remark == (
        "the request header field 'topic' of SendMessageRequestHeader is missing"
    )


def test_bad_v2_value_names_both_keys() -> None:
    with pytest.raises(
        RemotingError, match=r"'queueId' \('e'\) .* 'x', which is not a valid integer"
    ):
        decode_send_header({**JAVA_BATCH_V2, "e": "x"})


def test_missing_v2_field_names_both_keys() -> None:
    ext = {key: value for key, value in JAVA_BATCH_V2.items() if key != "e"}
    with pytest.raises(RemotingError, match=r"'queueId' \('e'\) of SendMessageRequestHeader"):
        decode_send_header(ext, v2=True)


@pytest.mark.parametrize(
    ("field", "value", "word"),
    [("queueId", "abc", "integer"), ("queueId", "1.5", "integer"), ("topic", [1], "string")],
)
def test_unparseable_value_names_field(field: str, value: Any, word: str) -> None:
    ext = {"topic": "T", "queueId": "1", field: value}
    with pytest.raises(RemotingError) as caught:
        decode_header(GetMaxOffsetRequestHeader, ext)
    assert caught.value.code == ResponseCode.SYSTEM_ERROR
    assert f"'{field}' of GetMaxOffsetRequestHeader" in caught.value.remark
    assert word in caught.value.remark


def test_bad_boolean_and_null_required() -> None:
    ext = {"topic": "T", "acceptStandardJsonOnly": "maybe"}
    with pytest.raises(RemotingError, match=r"acceptStandardJsonOnly.*boolean"):
        decode_header(GetRouteInfoRequestHeader, ext)
    with pytest.raises(RemotingError, match="'topic' of GetRouteInfoRequestHeader is missing"):
        decode_header(GetRouteInfoRequestHeader, {"topic": None})
    with pytest.raises(RemotingError, match=r"'topic' .* is missing"):
        decode_header(GetRouteInfoRequestHeader, None)


@pytest.mark.parametrize("text", ["true", "TRUE", "True", "1", True, 1])
def test_true_spellings(text: Any) -> None:
    header = decode_header(
        GetRouteInfoRequestHeader, {"topic": "T", "acceptStandardJsonOnly": text}
    )
    assert header.accept_standard_json_only is True


@pytest.mark.parametrize("text", ["false", "FALSE", "0", False, 0])
def test_false_spellings(text: Any) -> None:
    header = decode_header(
        GetRouteInfoRequestHeader, {"topic": "T", "acceptStandardJsonOnly": text}
    )
    assert header.accept_standard_json_only is False


def test_codes_without_header() -> None:
    assert decode_request_header(RequestCode.HEART_BEAT, {"Signature": "x"}) is None
    assert decode_request_header(99999, None) is None


# -- property: every header class round-trips, whatever scalar types the sender used -----------

ALL_HEADERS = sorted(set(REQUEST_HEADERS.values()) | set(RESPONSE_HEADERS.values()), key=str)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
TEXT = st.text(st.characters(codec="utf-8"), max_size=20)


def strategy_for(annotation: Any) -> st.SearchStrategy[Any]:
    """Values for one header field type (``int | None`` included)."""
    args = typing.get_args(annotation)
    if isinstance(annotation, types.UnionType):
        inner = next(arg for arg in args if arg is not type(None))
        return st.none() | strategy_for(inner)
    return {int: INT64, bool: st.booleans(), str: TEXT}[annotation]


def header_strategy(cls: type) -> st.SearchStrategy[Any]:
    """Instances of a header class with every field drawn."""
    hints = typing.get_type_hints(cls)
    fields = {field.name: strategy_for(hints[field.name]) for field in attrs.fields(cls)}
    return st.builds(cls, **fields)


def cpp_style(value: str, kind: Any, draw: st.DrawFn) -> Any:
    """How a C++ or Node client might have sent one encoded value of a field of type ``kind``
    (a string field stays a string: "true" in a topic name is text, not a boolean)."""
    if kind is str:
        return value
    if value in ("true", "false"):
        return draw(st.sampled_from([value, value == "true", "1" if value == "true" else "0"]))
    if re.fullmatch(r"-?[0-9]+", value) and str(int(value)) == value:
        return draw(st.sampled_from([value, int(value)]))
    return value


def _wire_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    types: dict[str, Any] = {}
    for name, key in wire_keys(cls).items():
        hint = hints[name]
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        types[key] = args[0] if args else hint
    return types


@st.composite
def header_and_wire(draw: st.DrawFn) -> tuple[Any, dict[str, Any]]:
    cls = draw(st.sampled_from(ALL_HEADERS))
    header = draw(header_strategy(cls))
    types = _wire_types(cls)
    ext = {
        key: cpp_style(value, types.get(key, str), draw)
        for key, value in encode_header(header).items()
    }
    ext["Signature"] = "ignored"
    return header, ext


@settings(max_examples=200, deadline=None)
@given(header_and_wire())
@example((DeleteTopicRequestHeader(topic="true"), {"topic": "true", "Signature": "x"}))
def test_round_trip_with_mixed_scalars(case: tuple[Any, dict[str, Any]]) -> None:
    header, ext = case
    assert decode_header(type(header), ext) == header
    assert all(type(value) is str for value in encode_header(header).values())


@settings(max_examples=200, deadline=None)
@given(header_strategy(SendMessageRequestHeader))
def test_send_v1_and_v2_agree(header: SendMessageRequestHeader) -> None:
    v1 = encode_header(header)
    v2 = encode_send_header_v2(header)
    assert set(v2) <= set("abcdefghijklmn")
    assert decode_send_header(v1) == decode_send_header(v2) == header
    assert decode_request_header(RequestCode.SEND_MESSAGE_V2, v2) == header


# -- the send path's direct decode (decode_send_fields) -----------------------------------------


# The one in use (compiled when built) and the pure one.
_SEND_FIELD_DECODERS = (decode_send_fields, _send_pull._decode_send_fields_py)


def _fields_of(header: SendMessageRequestHeader) -> tuple[Any, ...]:
    return attrs.astuple(header, recurse=False)


def test_send_fields_name_the_header_fields_in_order() -> None:
    # SendFields repeats SendMessageRequestHeader's field list (a typed tuple for the hot
    # path): the two must not drift apart.
    assert SendFields._fields == tuple(f.name for f in attrs.fields(SendMessageRequestHeader))
    defaults = {f.name: f.default for f in attrs.fields(SendMessageRequestHeader)}
    assert SendFields._field_defaults == {
        name: value for name, value in defaults.items() if value is not attrs.NOTHING
    }


@settings(max_examples=300, deadline=None)
@given(header_strategy(SendMessageRequestHeader), st.data())
def test_send_fields_agree_with_the_generic_decoder(
    header: SendMessageRequestHeader, data: st.DataObject
) -> None:
    v2 = encode_send_header_v2(header)
    # Wire values as any client sends them (numbers, 0/1 booleans: the generic path's share).
    mixed = {key: cpp_style(value, _V2_TYPES[key], data.draw) for key, value in v2.items()}
    for ext in (v2, mixed, encode_header(header)):
        for decode in _SEND_FIELD_DECODERS:
            fields = decode(ext)
            assert tuple(fields) == _fields_of(decode_send_header(ext)) == _fields_of(header)
            assert fields.topic == header.topic and fields.batch == header.batch


_V2_TYPES = {
    SEND_V2_KEYS[name]: _wire_types(SendMessageRequestHeader)[key]
    for name, key in wire_keys(SendMessageRequestHeader).items()
}


@pytest.mark.parametrize(
    ("key", "value"),
    [("e", "three"), ("g", ""), ("d", None), ("m", "maybe"), ("j", "1.5")],
)
def test_send_fields_refuse_as_the_generic_decoder(key: str, value: Any) -> None:
    ext: dict[str, Any] = dict(encode_send_header_v2(_SEND))
    ext[key] = value
    with pytest.raises(RemotingError) as generic:
        decode_send_header(ext)
    for decode in _SEND_FIELD_DECODERS:
        with pytest.raises(RemotingError) as direct:
            decode(ext)
        assert direct.value.code == generic.value.code == ResponseCode.SYSTEM_ERROR
        assert direct.value.remark == generic.value.remark


def test_send_fields_missing_field_and_other_spellings() -> None:
    ext = dict(encode_send_header_v2(_SEND))
    del ext["c"]
    spelled = dict(encode_send_header_v2(_SEND), m="TRUE", k="0")
    for decode in _SEND_FIELD_DECODERS:
        with pytest.raises(RemotingError, match="'defaultTopic' \\('c'\\)"):
            decode(ext)
        fields = decode(spelled)
        assert fields.batch is True and fields.unit_mode is False
        assert tuple(fields) == _fields_of(attrs.evolve(_SEND, batch=True))


_SEND = SendMessageRequestHeader(
    producer_group="pg",
    topic="TopicTest",
    default_topic="TBW102",
    default_topic_queue_nums=4,
    queue_id=3,
    sys_flag=0,
    born_timestamp=1795346749782,
    flag=0,
    properties="KEYS\x01k1\x02TAGS\x01TagA",
    reconsume_times=0,
)
