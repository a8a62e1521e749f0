"""Configuration: RocketMQ-style properties files read into attrs config classes.

`parse_properties` follows the Java properties format that ``broker.conf`` and
``namesrv.conf`` use: ``key=value``, ``key: value`` or ``key value``; lines whose first
non-blank character is ``#`` or ``!`` are comments; a line ending in an odd number of
backslashes continues on the next one (whose leading blanks are dropped); ``\\t``, ``\\n``,
``\\r``, ``\\f``, ``\\uXXXX`` and ``\\<any>`` escapes. Unlike Java, a value's trailing blanks are
trimmed too (an escaped blank, ``\\ ``, is kept). Files are read as UTF-8, falling back to
ISO-8859-1 (what Java's ``Properties.load(InputStream)`` assumes) when they are not UTF-8.

`build_config` makes an attrs config instance from its defaults, then a properties mapping,
then command-line overrides, matching RocketMQ's camelCase keys (``listenPort``,
``brokerIP1``) to snake_case fields (``listen_port``, ``broker_ip1``) and coercing each text
value to the field's type: ``int``, ``float``, ``bool`` (``true``/``false``), ``str``,
`pathlib.Path`, an `enum.Enum` (by member name or value) or ``X | None`` (empty text is None).
A field may name its key explicitly with ``attrs.field(metadata={"key": "brokerIP1"})``.
"""

from __future__ import annotations

import difflib
import enum
import logging
import os
import re
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs

from supervisors.config_file import save_json_config

log = logging.getLogger("boltmq.config")

T = TypeVar("T")

_BLANKS = " \t\f"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|(u)|(.))", re.DOTALL)
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_INT = re.compile(r"[+-]?[0-9]+")


class ConfigError(ValueError):
    """A configuration file or value that cannot be used; the message names key and source."""


