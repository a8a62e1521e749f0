"""Seeds for the decoder fuzzer: real client captures and encodings of sample values.

Captures are the frames the official C++ client sent (``tests/protocol/data``); body seeds are
a sample of every body class built from its field types and encoded with ``to_json``, plus the
bodies the captures carried.
"""

from __future__ import annotations

import enum
import json
import types
import typing
from pathlib import Path
from typing import Any

import attrs
import orjson

import protocol.bodies as bodies_module
from protocol.codes import SerializeType
from protocol.command import RemotingCommand
from protocol.frame import encode
from protocol.headers import wire_keys
from protocol.message import (
    BatchElement,
    MessageConst,
    MessageSysFlag,
    encode_batch,
    encode_record,
    properties_to_string,
)

CAPTURES = Path(__file__).resolve().parent.parent / "tests" / "protocol" / "data"


def capture_commands() -> list[RemotingCommand]:
    """The captured client requests as commands (body as logged, when there was one)."""
    commands = []
    for path in sorted(CAPTURES.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            header = json.loads(entry["raw_header"])
            logged = entry.get("body_as_logged")
            body = logged.encode() if isinstance(logged, str) else None
            commands.append(
                RemotingCommand(
                    header["code"],
                    opaque=header.get("opaque", 0),
                    flag=header.get("flag", 0),
                    remark=header.get("remark") or None,
                    ext_fields={k: str(v) for k, v in header.get("extFields", {}).items()},
                    body=body,
                )
            )
    return commands


def frame_seeds(commands: list[RemotingCommand]) -> list[bytes]:
    """Each capture framed with a JSON header and with a ROCKETMQ binary header."""
    seeds = []
    for command in commands:
        seeds.append(encode(command))
        command.serialize_type = SerializeType.ROCKETMQ
        seeds.append(encode(command))
        command.serialize_type = SerializeType.JSON
    return seeds


def header_seeds(commands: list[RemotingCommand]) -> list[bytes]:
    """``<code>\\n<extFields JSON>`` of each capture."""
    return [
        str(command.code).encode() + b"\n" + orjson.dumps(command.ext_fields or {})
        for command in commands
    ]


def record_seeds() -> list[bytes]:
    """Records with v4 and v6 hosts, empty and compressed bodies, and a pull body of three."""
    props = properties_to_string(
        {MessageConst.TAGS: "TagA", MessageConst.KEYS: "k1 k2", MessageConst.UNIQ_KEY: "AB" * 16}
    )
    one = bytes(encode_record(topic="T", body=b"hello", queue_id=1, properties=props))
    v6 = bytes(
        encode_record(
            topic="TopicV6",
            body=b"x" * 40,
            queue_id=0,
            born_host=("::1", 5),
            store_host=("fe80::1", 10911),
            sys_flag=MessageSysFlag.COMPRESSED,
        )
    )
    empty = bytes(encode_record(topic="E", body=b"", queue_id=3))
    return [one, v6, empty, one + empty + one]


def batch_seeds() -> list[bytes]:
    """Batch bodies of one and of three elements."""
    elements = [
        BatchElement(0, b"first", properties_to_string({MessageConst.TAGS: "a"})),
        BatchElement(4, b"", ""),
        BatchElement(0, b"third" * 10, properties_to_string({MessageConst.KEYS: "k"})),
    ]
    return [encode_batch(elements[:1]), encode_batch(elements)]


def properties_seeds() -> list[bytes]:
    """Broker and registry config files as operators write them."""
    return [
        b"brokerClusterName = DefaultCluster\nbrokerName=broker-a\nbrokerId=0\n"
        b"deleteWhen=04\nfileReservedTime=48\nbrokerRole=ASYNC_MASTER\n# a comment\n"
        b"flushDiskType=ASYNC_FLUSH\nnamesrvAddr=127.0.0.1:9876;127.0.0.2:9876\n",
        b"! bang comment\nkey\\ with\\ spaces : value \\\n    continued\nunicode=\\u00e9\\t\n",
        b"listenPort 9876\nempty=\n\\u0041=\\n\n",
    ]


def body_classes() -> list[type]:
    """Every body class ``protocol.bodies`` exports (each has ``from_json``)."""
    found = []
    for name in bodies_module.__all__:
        value = getattr(bodies_module, name)
        if isinstance(value, type) and attrs.has(value) and hasattr(value, "from_json"):
            found.append(value)
    return found


def body_seeds(cls: type | None) -> list[bytes]:
    """A sample of ``cls`` (of every body class when None) as JSON, and the captured bodies
    that decode as it."""
    classes = body_classes() if cls is None else [cls]
    seeds = [b"{}"]
    for each in classes:
        try:
            seeds.append(each.to_json(sample(each)))  # type: ignore[attr-defined]
        except Exception:  # a class the generic sample cannot build: its captures remain
            continue
    for command in capture_commands():
        body = bytes(command.body or b"")
        if body[:1] == b"{":
            if cls is None:
                seeds.append(body)
                continue
            try:
                cls.from_json(body)  # type: ignore[attr-defined]
            except ValueError:
                continue
            seeds.append(body)
    return seeds


def sample(cls: Any, depth: int = 0) -> Any:
    """A value of type ``cls`` with every field set: collections of one element."""
    origin = typing.get_origin(cls)
    args = typing.get_args(cls)
    if origin in (typing.Union, types.UnionType):
        return sample(next(arg for arg in args if arg is not type(None)), depth)
    if origin in (list, set, frozenset, tuple):
        items = [sample(args[0], depth + 1)] if args and depth < 4 else []
        return origin(items) if origin is not tuple else tuple(items)
    if origin is dict:
        return {sample(args[0], depth + 1): sample(args[1], depth + 1)} if depth < 4 else {}
    if isinstance(cls, type) and issubclass(cls, enum.Enum):
        return next(iter(cls))
    if cls is bool:
        return True
    if cls is int:
        return 7
    if cls is float:
        return 1.5
    if cls is str:
        return "s"
    if cls is bytes:
        return b"b"
    if isinstance(cls, type) and attrs.has(cls):
        hints = typing.get_type_hints(cls)
        return cls(**{a.name: sample(hints[a.name], depth + 1) for a in attrs.fields(cls)})
    if cls is Any:
        return "any"
    raise TypeError(f"no sample for {cls!r}")


def nested_wire_keys(cls: Any, seen: set[Any] | None = None) -> set[str]:
    """The wire keys of ``cls`` and of the attrs classes inside its fields."""
    seen = set() if seen is None else seen
    if cls in seen:
        return set()
    seen.add(cls)
    keys: set[str] = set()
    if isinstance(cls, type) and attrs.has(cls):
        keys.update(wire_keys(cls).values())
        for hint in typing.get_type_hints(cls).values():
            keys |= nested_wire_keys(hint, seen)
    for arg in typing.get_args(cls):
        keys |= nested_wire_keys(arg, seen)
    return keys
