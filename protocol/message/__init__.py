"""The message codec: the stored record, batch bodies, properties and message ids.

- ``_record``: the RocketMQ 4.x record (the commit-log layout that is also a pull answer's
  body): `encode_record`, `patch_record`, `decode_record`, `decode_records`, `MessageExt`.
- ``_batch``: SEND_BATCH_MESSAGE bodies (`encode_batch`, `decode_batch`).
- ``_properties``: property keys (`MessageConst`), the properties string, `tag_hash_code`.
- ``_msg_id``: offset msg ids (store host + commit-log offset) and client UNIQ_KEY ids.
- ``_format``: what they share: `MessageFormatError`, magic codes, limits, `MessageSysFlag`,
  body CRC and compression, host fields.

Import every name from this package.
"""

from protocol.message._batch import (
    BatchElement,
    decode_batch,
    decode_batch_tuples,
    encode_batch,
    encode_batch_tuples,
)
from protocol.message._format import (
    BLANK_MAGIC_CODE,
    MAGIC_CODE,
    MAX_PROPERTIES_BYTES,
    MAX_TOPIC_BYTES,
    Buffer,
    Host,
    MessageFormatError,
    MessageSysFlag,
    body_crc,
    compress_body,
    crc32,
    decompress_body,
)
from protocol.message._msg_id import (
    create_uniq_id,
    decode_offset_msg_id,
    offset_msg_id,
    offset_msg_id_prefix,
)
from protocol.message._properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    MessageConst,
    properties_to_string,
    string_to_properties,
    tag_hash_code,
)
from protocol.message._record import (
    HEAD_SIZE,
    MessageExt,
    RecordPositions,
    decode_record,
    decode_records,
    encode_record,
    iter_records,
    patch_record,
    peek_record_header,
    record_field_positions,
    record_properties,
    record_size,
)

__all__ = [
    "BLANK_MAGIC_CODE",
    "HEAD_SIZE",
    "MAGIC_CODE",
    "MAX_PROPERTIES_BYTES",
    "MAX_TOPIC_BYTES",
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR",
    "BatchElement",
    "Buffer",
    "Host",
    "MessageConst",
    "MessageExt",
    "MessageFormatError",
    "MessageSysFlag",
    "RecordPositions",
    "body_crc",
    "compress_body",
    "crc32",
    "create_uniq_id",
    "decode_batch",
    "decode_batch_tuples",
    "decode_offset_msg_id",
    "decode_record",
    "decode_records",
    "decompress_body",
    "encode_batch",
    "encode_batch_tuples",
    "encode_record",
    "iter_records",
    "offset_msg_id",
    "offset_msg_id_prefix",
    "patch_record",
    "peek_record_header",
    "properties_to_string",
    "record_field_positions",
    "record_properties",
    "record_size",
    "string_to_properties",
    "tag_hash_code",
]
