"""The remoting frame codec, sans-IO: bytes in, `RemotingCommand`s out, and back.

Frame = ``int length`` (bytes that follow) + ``int header word`` (serialize type in the high
byte, header length in the low 24 bits) + header + body. Headers are JSON or the ROCKETMQ
binary layout; a response is written in the serialize type of its request.
"""

from __future__ import annotations

import struct
from typing import Any

import orjson

from protocol.codes import LanguageCode, SerializeType
from protocol.command import RemotingCommand

#: Java's NettyDecoder limit (com.rocketmq.remoting.frameMaxLength).
DEFAULT_FRAME_LIMIT = 16 * 1024 * 1024

_INT = struct.Struct(">i")
_PREFIX = struct.Struct(">iI")
_BIN_FIXED = struct.Struct(">hbhiii")  # code, language, version, opaque, flag, remark length
_SHORT = struct.Struct(">h")
_LANG_BY_NAME = {member.name: member for member in LanguageCode}
_LANG_BY_VALUE = {member.value: member for member in LanguageCode}


class FrameError(ValueError):
    """A frame that cannot be decoded: the connection that sent it must be closed."""


class FrameTooLargeError(FrameError):
    """A frame longer than the configured limit."""


def encode(command: RemotingCommand) -> bytes:
    """Encode one command as a whole frame (length prefix included)."""
    header = encode_header(command)
    body = command.body
    header_len = len(header)
    word = (int(command.serialize_type) << 24) | header_len
    if body is None or len(body) == 0:
        return _PREFIX.pack(4 + header_len, word) + header
    return b"".join((_PREFIX.pack(4 + header_len + len(body), word), header, body))


def encode_parts(command: RemotingCommand) -> tuple[bytes, bytes | bytearray | memoryview | None]:
    """Encode a frame as (prefix + header, body) so a writer can gather without copying twice."""
    header = encode_header(command)
    body = command.body
    header_len = len(header)
    word = (int(command.serialize_type) << 24) | header_len
    body_len = 0 if body is None else len(body)
    return _PREFIX.pack(4 + header_len + body_len, word) + header, (body if body_len else None)


def encode_header(command: RemotingCommand) -> bytes:
    """The header bytes in the command's serialize type."""
    if command.serialize_type == SerializeType.ROCKETMQ:
        return _encode_binary_header(command)
    doc: dict[str, Any] = {
        "code": command.code,
        "language": command.language.name,
        "version": command.version,
        "opaque": command.opaque,
        "flag": command.flag,
    }
    if command.remark is not None:
        doc["remark"] = command.remark
    if command.ext_fields is not None:
        doc["extFields"] = command.ext_fields
    return orjson.dumps(doc)


def decode(
    frame: bytes | bytearray | memoryview, limit: int = DEFAULT_FRAME_LIMIT
) -> RemotingCommand:
    """Decode exactly one whole frame (as one websocket message carries), prefix included."""
    view = memoryview(frame)
    if len(view) < 8:
        raise FrameError(f"frame of {len(view)} bytes is shorter than its 8-byte prefix")
    (length,) = _INT.unpack_from(view, 0)
    if length > limit:
        raise FrameTooLargeError(f"frame length {length} exceeds the limit of {limit} bytes")
    if length != len(view) - 4:
        raise FrameError(f"frame length field says {length} but {len(view) - 4} bytes follow it")
    return _decode_payload(view, 4, length)


