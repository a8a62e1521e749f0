"""RocketMQ 5's topic attributes: the ``attributes`` map of a `TopicConfig` and the change
string UPDATE_AND_CREATE_TOPIC carries (``"+message.type=FIFO,+key=value,-key"``).

A change string adds or replaces a key with ``+key=value`` and removes one with ``-key``. On
a new topic only ``+`` is allowed. The keys this broker knows are `TOPIC_ATTRIBUTES`; a
change naming another key, a value outside a key's set, a malformed item or a key named
twice is refused whole (`TopicAttributeError`), so a bad request changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

#: The attribute a gRPC front reads to learn how a topic's messages may be sent.
MESSAGE_TYPE = "message.type"

#: RocketMQ 5's message types (TopicMessageType): NORMAL is assumed when the key is absent.
MESSAGE_TYPES = frozenset({"UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"})

#: Known keys -> the values each accepts. RocketMQ 5 also knows queue.type, cleanup.policy and
#: reserve.time, which change how its store keeps a topic; this store has no such modes, so
#: they are refused rather than accepted and ignored.
TOPIC_ATTRIBUTES: Mapping[str, frozenset[str]] = {MESSAGE_TYPE: MESSAGE_TYPES}


class TopicAttributeError(ValueError):
    """A topic attribute change that is malformed or names an unknown key or value."""


def parse_attribute_changes(text: str | None) -> dict[str, str]:
    """``"+a=b,-c"`` -> ``{"+a": "b", "-c": ""}`` (the signed keys kept, as on the wire)."""
    changes: dict[str, str] = {}
    if not text:
        return changes
    for item in text.split(","):
        item = item.strip()
        if "=" in item:
            key, _, value = item.partition("=")
            if not key.startswith("+") or not value:
                raise TopicAttributeError(
                    f"attribute {item!r} is malformed: add or change a key as +key=value"
                )
        else:
            key, value = item, ""
            if not key.startswith("-"):
                raise TopicAttributeError(
                    f"attribute {item!r} is malformed: remove a key as -key, "
                    "add or change one as +key=value"
                )
        if len(key) < 2:
            raise TopicAttributeError(f"attribute {item!r} names no key")
        if key in changes:
            raise TopicAttributeError(f"attribute {key[1:]} is named twice")
        changes[key] = value
    return changes


def format_attribute_changes(changes: Mapping[str, str]) -> str:
    """The wire form of signed ``changes``: ``{"+a": "b", "-c": ""}`` -> ``"+a=b,-c"``."""
    return ",".join(f"{key}={value}" if value else key for key, value in changes.items())


def alter_attributes(
    current: Mapping[str, str], changes: Mapping[str, str], *, create: bool
) -> dict[str, str]:
    """The attributes after applying signed ``changes`` to ``current``; raises
    `TopicAttributeError` (and changes nothing) when any change is refused."""
    result = dict(current)
    seen: set[str] = set()
    for signed, value in changes.items():
        sign, key = signed[:1], signed[1:]
        if not key or "+" in key or "-" in key or sign not in "+-":
            raise TopicAttributeError(f"attribute {signed!r} is malformed")
        if key in seen:
            raise TopicAttributeError(f"attribute {key} is named twice")
        seen.add(key)
        allowed = TOPIC_ATTRIBUTES.get(key)
        if allowed is None:
            known = ", ".join(sorted(TOPIC_ATTRIBUTES))
            raise TopicAttributeError(f"unsupported topic attribute {key!r}; known: {known}")
        if sign == "-":
            if create:
                raise TopicAttributeError(
                    f"a new topic takes only +key=value attributes, not -{key}"
                )
            if key not in result:
                raise TopicAttributeError(f"attribute {key} cannot be removed: it is not set")
            del result[key]
            continue
        if value not in allowed:
            raise TopicAttributeError(
                f"{key}={value} is refused: {key} is one of {', '.join(sorted(allowed))}"
            )
        result[key] = value
    return result
