"""Reading and writing the JSON dialect of fastjson, the Java library RocketMQ uses.

fastjson's default output is not standard JSON where a map's keys are not strings:

- ``Map<Long, String>`` / ``Map<Integer, Long>`` keys are written bare: ``{0:"a",1:"b"}``;
- ``Map<MessageQueue, X>`` keys are whole objects:
  ``{{"brokerName":"b","queueId":0,"topic":"t"}:{...}}``.

`loads` reads standard JSON with orjson and falls back to a small lenient parser only when
orjson refuses the text. The parser returns a bare key as its text (``{0:"a"}`` ->
``{"0": "a"}``, the same as the quoted form) and an object key as an `ObjectKey`, a hashable
tuple of the object's ``(name, value)`` pairs sorted by name. It also takes bare identifier
keys (``{a:1}``), which fastjson's parser accepts too.

`dumps` writes compact JSON with sorted keys; an ``int`` key is written bare and an
`ObjectKey` key as an object, which is fastjson's own form. Without such keys the output is
standard JSON (orjson's).
"""

from __future__ import annotations

import json.decoder
import re
from collections.abc import Callable, Mapping
from typing import Any

import orjson

__all__ = ["FastjsonDecodeError", "ObjectKey", "dumps", "loads"]

# RocketMQ documents nest a handful of levels; the cap keeps clear of Python's stack limit.
_MAX_DEPTH = 256


class FastjsonDecodeError(ValueError):
    """The text is neither standard JSON nor fastjson's dialect of it."""

    def __init__(self, message: str, text: str = "", pos: int = 0) -> None:
        line = text.count("\n", 0, pos) + 1
        column = pos - text.rfind("\n", 0, pos)
        super().__init__(f"{message} at line {line} column {column} (char {pos})")
        self.pos = pos


class ObjectKey(tuple[tuple[str, Any], ...]):
    """A JSON object used as a map key: its ``(name, value)`` pairs, sorted by name.

    Nested objects become ObjectKeys and arrays tuples, so the whole key stays hashable.
    """

    __slots__ = ()

    @classmethod
    def of(cls, mapping: Mapping[str, Any]) -> ObjectKey:
        """The key form of a JSON object."""
        return cls(
            sorted(((name, _freeze(value)) for name, value in mapping.items()), key=_by_name)
        )

    def as_dict(self) -> dict[str, Any]:
        """The object again, as a dict (nested keys thawed to dicts and lists)."""
        return {name: _thaw(value) for name, value in self}

    def __repr__(self) -> str:
        return f"ObjectKey({self.as_dict()!r})"


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse standard JSON or fastjson's dialect; raises `FastjsonDecodeError` on bad input."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    if isinstance(data, str):
        text = data
    else:
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FastjsonDecodeError("the text is not UTF-8", "", exc.start) from None
    return _Parser(text).parse_document()


