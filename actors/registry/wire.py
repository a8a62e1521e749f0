"""The registry's bodies on the wire: thin helpers over `protocol.bodies`.

Route answers are not built here: `RouteTable` encodes them itself (compact, quoted broker-id
keys, both sys-flag spellings) and caches the bytes per topic.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping

from protocol.bodies import (
    BodyError,
    DataVersion,
    KVTable,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
)

__all__ = [
    "BodyError",
    "DataVersion",
    "RegisterBrokerBody",
    "TopicConfig",
    "body_crc32",
    "decode_register_body",
    "encode_register_body",
    "kv_table",
    "topic_list",
]


def body_crc32(body: bytes | bytearray | memoryview) -> int:
    """CRC32 masked to 31 bits, as RocketMQ's UtilAll.crc32 (sheet 5.8)."""
    return zlib.crc32(body) & 0x7FFFFFFF


def decode_register_body(
    body: bytes | bytearray | memoryview | None, compressed: bool
) -> RegisterBrokerBody:
    """Decode a REGISTER_BROKER body; no body means version 0/0 and no topics (as Java).

    Raises `BodyError` (a ValueError) with a readable reason.
    """
    if not body:
        return RegisterBrokerBody()
    return RegisterBrokerBody.decode(body, compressed)


def encode_register_body(
    data_version: DataVersion,
    topics: Iterable[TopicConfig],
    filter_servers: Iterable[str] = (),
    *,
    compressed: bool = False,
) -> bytes:
    """Encode a RegisterBrokerBody as a broker sends it (for tests and benchmarks)."""
    wrapper = TopicConfigSerializeWrapper(
        topic_config_table={t.topic_name: t for t in topics}, data_version=data_version
    )
    body = RegisterBrokerBody(
        topic_config_serialize_wrapper=wrapper, filter_server_list=list(filter_servers)
    )
    return body.encode(compressed)


def topic_list(topics: Iterable[str], broker_addr: str | None = None) -> bytes:
    """A TopicList body."""
    return TopicList(topic_list=list(topics), broker_addr=broker_addr).to_json()


def kv_table(table: Mapping[str, str]) -> bytes:
    """A KVTable body."""
    return KVTable(table=dict(table)).to_json()
