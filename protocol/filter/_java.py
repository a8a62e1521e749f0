"""The value rules of RocketMQ 4.9's SQL92 filter, which are Java's.

A message property is always a string; literals are Java Integer, Long, Double, Boolean or
String. Comparing two values of different types converts one to the other's type as the
broker's filter does (a string to the literal's type, an Integer up to Long or Double, ...),
with Java's own number parsing: ``Integer.valueOf`` takes no ``7.5`` and no ``+ 7``,
``Double.valueOf`` takes ``7``, `` 7.5 ``, ``1e3``, ``NaN`` and ``7.5f``. A conversion that
fails is an `EvaluationError`, and a message whose evaluation fails does not match.

Values here: ``str``, ``bool``, ``float`` (Double), ``int`` (Integer) and `JavaLong` (Long),
so an Integer literal and a Long literal stay apart as they do in Java (``a > 5`` reads ``a``
as an Integer, so ``a = '3000000000'`` fails to convert there; ``a > 5000000000`` reads it as
a Long).
"""

from __future__ import annotations

import math
import re
import unicodedata

__all__ = ["EvaluationError", "JavaLong", "compare", "is_number", "parse_double", "parse_int"]

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1

_ASCII_INT = re.compile(r"[+-]?[0-9]+")
# Java's Double.valueOf grammar after String.trim() (FloatingDecimal): decimal or hex digits,
# an optional exponent and an optional type suffix; NaN and Infinity spelled exactly so.
_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity"
    r"|(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)"
    r"|(?:0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+[fFdD]?))",
)


class EvaluationError(Exception):
    """Evaluating an expression failed (a conversion Java refuses); the message does not match.

    Its text is the Java exception's (``java.lang.NumberFormatException: For input string:
    "x"``), which is what RocketMQ's remark shows when a parse-time check meets it.
    """


class JavaLong(int):
    """A Java Long (a plain ``int`` is a Java Integer)."""

    __slots__ = ()

    def __neg__(self) -> JavaLong:
        return JavaLong(-int(self))


def is_number(value: object) -> bool:
    """True for Integer, Long and Double values."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def parse_int(text: str, low: int = INT_MIN, high: int = INT_MAX) -> int:
    """Java's Integer.valueOf (or Long.valueOf with the Long bounds): sign and decimal digits."""
    if _ASCII_INT.fullmatch(text):
        value = int(text)
        if low <= value <= high:
            return value
        raise EvaluationError(f'java.lang.NumberFormatException: For input string: "{text}"')
    if not text:
        raise EvaluationError('java.lang.NumberFormatException: For input string: ""')
    digits = text[1:] if text[0] in "+-" else text
    # Character.digit also takes other scripts' decimal digits, one UTF-16 unit each.
    if not digits or not all(
        "0" <= ch <= "9" or (ord(ch) <= 0xFFFF and unicodedata.decimal(ch, None) is not None)
        for ch in digits
    ):
        raise EvaluationError(f'java.lang.NumberFormatException: For input string: "{text}"')
    value = int("".join(str(unicodedata.decimal(ch)) for ch in digits))
    if text[0] == "-":
        value = -value
    if not low <= value <= high:
        raise EvaluationError(f'java.lang.NumberFormatException: For input string: "{text}"')
    return value


def parse_double(text: str) -> float:
    """Java's Double.valueOf."""
    trimmed = _java_trim(text)
    if _DOUBLE.fullmatch(trimmed) is None:
        raise EvaluationError(f'java.lang.NumberFormatException: For input string: "{text}"')
    body = trimmed[:-1] if trimmed[-1] in "fFdD" else trimmed
    if "x" in body or "X" in body:
        return float.fromhex(body)
    return float(body)


def _java_trim(text: str) -> str:
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


def _compare_doubles(left: float, right: float) -> int:
    # Double.compareTo: NaN above everything and equal to itself, -0.0 below 0.0.
    if left < right:
        return -1
    if left > right:
        return 1
    left_nan, right_nan = math.isnan(left), math.isnan(right)
    if left_nan or right_nan:
        return (left_nan > right_nan) - (left_nan < right_nan)
    left_sign, right_sign = math.copysign(1.0, left), math.copysign(1.0, right)
    return (left_sign > right_sign) - (left_sign < right_sign)


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "Boolean"
    if isinstance(value, str):
        return "String"
    if isinstance(value, float):
        return "Double"
    if isinstance(value, JavaLong):
        return "Long"
    return "Integer"


def compare(left: object, right: object) -> int:
    """Compare two non-null values as the filter does, converting one to the other's type.

    A pair that cannot be converted (a number and a Boolean) compares as "less"; a string that
    does not parse as the other side's number raises `EvaluationError`.
    """
    lk, rk = _kind(left), _kind(right)
    if lk != rk:
        if lk == "Boolean":
            if rk == "String":  # the broker's conversion fails on this pair
                raise EvaluationError(
                    "java.lang.ClassCastException: java.lang.Boolean cannot be cast to "
                    "java.lang.String"
                )
            return -1
        if lk == "String":
            assert isinstance(left, str)
            if rk == "Boolean":
                left = left.lower() == "true"
            elif rk == "Integer":
                left = parse_int(left)
            elif rk == "Long":
                left = parse_int(left, LONG_MIN, LONG_MAX)
            else:
                left = parse_double(left)
        elif rk == "Boolean":
            return -1
        elif rk == "String":
            assert isinstance(right, str)
            if lk == "Integer":
                right = parse_int(right)
            elif lk == "Long":
                right = parse_int(right, LONG_MIN, LONG_MAX)
            else:
                right = parse_double(right)
        elif lk == "Double" or rk == "Double":
            left, right = float(left), float(right)  # type: ignore[arg-type]
    if isinstance(left, float) or isinstance(right, float):
        return _compare_doubles(float(left), float(right))  # type: ignore[arg-type]
    if isinstance(left, str):
        assert isinstance(right, str)
        return _compare_utf16(left, right)
    assert isinstance(left, int) and isinstance(right, int)  # Integer, Long or Boolean
    return (left > right) - (left < right)


def _compare_utf16(left: str, right: str) -> int:
    # String.compareTo orders by UTF-16 units, which differs from code points above U+FFFF.
    if left == right:
        return 0
    a = left.encode("utf-16-be", "surrogatepass")
    b = right.encode("utf-16-be", "surrogatepass")
    return -1 if a < b else 1