def dumps(obj: Any) -> bytes:
    """Compact JSON with sorted keys; int map keys bare and ObjectKey keys as objects."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        # orjson refuses non-string keys (and unknown types); the writer below handles the
        # keys and reports anything else.
        pass
    parts: list[str] = []
    _write(obj, parts.append, 0)
    return "".join(parts).encode()


# -- parser -------------------------------------------------------------------------------

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_LITERALS = {"true": True, "false": False, "null": None}
# The standard library's JSON string scanner (C-accelerated); typeshed does not declare it.
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


class _Parser:
    __slots__ = ("depth", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.depth = 0

    def error(self, message: str, pos: int) -> FastjsonDecodeError:
        return FastjsonDecodeError(message, self.text, pos)

    def skip(self, pos: int) -> int:
        return _WS.match(self.text, pos).end()  # type: ignore[union-attr]

    def parse_document(self) -> Any:
        value, pos = self.value(self.skip(0))
        pos = self.skip(pos)
        if pos != len(self.text):
            raise self.error("extra data after the JSON value", pos)
        return value

    def value(self, pos: int) -> tuple[Any, int]:
        text = self.text
        if pos >= len(text):
            raise self.error("expected a value, found the end of the text", pos)
        char = text[pos]
        if char == "{":
            return self.object(pos)
        if char == "[":
            return self.array(pos)
        if char == '"':
            return self.string(pos)
        match = _NUMBER.match(text, pos)
        if match is not None:
            token = match.group()
            is_float = match.group(1) is not None or match.group(2) is not None
            if is_float:
                return float(token), match.end()
            try:
                return int(token), match.end()
            except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
                raise self.error(f"an integer of {len(token)} digits is too long", pos) from None
        match = _IDENT.match(text, pos)
        if match is not None and match.group() in _LITERALS:
            return _LITERALS[match.group()], match.end()
        raise self.error(f"unexpected character {char!r}", pos)

    def string(self, pos: int) -> tuple[str, int]:
        try:
            return _scanstring(self.text, pos + 1)
        except json.JSONDecodeError as exc:
            raise self.error(exc.msg, exc.pos) from None

    def enter(self, pos: int) -> None:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise self.error(f"nesting deeper than {_MAX_DEPTH}", pos)

    def key(self, pos: int) -> tuple[Any, int]:
        text = self.text
        char = text[pos] if pos < len(text) else ""
        if char == '"':
            return self.string(pos)
        if char == "{":
            obj, end = self.object(pos)
            return ObjectKey.of(obj), end
        # A bare key (fastjson's int and long map keys, or an identifier) is kept as text.
        match = _NUMBER.match(text, pos) or _IDENT.match(text, pos)
        if match is None:
            raise self.error("expected an object key", pos)
        return match.group(), match.end()

    def object(self, pos: int) -> tuple[dict[Any, Any], int]:
        self.enter(pos)
        text = self.text
        result: dict[Any, Any] = {}
        pos = self.skip(pos + 1)
        if text.startswith("}", pos):
            self.depth -= 1
            return result, pos + 1
        while True:
            key, pos = self.key(pos)
            pos = self.skip(pos)
            if not text.startswith(":", pos):
                raise self.error("expected ':' after an object key", pos)
            result[key], pos = self.value(self.skip(pos + 1))
            pos = self.skip(pos)
            if text.startswith(",", pos):
                pos = self.skip(pos + 1)
            elif text.startswith("}", pos):
                self.depth -= 1
                return result, pos + 1
            else:
                raise self.error("expected ',' or '}' in an object", pos)

    def array(self, pos: int) -> tuple[list[Any], int]:
        self.enter(pos)
        text = self.text
        result: list[Any] = []
        pos = self.skip(pos + 1)
        if text.startswith("]", pos):
            self.depth -= 1
            return result, pos + 1
        while True:
            item, pos = self.value(pos)
            result.append(item)
            pos = self.skip(pos)
            if text.startswith(",", pos):
                pos = self.skip(pos + 1)
            elif text.startswith("]", pos):
                self.depth -= 1
                return result, pos + 1
            else:
                raise self.error("expected ',' or ']' in an array", pos)


# -- writer -------------------------------------------------------------------------------


def _write(obj: Any, out: Any, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise ValueError(f"nesting deeper than {_MAX_DEPTH}")
    if isinstance(obj, ObjectKey):
        obj = obj.as_dict()
    if isinstance(obj, dict):
        out("{")
        for index, key in enumerate(_sorted_keys(obj)):
            if index:
                out(",")
            _write_key(key, out, depth)
            out(":")
            _write(obj[key], out, depth + 1)
        out("}")
    elif isinstance(obj, (list, tuple)):
        out("[")
        for index, item in enumerate(obj):
            if index:
                out(",")
            _write(item, out, depth + 1)
        out("]")
    elif isinstance(obj, int) and not isinstance(obj, bool):
        out(str(obj))  # also beyond 64 bits, which orjson refuses
    else:
        out(orjson.dumps(obj).decode())


def _write_key(key: Any, out: Any, depth: int) -> None:
    if isinstance(key, str):
        out(orjson.dumps(key).decode())
    elif isinstance(key, ObjectKey):
        _write(key, out, depth + 1)
    elif isinstance(key, int) and not isinstance(key, bool):
        out(str(key))
    else:
        raise TypeError(f"a JSON map key must be str, int or ObjectKey, not {type(key).__name__}")


def _sorted_keys(mapping: dict[Any, Any]) -> list[Any]:
    # Keys of one map share a type in practice: ints sort numerically, strings by text and
    # object keys by their sorted pairs. A map whose keys do not compare keeps its own order.
    try:
        return sorted(mapping)
    except TypeError:
        return list(mapping)


def _by_name(pair: tuple[Any, Any]) -> tuple[int, str, int]:
    # Names of one object may mix strings, ints and object keys (fastjson's bare and object
    # keys), which do not compare with each other: strings sort by text and ints by value as
    # before, each kind in its own band, object keys by their text.
    name = pair[0]
    if isinstance(name, str):
        return (0, name, 0)
    if isinstance(name, int):
        return (1, "", name)
    return (2, repr(name), 0)


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return ObjectKey.of(value)
    if isinstance(value, list):
        return tuple(_freeze(item) for item in value)
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, ObjectKey):
        return value.as_dict()
    if isinstance(value, tuple):
        return [_thaw(item) for item in value]
    return value
