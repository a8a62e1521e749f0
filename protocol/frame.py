"""The remoting frame codec, sans-IO: bytes in, `RemotingCommand`s out, and back.

Frame = ``int length`` (bytes that follow) + ``int header word`` (serialize type in the high
byte, header length in the low 24 bits) + header + body. Headers are JSON or the ROCKETMQ
binary layout; a response is written in the serialize type of its request.
"""

from __future__ import annotations

import struct
from typing import Any

import orjson

from protocol.codes import CURRENT_VERSION, RESPONSE_FLAG, LanguageCode, SerializeType
from protocol.command import RemotingCommand

#: Java's NettyDecoder limit (com.rocketmq.remoting.frameMaxLength).
DEFAULT_FRAME_LIMIT = 16 * 1024 * 1024

_INT = struct.Struct(">i")
_PREFIX = struct.Struct(">iI")
_BIN_FIXED = struct.Struct(">hbhiii")  # code, language, version, opaque, flag, remark length
_SHORT = struct.Struct(">h")
_LANG_BY_NAME = {member.name: member for member in LanguageCode}
_LANG_BY_VALUE = {member.value: member for member in LanguageCode}
# Enum attribute and ``.name`` lookups cost more than a dict get on every frame.
_LANG_NAME = {member: member.name for member in LanguageCode}
_JSON = SerializeType.JSON
_ROCKETMQ = SerializeType.ROCKETMQ
_JAVA = LanguageCode.JAVA
_OTHER = LanguageCode.OTHER
_unpack_int = _INT.unpack_from
_unpack_word = struct.Struct(">I").unpack_from
_pack_prefix = _PREFIX.pack
_loads = orjson.loads
_dumps = orjson.dumps
_new_command = object.__new__


class FrameError(ValueError):
    """A frame that cannot be decoded: the connection that sent it must be closed."""


class FrameTooLargeError(FrameError):
    """A frame longer than the configured limit."""


def encode(command: RemotingCommand) -> bytes:
    """Encode one command as a whole frame (length prefix included)."""
    header = encode_header(command)
    body = command.body
    header_len = len(header)
    word = (command.serialize_type << 24) | header_len
    if body is None or len(body) == 0:
        return _pack_prefix(4 + header_len, word) + header
    return b"".join((_pack_prefix(4 + header_len + len(body), word), header, body))


def encode_parts(command: RemotingCommand) -> tuple[bytes, bytes | bytearray | memoryview | None]:
    """Encode a frame as (prefix + header, body) so a writer can gather without copying twice."""
    header = encode_header(command)
    body = command.body
    header_len = len(header)
    word = (command.serialize_type << 24) | header_len
    if body is None or len(body) == 0:
        return _pack_prefix(4 + header_len, word) + header, None
    return _pack_prefix(4 + header_len + len(body), word) + header, body


def encode_answer(request: RemotingCommand, code: int, ext_fields: dict[str, str]) -> bytes:
    """``encode_parts(request.response(code, None, ext_fields))[0]``, the same bytes, built
    without the response command: a send's answer has no remark and no body, and making the
    command and its generic header cost a microsecond of a single send."""
    if request.serialize_type != _JSON:
        return encode_parts(request.response(code, None, ext_fields))[0]
    header = _dumps(
        {
            "code": code,
            "language": "JAVA",
            "version": CURRENT_VERSION,
            "opaque": request.opaque,
            "flag": RESPONSE_FLAG,
            "extFields": ext_fields,
        }
    )
    header_len = len(header)
    return _pack_prefix(4 + header_len, header_len) + header


