"""The cattrs converter that turns ``ext_fields`` into typed headers and back.

A header is a frozen attrs class whose fields are Python snake_case; the wire key is the
Java camelCase name, derived from the field name unless ``metadata={"wire": "..."}`` says
otherwise (UNREGISTER_CLIENT's ``clientID``, the send header's ``bname``).

Decoding is lenient the way fastjson is for Java: any JSON scalar is accepted for any field and
coerced to the field's type (the C++ client sends numbers, JSON booleans and ``"0"``/``"1"``).
Encoding always yields strings, because the C++ and Go clients drop or reject anything else.

The generated structure functions run without cattrs' detailed validation (it costs several
microseconds per header); when one fails, a second, slow pass finds the field to blame so the
error remark names it.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from protocol.codes import ResponseCode
from protocol.command import RemotingError

T = TypeVar("T")

_EMPTY: Mapping[str, Any] = types.MappingProxyType({})
_TRUE_WORDS = frozenset({"true", "1"})
_FALSE_WORDS = frozenset({"false", "0"})


def wire_key(field: attrs.Attribute[Any]) -> str:
    """The Java (camelCase) ext-field key of a header field."""
    key = field.metadata.get("wire")
    if key is not None:
        return str(key)
    head, *rest = field.name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def wire_keys(cls: type) -> dict[str, str]:
    """Field name -> wire key for every field of a header class."""
    return {field.name: wire_key(field) for field in attrs.fields(cls)}


def decode_header(cls: type[T], ext_fields: Mapping[str, Any] | None) -> T:
    """The typed header ``cls`` read from ``ext_fields``.

    Unknown keys are ignored; a missing required field or a value that does not parse raises
    ``RemotingError(SYSTEM_ERROR)`` whose remark names the class and the field.
    """
    decoder = _DECODERS.get(cls)
    if decoder is None:
        decoder = _register(cls)
    source = _EMPTY if ext_fields is None else ext_fields
    try:
        return decoder(source)  # type: ignore[no-any-return]
    except (KeyError, ValueError, TypeError) as exc:
        raise header_error(cls, source, wire_keys(cls)) from exc


def encode_header(obj: Any) -> dict[str, str]:
    """The ext fields of a header: every value a string, optional fields left at None omitted."""
    encoder = _ENCODERS.get(type(obj))
    if encoder is None:
        _register(type(obj))
        encoder = _ENCODERS[type(obj)]
    return encoder(obj)


def make_decoder(cls: type[T], keys: Mapping[str, str]) -> Callable[[Mapping[str, Any]], T]:
    """A cattrs structure function for ``cls`` reading field ``name`` from key ``keys[name]``."""
    overrides = {name: override(rename=key) for name, key in keys.items()}
    return make_dict_structure_fn(cls, _converter, **overrides)  # type: ignore[arg-type]


def header_error(cls: type, source: Mapping[str, Any], keys: Mapping[str, str]) -> RemotingError:
    """The SYSTEM_ERROR naming the first field of ``cls`` that is missing or does not parse."""
    kind = "response header" if cls.__name__.endswith("ResponseHeader") else "request header"
    for field in attrs.fields(cls):
        key = keys[field.name]
        long_key = wire_key(field)
        shown = f"'{key}'" if key == long_key else f"'{long_key}' ('{key}')"
        value = source.get(key)
        if value is None:
            if field.default is attrs.NOTHING:
                return RemotingError(
                    ResponseCode.SYSTEM_ERROR,
                    f"the {kind} field {shown} of {cls.__name__} is missing",
                )
            continue
        target = _plain_type(field.type)
        try:
            _converter.structure(value, target)
        except (ValueError, TypeError):
            return RemotingError(
                ResponseCode.SYSTEM_ERROR,
                f"the {kind} field {shown} of {cls.__name__} has the value {value!r}, "
                f"which is not a valid {_TYPE_WORDS.get(target, 'value')}",
            )
    return RemotingError(ResponseCode.SYSTEM_ERROR, f"the {kind} {cls.__name__} is malformed")


# -- coercion hooks -------------------------------------------------------------------------


def _structure_int(value: Any, _: Any) -> int:
    kind = type(value)
    if kind is int:
        return value  # type: ignore[no-any-return]
    if kind is str:
        # int() also takes surrounding blanks and "1_000"; harmless leniency, and the cheapest
        # parse there is on the hot path.
        return int(value)
    if kind is float and value.is_integer():
        return int(value)
    raise ValueError(f"not an integer: {value!r}")


def _structure_bool(value: Any, _: Any) -> bool:
    if value is True or value is False:
        return value
    if type(value) is str:
        word = value.lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    elif type(value) is int and value in (0, 1):
        return bool(value)
    raise ValueError(f"not a boolean: {value!r}")


def _structure_str(value: Any, _: Any) -> str:
    kind = type(value)
    if kind is str:
        return value  # type: ignore[no-any-return]
    if value is True:
        return "true"
    if value is False:
        return "false"
    if kind is int or kind is float:
        return str(value)
    raise TypeError(f"not a JSON scalar: {value!r}")


def _unstructure_bool(value: bool) -> str:
    return "true" if value else "false"


_converter = cattrs.Converter(detailed_validation=False)
_converter.register_structure_hook(int, _structure_int)
_converter.register_structure_hook(bool, _structure_bool)
_converter.register_structure_hook(str, _structure_str)
_converter.register_unstructure_hook(int, str)
_converter.register_unstructure_hook(bool, _unstructure_bool)
_converter.register_unstructure_hook(str, str)

_TYPE_WORDS: dict[Any, str] = {int: "integer", bool: "boolean", str: "string"}
_DECODERS: dict[type, Callable[[Mapping[str, Any]], Any]] = {}
_ENCODERS: dict[type, Callable[[Any], dict[str, str]]] = {}


def _register(cls: type) -> Callable[[Mapping[str, Any]], Any]:
    if not attrs.has(cls):
        raise TypeError(f"{cls!r} is not a header class")
    attrs.resolve_types(cls)
    keys = wire_keys(cls)
    decoder = make_decoder(cls, keys)
    _DECODERS[cls] = decoder
    unstructure_overrides = {
        field.name: override(rename=keys[field.name], omit_if_default=field.default is None)
        for field in attrs.fields(cls)
    }
    _ENCODERS[cls] = make_dict_unstructure_fn(
        cls,
        _converter,
        **unstructure_overrides,  # type: ignore[arg-type]
    )
    return decoder


def _plain_type(annotation: Any) -> Any:
    # ``int | None`` -> int, for the diagnostic pass.
    args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    return args[0] if len(args) == 1 else annotation