class FrameDecoder:
    """Incremental decoder for a byte stream: feed whatever a receive returned, get commands."""

    __slots__ = ("_buf", "limit")

    def __init__(self, limit: int = DEFAULT_FRAME_LIMIT) -> None:
        self.limit = limit
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes held that do not yet make a whole frame."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        """Add received bytes; return every command they complete (possibly none)."""
        if self._buf:
            self._buf += data
            source: bytes | bytearray | memoryview = self._buf
        else:
            source = data
        view = memoryview(source)
        total = len(view)
        pos = 0
        out: list[RemotingCommand] = []
        limit = self.limit
        while total - pos >= 4:
            (length,) = _INT.unpack_from(view, pos)
            if length < 4 or length > limit:
                view.release()
                if length > limit:
                    raise FrameTooLargeError(
                        f"frame length {length} exceeds the limit of {limit} bytes"
                    )
                raise FrameError(f"frame length {length} is smaller than the 4-byte header word")
            end = pos + 4 + length
            if end > total:
                break
            out.append(_decode_payload(view, pos + 4, length))
            pos = end
        view.release()
        if source is self._buf:
            del self._buf[:pos]
        elif pos < total:
            self._buf += memoryview(source)[pos:]
        return out


def _decode_payload(view: memoryview, start: int, length: int) -> RemotingCommand:
    """Decode header word + header + body at ``view[start:start+length]``."""
    (word,) = struct.unpack_from(">I", view, start)
    serialize = word >> 24
    header_len = word & 0x00FFFFFF
    header_start = start + 4
    body_start = header_start + header_len
    end = start + length
    if body_start > end:
        raise FrameError(f"header length {header_len} overruns the frame of {length} bytes")
    header = view[header_start:body_start]
    if serialize == SerializeType.JSON:
        command = _decode_json_header(header)
    elif serialize == SerializeType.ROCKETMQ:
        command = _decode_binary_header(header)
    else:
        raise FrameError(f"unknown serialize type {serialize} in the header word")
    if end > body_start:
        command.body = bytes(view[body_start:end])
    return command


def _coerce(value: Any) -> str:
    # The C++ client sends numbers and booleans in extFields; Java reads them as strings.
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (dict, list)):
        return orjson.dumps(value).decode()
    raise FrameError(f"extFields value {value!r} is not a JSON scalar")


def _decode_json_header(header: memoryview) -> RemotingCommand:
    try:
        doc = orjson.loads(header)
    except orjson.JSONDecodeError as exc:
        raise FrameError(f"JSON header does not parse: {exc}") from None
    if not isinstance(doc, dict):
        raise FrameError("JSON header is not an object")
    code = doc.get("code")
    opaque = doc.get("opaque", 0)
    flag = doc.get("flag", 0)
    version = doc.get("version", 0)
    if type(code) is not int or type(opaque) is not int or type(flag) is not int:
        raise FrameError("JSON header needs integer code, opaque and flag")
    if type(version) is not int:
        version = 0
    language = doc.get("language")
    if isinstance(language, str):
        lang = _LANG_BY_NAME.get(language, LanguageCode.OTHER)
    elif isinstance(language, int):
        lang = _LANG_BY_VALUE.get(language, LanguageCode.OTHER)
    else:
        lang = LanguageCode.OTHER
    remark = doc.get("remark")
    if remark is not None and not isinstance(remark, str):
        remark = str(remark)
    ext = doc.get("extFields")
    ext_fields: dict[str, str] | None
    if ext is None:
        ext_fields = None
    elif isinstance(ext, dict):
        ext_fields = ext
        for value in ext.values():
            if type(value) is not str:
                ext_fields = {
                    k: v if type(v) is str else _coerce(v) for k, v in ext.items() if v is not None
                }
                break
    else:
        raise FrameError("JSON header extFields is not an object")
    return RemotingCommand(
        code,
        opaque=opaque,
        flag=flag,
        language=lang,
        version=version,
        remark=remark,
        ext_fields=ext_fields,
        serialize_type=SerializeType.JSON,
    )


def _encode_binary_header(command: RemotingCommand) -> bytes:
    remark = b"" if command.remark is None else command.remark.encode()
    parts = [
        _BIN_FIXED.pack(
            command.code,
            int(command.language),
            command.version,
            command.opaque,
            command.flag,
            len(remark),
        ),
        remark,
    ]
    entries: list[bytes] = []
    if command.ext_fields:
        for key, value in command.ext_fields.items():
            kb = key.encode()
            vb = value.encode()
            entries.append(_SHORT.pack(len(kb)) + kb + _INT.pack(len(vb)) + vb)
    block = b"".join(entries)
    parts.append(_INT.pack(len(block)))
    parts.append(block)
    return b"".join(parts)


def _decode_binary_header(header: memoryview) -> RemotingCommand:
    size = len(header)
    if size < 21:
        raise FrameError(f"ROCKETMQ header of {size} bytes is shorter than its 21-byte fixed part")
    code, language, version, opaque, flag, remark_len = _BIN_FIXED.unpack_from(header, 0)
    pos = 17
    if remark_len < 0 or pos + remark_len + 4 > size:
        raise FrameError("ROCKETMQ header remark overruns the header")
    remark = (
        bytes(header[pos : pos + remark_len]).decode("utf-8", "replace") if remark_len else None
    )
    pos += remark_len
    (map_len,) = _INT.unpack_from(header, pos)
    pos += 4
    if map_len < 0 or pos + map_len != size:
        raise FrameError("ROCKETMQ header extFields block does not match the header length")
    ext: dict[str, str] | None = None
    if map_len:
        ext = {}
        end = pos + map_len
        while pos < end:
            if pos + 2 > end:
                raise FrameError("ROCKETMQ header extFields entry is truncated")
            (klen,) = _SHORT.unpack_from(header, pos)
            pos += 2
            if klen < 0 or pos + klen + 4 > end:
                raise FrameError("ROCKETMQ header extFields key overruns the block")
            key = bytes(header[pos : pos + klen]).decode("utf-8", "replace")
            pos += klen
            (vlen,) = _INT.unpack_from(header, pos)
            pos += 4
            if vlen < 0 or pos + vlen > end:
                raise FrameError("ROCKETMQ header extFields value overruns the block")
            ext[key] = bytes(header[pos : pos + vlen]).decode("utf-8", "replace")
            pos += vlen
    return RemotingCommand(
        code,
        opaque=opaque,
        flag=flag,
        language=_LANG_BY_VALUE.get(language, LanguageCode.OTHER),
        version=version,
        remark=remark,
        ext_fields=ext,
        serialize_type=SerializeType.ROCKETMQ,
    )