def load_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a properties file into a dict (later duplicates win)."""
    text, _encoding = _read_properties(path)
    return parse_properties(text, source=os.fspath(path))


def update_properties_file(path: str | os.PathLike[str], changes: Mapping[str, str]) -> None:
    """Set ``changes`` in the properties file ``path`` (`update_properties_text`: other lines
    and comments kept), in its own encoding, atomically with the old content kept as
    ``.bak`` (`save_json_config`). Blocking."""
    text, encoding = _read_properties(path)
    save_json_config(path, update_properties_text(text, changes).encode(encoding, "replace"))


def _read_properties(path: str | os.PathLike[str]) -> tuple[str, str]:
    """A properties file's text and encoding: UTF-8, else ISO-8859-1 (Java's default)."""
    raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return raw.decode("iso-8859-1"), "iso-8859-1"


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """Parse properties text into a dict (later duplicates win)."""
    result: dict[str, str] = {}
    for line_number, logical in _logical_lines(text):
        key_raw, value_raw = _split_key_value(logical)
        try:
            key = _unescape(key_raw)
            value = _unescape(_trim_value(value_raw))
        except ValueError as exc:
            raise ConfigError(f"{source}:{line_number}: {exc}") from None
        result[key] = value
    return result


def format_properties(values: Mapping[str, str]) -> str:
    """Write a mapping as properties text that `parse_properties` reads back unchanged."""
    lines = [
        f"{_escape(key, is_key=True)}={_escape(value, is_key=False)}"
        for key, value in values.items()
    ]
    return "\n".join(lines) + ("\n" if lines else "")


def property_key(field: attrs.Attribute[Any]) -> str:
    """The key a field is known by in properties files (``listen_port`` -> ``listenPort``)."""
    explicit = field.metadata.get("key")
    if explicit is not None:
        return str(explicit)
    head, *rest = field.name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def config_properties(config: attrs.AttrsInstance) -> dict[str, str]:
    """Every field of an attrs config instance as ``key -> text`` (booleans as true/false)."""
    out: dict[str, str] = {}
    for field in attrs.fields(type(config)):
        out[property_key(field)] = _format_value(getattr(config, field.name))
    return out


def parse_overrides(items: Iterable[str], source: str = "command line") -> dict[str, str]:
    """Turn ``key=value`` strings (``-o listenPort=9877``) into a dict."""
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{source}: {item!r} is not key=value")
        result[key.strip()] = value.strip()
    return result


def build_config(
    cls: type[T],
    properties: Mapping[str, str] | None = None,
    *,
    source: str = "<properties>",
    overrides: Mapping[str, object] | None = None,
    overrides_source: str = "command line",
) -> T:
    """An instance of the attrs class ``cls``: its defaults, then ``properties``, then
    ``overrides`` (text values are coerced; other values must already have the field's type).

    Unknown keys are logged as warnings and ignored; a value that does not fit its field's
    type raises `ConfigError` naming the key, the value and where it came from.
    """
    fields = _fields_by_normalized_key(cls)
    types_ = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for layer, where in ((properties or {}, source), (overrides or {}, overrides_source)):
        for key, raw in layer.items():
            field = fields.get(_normalize(key))
            if field is None:
                hint = difflib.get_close_matches(key, [property_key(f) for f in fields.values()], 1)
                log.warning(
                    "%s: unknown key %r ignored%s",
                    where,
                    key,
                    f" (did you mean {hint[0]!r}?)" if hint else "",
                )
                continue
            values[field.name] = _coerce(types_[field.name], key, raw, where)
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: {exc}") from exc


def load_config(
    cls: type[T],
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> T:
    """`build_config` from a properties file (when given) and overrides."""
    properties = load_properties(path) if path is not None else {}
    return build_config(
        cls,
        properties,
        source=os.fspath(path) if path is not None else "<defaults>",
        overrides=overrides,
    )


# -- properties syntax ------------------------------------------------------------------------


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """(first line number, text) of each logical line that is not blank or a comment."""
    for first, _end, logical in _logical_spans(_LINE_BREAK.split(text)):
        yield first + 1, logical


def _logical_spans(natural: list[str]) -> Iterable[tuple[int, int, str]]:
    """(first index, index past the last, text) in ``natural`` of each logical line that
    is not blank or a comment (a continued line spans several natural ones)."""
    index = 0
    while index < len(natural):
        first = index
        line = natural[index].lstrip(_BLANKS)
        index += 1
        if not line or line[0] in "#!":
            continue
        parts = []
        while _continues(line):
            parts.append(line[:-1])
            if index >= len(natural):
                line = ""
                break
            line = natural[index].lstrip(_BLANKS)
            index += 1
        parts.append(line)
        yield first, index, "".join(parts)


def update_properties_text(text: str, changes: Mapping[str, str]) -> str:
    """``text`` with each key of ``changes`` set to its value, everything else kept.

    The first line that sets a key (matched as `build_config` matches keys: ``listenPort``,
    ``listen_port`` and ``listen-port`` are one key) is replaced where it stands, later ones
    that set it again are dropped (they would win when read), and keys no line sets are
    appended. Comments, blank lines and other settings stay as they were.
    """
    natural = _LINE_BREAK.split(text)
    if natural and natural[-1] == "":
        natural.pop()  # the text's final line break
    wanted = {_normalize(key): (key, value) for key, value in changes.items()}
    replaced: dict[int, tuple[int, str]] = {}  # first index -> (end index, new line)
    done: set[str] = set()
    for first, end, logical in _logical_spans(natural):
        key_raw, _value = _split_key_value(logical)
        try:
            normalized = _normalize(_unescape(key_raw))
        except ValueError:
            continue  # a malformed line is not one of ours: kept as it is
        if normalized in wanted:
            key, value = wanted[normalized]
            line = "" if normalized in done else format_properties({key: value}).rstrip("\n")
            replaced[first] = (end, line)
            done.add(normalized)
    out: list[str] = []
    index = 0
    while index < len(natural):
        if index in replaced:
            end, line = replaced[index]
            if line:
                out.append(line)
            index = end
        else:
            out.append(natural[index])
            index += 1
    out.extend(
        format_properties({key: value}).rstrip("\n")
        for normalized, (key, value) in wanted.items()
        if normalized not in done
    )
    return "\n".join(out) + "\n"


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    index = 0
    length = len(line)
    while index < length:
        char = line[index]
        if char == "\\":
            index += 2
            continue
        if char in "=:" or char in _BLANKS:
            break
        index += 1
    key = line[:index]
    rest = line[index:].lstrip(_BLANKS)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_BLANKS)
    return key, rest


def _trim_value(raw: str) -> str:
    stripped = raw.rstrip(_BLANKS)
    if len(stripped) < len(raw) and _continues(stripped):
        # The last kept backslash escapes the first trimmed blank: keep that blank.
        stripped += raw[len(stripped)]
    return stripped


def _unescape(raw: str) -> str:
    if "\\" not in raw:
        return raw

    def replace(match: re.Match[str]) -> str:
        code, bad_u, other = match.groups()
        if code is not None:
            return chr(int(code, 16))
        if bad_u is not None:
            raise ValueError(f"malformed \\uxxxx escape in {raw!r}")
        return _SIMPLE_ESCAPES.get(other, other)

    return _ESCAPE.sub(replace, raw)


def _escape(text: str, *, is_key: bool) -> str:
    out = []
    last = len(text) - 1
    for index, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char == "\t":
            out.append("\\t")
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\f":
            out.append("\\f")
        elif char == " " and (is_key or index == 0 or index == last):
            out.append("\\ ")
        elif char in "=:#!" and (is_key or index == 0):
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


# -- typed config classes ---------------------------------------------------------------------


def _normalize(key: str) -> str:
    # listenPort, listen_port, listen-port and LISTEN_PORT all name the same field; so do
    # RocketMQ's dotted names (tls.server.mode is tlsServerMode).
    return key.replace("_", "").replace("-", "").replace(".", "").lower()


def _fields_by_normalized_key(cls: type[Any]) -> dict[str, attrs.Attribute[Any]]:
    if not attrs.has(cls):
        raise TypeError(f"{cls.__name__} is not an attrs class")
    out: dict[str, attrs.Attribute[Any]] = {}
    for field in attrs.fields(cls):
        out[_normalize(field.name)] = field
        out[_normalize(property_key(field))] = field
    return out


def _coerce(hint: Any, key: str, raw: object, source: str) -> Any:
    optional, target = _unwrap_optional(hint)
    if not isinstance(raw, str):
        # Already typed (an argparse value, a test): check it rather than convert it.
        if raw is None and optional:
            return None
        if isinstance(raw, bool) and target is not bool:
            pass
        elif target is float and isinstance(raw, int | float):
            return float(raw)
        elif isinstance(target, type) and isinstance(raw, target):
            return raw
        raise ConfigError(f"{source}: {key}={raw!r}: expected {_describe(target)}")
    text = raw.strip()
    if optional and text == "":
        return None
    try:
        return _parse_text(target, text)
    except (ValueError, KeyError):
        raise ConfigError(f"{source}: {key}={raw!r}: expected {_describe(target)}") from None


def _parse_text(target: Any, text: str) -> Any:
    if target is str:
        return text
    if target is bool:
        lowered = text.lower()
        if lowered not in ("true", "false"):
            raise ValueError(text)
        return lowered == "true"
    if target is int:
        if not _INT.fullmatch(text):
            raise ValueError(text)
        return int(text)
    if target is float:
        return float(text)
    if target is Path:
        return Path(text).expanduser()
    if isinstance(target, type) and issubclass(target, enum.Enum):
        if text in target.__members__:
            return target[text]
        for member in target:
            if str(member.value) == text:
                return member
        raise ValueError(text)
    raise TypeError(f"config fields of type {target!r} are not supported")


def _unwrap_optional(hint: Any) -> tuple[bool, Any]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return True, args[0]
        raise TypeError(f"config fields of type {hint!r} are not supported")
    return False, hint


def _describe(target: Any) -> str:
    if target is bool:
        return "true or false"
    if target is int:
        return "an integer"
    if target is float:
        return "a number"
    if isinstance(target, type) and issubclass(target, enum.Enum):
        return "one of " + ", ".join(target.__members__)
    return getattr(target, "__name__", repr(target))


def _format_value(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return value.name
    return str(value)