def encode_header(command: RemotingCommand) -> bytes:
    """The header bytes in the command's serialize type."""
    if command.serialize_type == _ROCKETMQ:
        return _encode_binary_header(command)
    doc: dict[str, Any] = {
        "code": command.code,
        "language": _LANG_NAME[command.language],
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
            (length,) = _unpack_int(view, pos)
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


def _decode_payload_py(view: memoryview, start: int, length: int) -> RemotingCommand:
    """Decode header word + header + body at ``view[start:start+length]``."""
    (word,) = _unpack_word(view, start)
    serialize = word >> 24
    header_start = start + 4
    body_start = header_start + (word & 0x00FFFFFF)
    end = start + length
    if body_start > end:
        raise FrameError(f"header length {word & 0x00FFFFFF} overruns the frame of {length} bytes")
    if serialize == 0:  # SerializeType.JSON
        command = _decode_json_header(view[header_start:body_start])
    elif serialize == 1:  # SerializeType.ROCKETMQ
        command = _decode_binary_header(view[header_start:body_start])
    else:
        raise FrameError(f"unknown serialize type {serialize} in the header word")
    if end > body_start:
        command.body = view[body_start:end].tobytes()
    return command


def _command(
    code: int,
    opaque: int,
    flag: int,
    language: LanguageCode,
    version: int,
    remark: str | None,
    ext_fields: dict[str, str] | None,
    serialize_type: SerializeType,
) -> RemotingCommand:
    # Slot stores skip the keyword-argument call of __init__: a third of a response's decode.
    command = _new_command(RemotingCommand)
    command.code = code
    command.opaque = opaque
    command.flag = flag
    command.language = language
    command.version = version
    command.remark = remark
    command.ext_fields = ext_fields
    command.body = None
    command.serialize_type = serialize_type
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
        doc = _loads(header)
    except orjson.JSONDecodeError as exc:
        raise FrameError(f"JSON header does not parse: {exc}") from None
    if type(doc) is not dict:
        raise FrameError("JSON header is not an object")
    get = doc.get
    code = get("code")
    opaque = get("opaque", 0)
    flag = get("flag", 0)
    version = get("version", 0)
    if type(code) is not int or type(opaque) is not int or type(flag) is not int:
        raise FrameError("JSON header needs integer code, opaque and flag")
    if type(version) is not int:
        version = 0
    language = get("language")
    if type(language) is str:
        lang = _LANG_BY_NAME.get(language, _OTHER)
    elif isinstance(language, int):
        lang = _LANG_BY_VALUE.get(language, _OTHER)
    else:
        lang = _OTHER
    remark = get("remark")
    if remark is not None and type(remark) is not str:
        remark = str(remark)
    ext = get("extFields")
    ext_fields: dict[str, str] | None
    if ext is None:
        ext_fields = None
    elif type(ext) is dict:
        ext_fields = ext
        for value in ext.values():
            if type(value) is not str:
                ext_fields = {
                    k: v if type(v) is str else _coerce(v) for k, v in ext.items() if v is not None
                }
                break
    else:
        raise FrameError("JSON header extFields is not an object")
    # `_command` inlined: one call less on every JSON frame.
    command = _new_command(RemotingCommand)
    command.code = code
    command.opaque = opaque
    command.flag = flag
    command.language = lang
    command.version = version
    command.remark = remark
    command.ext_fields = ext_fields
    command.body = None
    command.serialize_type = _JSON
    return command


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
    return _command(
        code, opaque, flag, _LANG_BY_VALUE.get(language, _OTHER), version, remark, ext, _ROCKETMQ
    )


#: What the decoders run per frame: the compiled twin when ``./dev build-ext`` built it, else
#: `_decode_payload_py` (same commands, same errors; tests compare them).
_decode_payload = _decode_payload_py
try:
    import protocol._speedups as _speedups
except ImportError:
    pass
else:
    _speedups.bind_frame(
        RemotingCommand, FrameError, _coerce, _loads, orjson.JSONDecodeError, _LANG_BY_NAME,
        _LANG_BY_VALUE, _OTHER, _JSON, _decode_binary_header,
    )  # fmt: skip
    _decode_payload = _speedups.decode_payload
