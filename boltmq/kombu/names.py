"""kombu's queue and exchange names as BoltMQ topic and consumer group names.

kombu names hold characters a RocketMQ name cannot (``celery@host.celery.pidbox``,
``<uuid>.reply.celery.pidbox``, ``celeryev.<uuid>``), so every name is mapped, stably (the
same name always gives the same topic and group, in every process) and by one rule:

- A name made only of ``[a-zA-Z0-9_-]`` is used as it is: queue ``celery`` is topic
  ``celery``, consumed by group ``celery``.
- Any other name has each other character replaced by ``-`` and gains ``_`` and ten hex
  digits of its BLAKE2b hash, so two names that differ only in replaced characters stay
  apart: ``celery@w1.celery.pidbox`` -> ``celery-w1-celery-pidbox_<hash>``.
- An exchange's topic is ``exchange-`` + its mapped name (a queue and an exchange often share
  a name, as Celery's ``celery`` does).
- A queue's consumer group is its mapped name when that has at most `GROUP_MAX` characters,
  else its first `GROUP_MAX` - 11 characters, ``_`` and the hash.
- A topic (queue or exchange) may have at most `TOPIC_MAX` characters: the broker keeps a
  popped message that comes back in ``%RETRY%<group>_<topic>``, and a topic name holds at
  most 127 characters, so group and topic together must stay within 119. A longer name is
  refused with `NameTooLong`, which says the rule; nothing is truncated silently.
"""

from __future__ import annotations

import hashlib
import re

__all__ = [
    "EXCHANGE_TOPIC_PREFIX",
    "GROUP_MAX",
    "TOPIC_MAX",
    "NameTooLong",
    "exchange_topic",
    "mapped_name",
    "queue_group",
    "queue_topic",
]

#: RocketMQ's limit on a topic name.
ROCKETMQ_TOPIC_MAX = 127
#: ``%RETRY%`` + ``_``: what a pop retry topic adds to its group and topic names.
_RETRY_OVERHEAD = len("%RETRY%") + 1
#: The longest consumer group a queue is given.
GROUP_MAX = 48
#: The longest topic a queue or an exchange may map to.
TOPIC_MAX = ROCKETMQ_TOPIC_MAX - _RETRY_OVERHEAD - GROUP_MAX
#: An exchange's topic is this prefix and the exchange's mapped name.
EXCHANGE_TOPIC_PREFIX = "exchange-"

_VALID = re.compile(r"[a-zA-Z0-9_-]+")
_INVALID_CHAR = re.compile(r"[^a-zA-Z0-9_-]")
_HASH_CHARS = 10


class NameTooLong(ValueError):
    """A kombu name whose topic would pass `TOPIC_MAX` characters; the message says the rule."""


def mapped_name(name: str) -> str:
    """``name`` as it is when it is a valid RocketMQ name, else with its characters replaced
    and its hash appended (see the module docstring)."""
    if not name:
        raise ValueError("a kombu queue or exchange name cannot be empty here")
    if _VALID.fullmatch(name):
        return name
    return f"{_INVALID_CHAR.sub('-', name)}_{_hash(name)}"


def queue_topic(queue: str) -> str:
    """The topic that holds kombu queue ``queue``'s messages."""
    return _checked(mapped_name(queue), queue, "queue")


def exchange_topic(exchange: str) -> str:
    """The broadcast topic of kombu exchange ``exchange`` (fanout, topic or direct)."""
    return _checked(EXCHANGE_TOPIC_PREFIX + mapped_name(exchange), exchange, "exchange")


def queue_group(queue: str) -> str:
    """The consumer group that consumes kombu queue ``queue`` (its topic and its bindings)."""
    name = mapped_name(queue)
    if len(name) <= GROUP_MAX:
        return name
    return f"{name[: GROUP_MAX - _HASH_CHARS - 1]}_{_hash(queue)}"


def _hash(name: str) -> str:
    return hashlib.blake2b(name.encode(), digest_size=_HASH_CHARS // 2).hexdigest()


def _checked(topic: str, name: str, what: str) -> str:
    if len(topic) > TOPIC_MAX:
        shown = name if len(name) <= 60 else name[:57] + "..."
        raise NameTooLong(
            f"kombu {what} name {shown!r} ({len(name)} characters) maps to topic of "
            f"{len(topic)} characters; at most {TOPIC_MAX} are allowed (RocketMQ topic names "
            f"hold {ROCKETMQ_TOPIC_MAX}, less '%RETRY%<group>_' for a group of up to "
            f"{GROUP_MAX}; characters outside [a-zA-Z0-9_-] add an 11-character hash): "
            "choose a shorter name"
        )
    return topic
