"""Message filters of RocketMQ 4.9, shared by the broker and the client (sans-IO).

A subscription names an expression type: ``TAG`` (``TagA || TagB``, or ``*``: the broker
filters by the consume queue's tag hash) or ``SQL92`` (a selector over the message's
properties, `compile_sql92`). The SQL92 evaluator follows RocketMQ's filter module exactly:
its grammar, its type conversions (a property is read as the type of what it is compared
with) and its nulls (a missing property makes a comparison unknown, and unknown does not
match), and an evaluation that fails does not match either.

    >>> selector = compile_sql92("a > 5 AND b IN ('x', 'y')")
    >>> selector.matches({"a": "7", "b": "x"}), selector.matches({"a": "7"})
    (True, False)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from protocol.filter._java import EvaluationError
from protocol.filter._sql92 import Evaluator, FilterParseError, parse

__all__ = [
    "SQL92",
    "TAG",
    "EvaluationError",
    "FilterParseError",
    "Sql92Filter",
    "compile_sql92",
    "is_tag_type",
]

#: RocketMQ's ExpressionType names.
SQL92 = "SQL92"
TAG = "TAG"


def is_tag_type(expression_type: str | None) -> bool:
    """True for a TAG subscription (RocketMQ takes a missing or empty type as TAG)."""
    return expression_type is None or expression_type in ("", TAG)


class Sql92Filter:
    """A compiled SQL92 selector; `matches` tells whether a message's properties pass it."""

    __slots__ = ("_evaluate", "expression")

    def __init__(self, expression: str, evaluate: Evaluator) -> None:
        self.expression = expression
        self._evaluate = evaluate

    def evaluate(self, properties: Mapping[str, str]) -> object:
        """The selector's value: True, False or None (unknown); `EvaluationError` when a
        conversion fails."""
        return self._evaluate(properties)

    def matches(self, properties: Mapping[str, str]) -> bool:
        """True only when the selector is true for these properties (unknown or an
        evaluation error: False, as the broker decides)."""
        try:
            return self._evaluate(properties) is True
        except EvaluationError:
            return False

    def __repr__(self) -> str:
        return f"Sql92Filter({self.expression!r})"


def compile_sql92(expression: str) -> Sql92Filter:
    """Compile a SQL92 selector (cached by its text, as RocketMQ caches its parses);
    `FilterParseError` (with the broker's ``remark``) when RocketMQ would refuse it."""
    compiled = _compile(expression)
    if isinstance(compiled, FilterParseError):
        # A fresh exception each time: raising the cached one would grow its traceback.
        raise FilterParseError(compiled.java_class, compiled.message)
    return compiled


@functools.lru_cache(maxsize=512)
def _compile(expression: str) -> Sql92Filter | FilterParseError:
    try:
        return Sql92Filter(expression, parse(expression))
    except FilterParseError as error:
        return error
