"""`MessageSelector`: what a consumer subscribes with, by tag or by SQL92 (RocketMQ's own).

``consumer.subscribe("Orders", "TagA || TagB")`` subscribes by tag, as before;
``consumer.subscribe("Orders", MessageSelector.by_sql("a > 5 AND region = 'eu'"))`` by a
SQL92 selector over the messages' properties, which the broker evaluates (it needs
``enablePropertyFilter=true``; the consumers ask the broker with CHECK_CLIENT_CONFIG before
they take queues, as Java's do, so a bad expression or a broker without the filter fails the
subscription with the broker's code and remark). The grammar and its rules are
`protocol.filter`'s, shared with the broker.
"""

from __future__ import annotations

import attrs

from protocol.filter import SQL92, TAG, is_tag_type

__all__ = ["MessageSelector", "selector_of"]


@attrs.frozen
class MessageSelector:
    """An expression and its type: ``TAG`` (``*``, ``TagA || TagB``) or ``SQL92``."""

    expression_type: str
    expression: str

    @classmethod
    def by_sql(cls, sql: str) -> MessageSelector:
        """A SQL92 selector, such as ``a > 5 AND b IN ('x', 'y')``."""
        if not sql or not sql.strip():
            raise ValueError("a SQL92 selector needs an expression")
        return cls(SQL92, sql)

    @classmethod
    def by_tag(cls, tag: str | None = None) -> MessageSelector:
        """A tag expression (``TagA || TagB``); none or blank selects every message."""
        return cls(TAG, tag if tag and tag.strip() else "*")

    @property
    def is_tag(self) -> bool:
        """True for a tag expression."""
        return is_tag_type(self.expression_type)


def selector_of(expression: str | MessageSelector) -> MessageSelector:
    """What ``subscribe`` was given, as a selector (a plain string is a tag expression)."""
    if isinstance(expression, MessageSelector):
        if not expression.is_tag and expression.expression_type != SQL92:
            raise ValueError(
                f"expression type {expression.expression_type!r} is not supported: TAG or SQL92"
            )
        return expression
    if not isinstance(expression, str):
        raise TypeError(
            f"subscribe takes a tag expression or a MessageSelector, not {type(expression)!r}"
        )
    return MessageSelector(TAG, expression)
