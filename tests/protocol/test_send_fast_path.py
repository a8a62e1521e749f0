"""The producer's direct send header and send-response paths equal the generic codec's."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.command import RemotingError
from protocol.headers import (
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    decode_header,
    decode_send_response,
    encode_send_header_v2,
    send_v2_fields,
)
from protocol.message import BatchElement, encode_batch, encode_batch_tuples

_ints = st.integers(min_value=-(2**31), max_value=2**31 - 1)
_text = st.text(max_size=40)


@settings(deadline=None)
@given(
    group=_text, topic=_text, default_topic=_text, queue_nums=_ints, queue_id=_ints,
    sys_flag=_ints, born=st.integers(min_value=0, max_value=2**62), flag=_ints,
    properties=st.none() | _text, batch=st.booleans(),
)  # fmt: skip
def test_send_v2_fields_equal_the_encoded_header(
    group: str, topic: str, default_topic: str, queue_nums: int, queue_id: int, sys_flag: int,
    born: int, flag: int, properties: str | None, batch: bool,
) -> None:  # fmt: skip
    header = SendMessageRequestHeader(
        producer_group=group, topic=topic, default_topic=default_topic,
        default_topic_queue_nums=queue_nums, queue_id=queue_id, sys_flag=sys_flag,
        born_timestamp=born, flag=flag, properties=properties or None, reconsume_times=0,
        unit_mode=False, batch=batch,
    )  # fmt: skip
    fast = send_v2_fields(
        group, topic, default_topic, queue_nums, queue_id, sys_flag, born, flag, properties,
        batch=batch,
    )  # fmt: skip
    generic = encode_send_header_v2(header)
    assert fast == generic
    assert list(fast) == list(generic)  # same key order, so the same JSON bytes


@settings(deadline=None)
@given(
    msg_id=_text, queue_id=_ints, offset=st.integers(min_value=0, max_value=2**62),
    transaction_id=st.none() | _text,
)  # fmt: skip
def test_send_response_decodes_as_the_generic_decoder(
    msg_id: str, queue_id: int, offset: int, transaction_id: str | None
) -> None:
    ext = {"msgId": msg_id, "queueId": str(queue_id), "queueOffset": str(offset)}
    if transaction_id is not None:
        ext["transactionId"] = transaction_id
    ext["MSG_REGION"] = "DefaultRegion"
    assert decode_send_response(ext) == decode_header(SendMessageResponseHeader, ext)


@pytest.mark.parametrize(
    "ext",
    [
        {"msgId": "A", "queueId": 3, "queueOffset": 7},  # numbers, as the C++ broker sends
        {"msgId": "A", "queueId": "3", "queueOffset": "7", "transactionId": 5},
    ],
)
def test_send_response_with_other_types_goes_through_the_generic_decoder(
    ext: dict[str, Any],
) -> None:
    assert decode_send_response(ext) == decode_header(SendMessageResponseHeader, ext)


@pytest.mark.parametrize(
    "ext",
    [None, {"msgId": "A", "queueId": "3"}, {"msgId": "A", "queueId": "x", "queueOffset": "1"}],
)
def test_bad_send_response_raises_the_generic_error(ext: dict[str, str] | None) -> None:
    with pytest.raises(RemotingError) as fast:
        decode_send_response(ext)
    with pytest.raises(RemotingError) as generic:
        decode_header(SendMessageResponseHeader, ext)
    assert fast.value.remark == generic.value.remark


@settings(deadline=None)
@given(
    batch=st.lists(st.tuples(_ints, st.binary(max_size=64), _text), max_size=8),
)
def test_encode_batch_tuples_equals_encode_batch(batch: list[tuple[int, bytes, str]]) -> None:
    elements = [BatchElement(flag, body, props) for flag, body, props in batch]
    assert encode_batch_tuples(batch) == encode_batch(elements)
