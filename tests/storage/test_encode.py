"""The put path's IPv4 record encoder writes exactly what protocol.message.encode_record does."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.message import decode_record, encode_record
from storage._encode import fast_encode_record
from storage._record import RECORD, check_record, patch_append_fields, read_dispatch_request

hosts = st.sampled_from(
    [
        ("127.0.0.1", 10911),
        ("10.1.2.3", 0),
        ("::ffff:192.168.0.9", 5000),
        ("255.255.255.255", 65535),
    ]
)


@given(
    topic=st.text(st.characters(min_codepoint=48, max_codepoint=122), min_size=1, max_size=40),
    body=st.binary(max_size=3000),
    queue_id=st.integers(0, 1023),
    flag=st.integers(-(2**31), 2**31 - 1),
    properties=st.text(max_size=200),
    sys_flag=st.sampled_from([0, 0x1, 0x2, 0x4, 0x8, 0xC, 0x301]),
    born_timestamp=st.integers(0, 2**62),
    born_host=hosts,
    store_host=hosts,
    reconsume_times=st.integers(0, 16),
    prepared=st.integers(0, 2**40),
)
@settings(max_examples=200, deadline=None)
def test_fast_encoder_matches_the_codec(
    topic: str, body: bytes, queue_id: int, flag: int, properties: str, sys_flag: int,
    born_timestamp: int, born_host: tuple[str, int], store_host: tuple[str, int],
    reconsume_times: int, prepared: int,
) -> None:  # fmt: skip
    props = properties.encode()
    fast = fast_encode_record(
        topic, body, queue_id, flag, props, sys_flag, born_timestamp, born_host, store_host,
        reconsume_times, prepared,
    )  # fmt: skip
    assert fast is not None
    reference = encode_record(
        topic=topic, body=body, queue_id=queue_id, flag=flag, properties=props,
        sys_flag=sys_flag, born_timestamp=born_timestamp, born_host=born_host,
        store_host=store_host, reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared,
    )  # fmt: skip
    assert fast == reference
    patch_append_fields(fast, 0, 7, 4096, 1234)
    assert check_record(memoryview(fast), 0, 4096, 1 << 20, True).kind == RECORD
    decoded = decode_record(fast, check_crc=True)
    assert (decoded.queue_offset, decoded.commit_log_offset, decoded.store_timestamp) == (
        7,
        4096,
        1234,
    )
    meta = read_dispatch_request(memoryview(fast), 0)
    assert (meta.topic, meta.queue_id, meta.msg_size) == (topic, queue_id, len(fast))


def test_ipv6_hosts_fall_back_to_the_codec() -> None:
    assert fast_encode_record("T", b"", 0, 0, b"", 0, 0, ("::1", 1), ("127.0.0.1", 2), 0, 0) is None


@given(
    elements=st.lists(
        st.tuples(
            st.integers(-(2**31), 2**31 - 1),
            st.binary(max_size=500),
            st.sampled_from(["", "TAGS\x01A", "UNIQ_KEY\x01U1\x02KEYS\x01k1 k2", "TAGS\x01B\x02"]),
        ),
        min_size=1,
        max_size=10,
    ),
    header_props=st.sampled_from(["", "WAIT\x01true", "CLUSTER\x01C"]),
)
@settings(max_examples=100, deadline=None)
def test_batch_fast_path_matches_the_generic_one(
    elements: list[tuple[int, bytes, str]], header_props: str
) -> None:
    from storage import _encode
    from storage.results import MessageBatch

    batch = MessageBatch(
        topic="Batched", queue_id=2, elements=elements, properties=header_props,
        sys_flag=0, born_timestamp=99, born_host=("10.0.0.9", 4000), reconsume_times=1,
    )  # fmt: skip
    fast = _encode._encode_batch_ipv4(batch, ("127.0.0.1", 10911), 1 << 20)
    # Each element encoded by the reference encoder, back to back, byte for byte.
    assert fast is not None and not isinstance(fast, _encode.PutMessageResult)
    expected = bytearray()
    for flag, body, props in elements:
        text = props
        if header_props:
            if text and not text.endswith("\x02"):
                text += "\x02"
            text += header_props
        expected += encode_record(
            topic="Batched", body=body, queue_id=2, flag=flag, properties=text,
            born_timestamp=99, born_host=("10.0.0.9", 4000), store_host=("127.0.0.1", 10911),
            reconsume_times=1,
        )  # fmt: skip
    assert fast.data == expected
    assert [d[0] != 0 for d in fast.dispatch] == ["TAGS" in p for _, _, p in elements]
