"""The body base class and the cattrs converter behind every body's ``from_json`` / ``to_json``.

Decoding is lenient, as fastjson is (see the package docstring); encoding writes the form a
Java peer writes. `MessageQueue` lives here because the converter knows it by name: it is the
one body that is also a map key, written as a JSON object key in fastjson's form.

The family modules register their own per-class hooks (`register_enum`, and hooks built with
`structure_factory` / `unstructure_factory`); the package imports every family, so all hooks
are in place before any body is decoded.
"""

from __future__ import annotations

import enum
import typing
from collections.abc import Callable
from typing import Any, ClassVar, Self

import attrs
import cattrs
import orjson
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from protocol import fastjson
from protocol.headers import wire_keys


class BodyError(ValueError):
    """A body that does not decode; the message names the body class and what is wrong."""


class Body:
    """Base of every body class: ``from_json`` / ``to_json`` through the converter."""

    __slots__ = ()
    #: True where Java writes fastjson's non-standard map keys (bare ints, object keys).
    _fastjson_form: ClassVar[bool] = False

    @classmethod
    def from_json(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """Decode a body (standard JSON or fastjson's dialect)."""
        try:
            doc = fastjson.loads(data)
        except ValueError as exc:
            raise BodyError(f"the {cls.__name__} body is not JSON: {exc}") from None
        return cls.from_obj(doc)

    @classmethod
    def from_obj(cls, doc: Any) -> Self:
        """Build from an already parsed JSON value."""
        if not isinstance(doc, dict):
            raise BodyError(f"the {cls.__name__} body is not a JSON object")
        try:
            return converter.structure(doc, cls)
        except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
            raise BodyError(f"bad {cls.__name__} body: {_describe(exc)}") from None

    def to_obj(self) -> dict[str, Any]:
        """The JSON object (map keys still ints or `fastjson.ObjectKey`s)."""
        return converter.unstructure(self)  # type: ignore[no-any-return]

    def to_json(self) -> bytes:
        """Compact JSON, keys sorted, in the form a Java peer writes this body in."""
        obj = self.to_obj()
        if self._fastjson_form:
            return fastjson.dumps(obj)
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)


@attrs.frozen(kw_only=True)
class MessageQueue(Body):
    """One queue of a topic on a broker; hashable, and a map key in several bodies."""

    topic: str
    broker_name: str
    queue_id: int


# -- the converter ----------------------------------------------------------------------------

converter = cattrs.Converter(detailed_validation=True)


def _structure_int(value: Any, _: Any) -> int:
    if type(value) is int:
        return value
    if type(value) is str:
        return int(value)
    if type(value) is float and value.is_integer():
        return int(value)
    raise ValueError(f"expected an integer, got {value!r}")


def _structure_float(value: Any, _: Any) -> float:
    if type(value) in (int, float, str):
        return float(value)
    raise ValueError(f"expected a number, got {value!r}")


def _structure_bool(value: Any, _: Any) -> bool:
    if value is True or value is False:
        return value
    words = {"true": True, "false": False, "1": True, "0": False}
    if isinstance(value, (str, int)) and str(value).lower() in words:
        return words[str(value).lower()]
    raise ValueError(f"expected a boolean, got {value!r}")


def _structure_str(value: Any, _: Any) -> str:
    if type(value) is str:
        return value
    if type(value) in (int, float, bool):
        return str(value).lower() if type(value) is bool else str(value)
    raise ValueError(f"expected a string, got {value!r}")


def _enum_hook(cls: type[enum.IntEnum]) -> Callable[[Any, Any], Any]:
    by_name = {member.name: member for member in cls}

    def structure(value: Any, _: Any) -> Any:
        if type(value) is str:
            member = by_name.get(value) or by_name.get(value.upper())
            if member is not None:
                return member
            if value.lstrip("-").isdigit():
                return cls(int(value))
        elif type(value) is int:
            return cls(value)
        raise ValueError(f"{value!r} is not a {cls.__name__} name or ordinal")

    return structure


def register_enum(cls: type[enum.IntEnum]) -> None:
    """Read ``cls`` by NAME or by ordinal (the C++ client sends ordinals); write it by NAME."""
    converter.register_structure_hook(cls, _enum_hook(cls))
    converter.register_unstructure_hook(cls, lambda member: member.name)


converter.register_structure_hook(int, _structure_int)
converter.register_structure_hook(float, _structure_float)
converter.register_structure_hook(bool, _structure_bool)
converter.register_structure_hook(str, _structure_str)


def structure_factory(cls: type) -> Callable[[Any, Any], Any]:
    """The structure function of attrs class ``cls``: Java camelCase keys to fields."""
    renames = {name: override(rename=key) for name, key in wire_keys(cls).items()}
    return make_dict_structure_fn(cls, converter, **renames)  # type: ignore[arg-type]


def unstructure_factory(cls: type) -> Callable[[Any], Any]:
    """The unstructure function of attrs class ``cls``: camelCase keys, None defaults omitted."""
    overrides = {
        field.name: override(
            rename=wire_keys(cls)[field.name], omit_if_default=field.default is None
        )
        for field in attrs.fields(cls)
    }
    return make_dict_unstructure_fn(cls, converter, **overrides)  # type: ignore[arg-type]


converter.register_structure_hook_factory(attrs.has, structure_factory)


def _is_list(annotation: Any) -> bool:
    return typing.get_origin(annotation) is list


def _list_hook(annotation: Any) -> Callable[[Any, Any], Any]:
    # cattrs' own list hook takes any iterable (a string becomes a list of characters) and,
    # with detailed validation, tries every element and keeps every error: a 5 KB string
    # where a list of objects belongs cost seconds. An array is required, and the first bad
    # element ends the decode.
    args = typing.get_args(annotation)
    element = args[0] if args else Any
    hook: list[Callable[[Any, Any], Any]] = []

    def structure(value: Any, _: Any) -> list[Any]:
        if type(value) is not list and type(value) is not tuple:
            raise ValueError(f"expected a JSON array, got {type(value).__name__}")
        if not hook:  # looked up on first use: element classes may register later
            hook.append(converter.get_structure_hook(element))
        structure_element = hook[0]
        return [structure_element(item, element) for item in value]

    return structure


converter.register_structure_hook_factory(_is_list, _list_hook)
converter.register_unstructure_hook_factory(attrs.has, unstructure_factory)

_structure_mq = structure_factory(MessageQueue)


def _structure_message_queue(value: Any, _: Any) -> MessageQueue:
    # As a map key it arrives as an ObjectKey (fastjson form) or as JSON text in a string.
    if isinstance(value, fastjson.ObjectKey):
        value = value.as_dict()
    elif isinstance(value, str):
        value = fastjson.loads(value)
    return _structure_mq(value, MessageQueue)  # type: ignore[no-any-return]


converter.register_structure_hook(MessageQueue, _structure_message_queue)


def _is_mq_keyed(annotation: Any) -> bool:
    return typing.get_origin(annotation) is dict and typing.get_args(annotation)[0] is MessageQueue


def _mq_keyed_unstructure(annotation: Any) -> Callable[[Any], Any]:
    value_type = typing.get_args(annotation)[1]
    unstructure = converter.unstructure

    def unstructure_map(table: dict[MessageQueue, Any]) -> dict[Any, Any]:
        return {
            fastjson.ObjectKey.of(unstructure(mq)): unstructure(value, value_type)
            for mq, value in table.items()
        }

    return unstructure_map


converter.register_unstructure_hook_factory(_is_mq_keyed, _mq_keyed_unstructure)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(exc))
    return str(exc) or type(exc).__name__
