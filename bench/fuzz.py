"""Fuzz the decoders: random and mutated inputs into every parser of untrusted bytes.

Targets (one per decoder): ``frame`` (FrameDecoder and ``decode``), ``header`` (the header
converter, every request and response header class), ``record`` (commit-log records and pull
bodies), ``batch`` (SEND_BATCH_MESSAGE bodies), ``msgid`` (offset msg ids), ``fastjson``
(fastjson's JSON dialect), ``properties`` (properties files), ``sql92`` (SQL92 selectors, parsed
and evaluated), and ``body:<Class>`` for every JSON body in ``protocol.bodies``. Each target
accepts only its documented error (FrameError, RemotingError, MessageFormatError, BodyError,
FilterParseError, ...); any other exception is a crash.

Inputs are mutations of seeds: real frames and bodies from client captures, encodings of
sample messages and of every body class, with byte-level mutations (flips, splices, lengths
that lie) and, for JSON, structure-aware ones (values swapped for other JSON types, keys
dropped or added from the class's own wire keys). Inputs a target accepts join its pool of
seeds. Every run is reproducible from ``--seed``.

    python -m bench fuzz [--inputs 1000000] [--seed 1] [--targets frame,record] [--save DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench.fuzz_seeds import (
    batch_seeds,
    body_classes,
    body_seeds,
    capture_commands,
    frame_seeds,
    header_seeds,
    properties_seeds,
    record_seeds,
)
from protocol import fastjson
from protocol.bodies import BodyError
from protocol.command import RemotingError
from protocol.filter import EvaluationError, FilterParseError
from protocol.filter._sql92 import parse as parse_sql92
from protocol.frame import FrameDecoder, FrameError, decode
from protocol.headers import REQUEST_HEADERS, RESPONSE_HEADERS, decode_header, decode_request_header
from protocol.message import (
    MessageFormatError,
    decode_batch,
    decode_offset_msg_id,
    decode_record,
    decode_records,
)
from supervisors.config import ConfigError, parse_properties

#: Inputs slower than this are reported: a decoder must not spin on hostile input.
SLOW_SECONDS = 0.5
MAX_INPUT = 1 << 16


@dataclass
class Target:
    """One decoder under fuzz: ``run(data)`` and the errors it is allowed to raise."""

    name: str
    run: Callable[[bytes], object]
    accepted: tuple[type[BaseException], ...]
    seeds: list[bytes]
    json_input: bool = False  # seeds are JSON (after an optional ``prefix`` line)
    wire_keys: list[str] = field(default_factory=list)


@dataclass
class Crash:
    """A crash: the exception, where it was raised and the first input that raised it."""

    target: str
    error: str
    where: str
    data: bytes
    count: int = 1


@dataclass
class Report:
    """What a run of one target found."""

    target: str
    inputs: int = 0
    rejected: int = 0
    seconds: float = 0.0
    slowest: float = 0.0
    slowest_data: bytes = b""
    #: The slowest input timed again alone: a load spike is not a slow decoder.
    slowest_again: float = 0.0
    crashes: dict[tuple[str, str], Crash] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        """Inputs per second."""
        return self.inputs / self.seconds if self.seconds else 0.0


# -- targets ----------------------------------------------------------------------------------


def _frame(data: bytes) -> None:
    try:
        decode(data, 1 << 20)
    except FrameError:
        pass
    decoder = FrameDecoder(limit=1 << 20)
    # Fed in two pieces too: the streaming decoder must agree with itself across a split.
    cut = len(data) // 3
    decoder.feed(data[:cut])
    decoder.feed(data[cut:])


_HEADER_CLASSES = sorted(
    {*REQUEST_HEADERS.values(), *RESPONSE_HEADERS.values()}, key=lambda cls: cls.__name__
)


def _split_prefixed(data: bytes) -> tuple[bytes, bytes]:
    prefix, _, rest = data.partition(b"\n")
    return prefix, rest


def _header(data: bytes) -> None:
    """``<code>\\n<extFields JSON>``: a request header by code; a negative code picks a response
    header class by index."""
    prefix, rest = _split_prefixed(data)
    try:
        code = int(prefix)
        ext_fields = orjson.loads(rest)
    except ValueError:
        return  # not a header at all: frames reject such input before the converter sees it
    if not isinstance(ext_fields, dict):
        return
    if code >= 0:
        decode_request_header(code, ext_fields)
    else:
        decode_header(_HEADER_CLASSES[-code % len(_HEADER_CLASSES)], ext_fields)


def _record(data: bytes) -> None:
    try:
        decode_record(data, check_crc=True)
    except MessageFormatError:
        pass
    decode_records(data)


def _msgid(data: bytes) -> None:
    decode_offset_msg_id(data.decode("latin-1"))


def _properties(data: bytes) -> None:
    parse_properties(data.decode("utf-8", "surrogateescape"), "fuzz.properties")


#: Properties every fuzzed selector is evaluated against: numbers, text, a boolean, TAGS.
_SQL_PROPERTIES = {"a": "7", "b": "x", "c": "3.5", "d": "true", "TAGS": "TagA", "e": "-9"}
_SQL_SEEDS = [
    b"a > 5", b"a BETWEEN 3 AND 4", b"b IN ('x', 'y')", b"c IS NULL", b"NOT (a = 7) OR d = TRUE",
    b"TAGS = 'TagA' AND e < -1.5", b"a <> 3 AND b NOT IN ('z') AND c >= 3.5E0",
    b"(a > 1 OR b = 'q') AND NOT c IS NOT NULL", b"e NOT BETWEEN -10 AND 10",
]


def _sql92(data: bytes) -> None:
    # Uncached (parse, not compile_sql92): a fuzz run must not fill the selector cache.
    evaluate = parse_sql92(data.decode("utf-8", "surrogateescape"))
    try:
        evaluate(_SQL_PROPERTIES)
    except EvaluationError:
        pass  # a conversion that fails is "no match", not a crash


def _body(cls: Any) -> Callable[[bytes], object]:
    def run(data: bytes) -> object:
        return cls.from_json(data)

    return run


def targets() -> dict[str, Target]:
    """Every target by name, with its seeds."""
    commands = capture_commands()
    found = [
        Target("frame", _frame, (FrameError,), frame_seeds(commands)),
        Target("header", _header, (RemotingError,), header_seeds(commands), json_input=True),
        Target("record", _record, (MessageFormatError,), record_seeds()),
        Target("batch", decode_batch, (MessageFormatError,), batch_seeds()),
        Target("msgid", _msgid, (MessageFormatError,), [b"7F00000100002A9F0000000000001234"]),
        Target(
            "fastjson",
            fastjson.loads,
            (fastjson.FastjsonDecodeError,),
            body_seeds(None),
            json_input=True,
        ),
        Target("properties", _properties, (ConfigError,), properties_seeds()),
        Target("sql92", _sql92, (FilterParseError,), list(_SQL_SEEDS)),
    ]
    for cls in body_classes():
        keys = sorted(_wire_keys_deep(cls))
        found.append(
            Target(
                f"body:{cls.__name__}",
                _body(cls),
                (BodyError,),
                body_seeds(cls),
                json_input=True,
                wire_keys=keys,
            )
        )
    return {target.name: target for target in found}


def _wire_keys_deep(cls: Any) -> set[str]:
    from bench.fuzz_seeds import nested_wire_keys

    return nested_wire_keys(cls)


# -- mutation ---------------------------------------------------------------------------------

_INTERESTING = [0, 1, -1, 0x7F, 0x80, 0xFF, 0x7FFF, -0x8000, 0x7FFFFFFF, -0x80000000, 1 << 20]
_JSON_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1.5,
    1e308,
    2**63,
    -(2**70),
    "",
    "x",
    "-7",
    "1e3",
    "NaN",
    "true",
    [],
    [1],
    {},
    {"a": 1},
    [[[]]],
    "\u00e9",
    "TagA||TagB",
    "CONSUME_ACTIVELY",
    10**400,
    "1e999",
    float("inf"),
    "9" * 5000,
    "\ud800",
]


def mutate_bytes(rng: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    """One to four byte-level mutations of ``data``."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.randrange(10)
        size = len(buf)
        if choice == 0 and size:  # flip bits
            buf[rng.randrange(size)] ^= 1 << rng.randrange(8)
        elif choice == 1 and size:  # set a byte
            buf[rng.randrange(size)] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        elif choice == 2 and size >= 4:  # an interesting 32-bit value: a length that lies
            at = rng.randrange(size - 3)
            value = rng.choice(_INTERESTING) & 0xFFFFFFFF
            buf[at : at + 4] = value.to_bytes(4, "big")
        elif choice == 3 and size >= 2:  # an interesting 16-bit value
            at = rng.randrange(size - 1)
            buf[at : at + 2] = (rng.choice(_INTERESTING) & 0xFFFF).to_bytes(2, "big")
        elif choice == 4 and size:  # truncate
            del buf[rng.randrange(size) :]
        elif choice == 5 and size:  # delete a chunk
            at = rng.randrange(size)
            del buf[at : at + rng.randint(1, 16)]
        elif choice == 6:  # insert random bytes
            at = rng.randint(0, size)
            buf[at:at] = rng.randbytes(rng.randint(1, 16))
        elif choice == 7 and size:  # duplicate a chunk
            at = rng.randrange(size)
            chunk = buf[at : at + rng.randint(1, 64)]
            where = rng.randint(0, size)
            buf[where:where] = chunk * rng.randint(1, 4)
        elif choice == 8 and pool:  # splice with another input
            other = rng.choice(pool)
            buf = buf[: rng.randint(0, size)] + other[rng.randint(0, len(other)) :]
        elif choice == 9 and size:  # an ASCII digit or sign where a number may be
            buf[rng.randrange(size)] = rng.choice(b'-0123456789.eE{}[]":,')
    return bytes(buf[:MAX_INPUT])


def mutate_json(rng: random.Random, data: bytes, keys: list[str]) -> bytes | None:
    """A structure-aware mutation of a JSON input (after its optional prefix line); None when
    the input is not JSON."""
    prefix, sep, rest = data.partition(b"\n") if data[:1] not in (b"{", b"[") else (b"", b"", data)
    try:
        doc = orjson.loads(rest)
    except orjson.JSONDecodeError:
        return None
    slots = list(_slots(doc))
    for _ in range(rng.randint(1, 3)):
        if not slots:
            break
        container, key = rng.choice(slots)
        choice = rng.randrange(4)
        if choice == 0:
            container[key] = _random_json(rng, keys)
        elif choice == 1 and isinstance(container, dict):
            container.pop(key, None)
        elif choice == 2 and isinstance(container, dict) and keys:
            container[rng.choice(keys)] = _random_json(rng, keys)
        elif choice == 3 and isinstance(container, list):
            container.append(_random_json(rng, keys))
    text = json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    if rng.random() < 0.2:  # fastjson's bare keys
        text = text.replace(b'"', b"", rng.randint(1, 4))
    return (prefix + sep if sep else b"") + text


def _slots(doc: Any) -> Iterator[tuple[Any, Any]]:
    stack = [doc]
    while stack:
        node = stack.pop()
        items = (
            node.items()
            if isinstance(node, dict)
            else enumerate(node)
            if isinstance(node, list)
            else ()
        )
        for key, value in items:
            yield node, key
            stack.append(value)


def _random_json(rng: random.Random, keys: list[str]) -> Any:
    value = rng.choice(_JSON_VALUES)
    if isinstance(value, (dict, list)):
        value = json.loads(json.dumps(value))  # a fresh copy, as it may be mutated later
    if rng.random() < 0.2 and keys:
        return {rng.choice(keys): _random_json(rng, []) for _ in range(rng.randint(1, 3))}
    return value


# -- the engine -------------------------------------------------------------------------------


def fuzz_target(target: Target, inputs: int, seed: int) -> Report:
    """Feed ``inputs`` inputs to ``target``; crashes are collected, not raised."""
    rng = random.Random(f"{seed}:{target.name}")
    report = Report(target.name)
    pool = list(target.seeds) or [b""]
    accepted = target.accepted
    run = target.run
    clock = time.perf_counter
    start = clock()
    for n in range(inputs):
        parent = rng.choice(pool)
        data: bytes | None = None
        if n % 97 == 0:
            data = rng.randbytes(rng.randrange(200))  # pure noise now and then
        elif target.json_input and rng.random() < 0.5:
            data = mutate_json(rng, parent, target.wire_keys)
        if data is None:
            data = mutate_bytes(rng, parent, pool)
        began = clock()
        try:
            run(data)
        except accepted:
            report.rejected += 1
        except Exception as exc:  # anything else is the crash being hunted
            _record_crash(report, target.name, exc, data)
        else:
            if len(pool) < 4096 and rng.random() < 0.05:
                pool.append(data)
        took = clock() - began
        if took > report.slowest:
            report.slowest, report.slowest_data = took, data
        report.inputs += 1
    report.seconds = clock() - start
    began = clock()
    try:
        run(report.slowest_data)
    except Exception:
        pass  # already counted above
    report.slowest_again = clock() - began
    return report


def _record_crash(report: Report, name: str, exc: Exception, data: bytes) -> None:
    frames = traceback.extract_tb(exc.__traceback__)
    last = frames[-1] if frames else None
    where = f"{Path(last.filename).name}:{last.lineno} in {last.name}" if last else "?"
    key = (type(exc).__name__, where)
    crash = report.crashes.get(key)
    if crash is None:
        report.crashes[key] = Crash(name, f"{type(exc).__name__}: {exc}"[:200], where, data)
    else:
        crash.count += 1
        if len(data) < len(crash.data):
            crash.data = data  # keep the smallest input for the regression test


def run(names: list[str], inputs: int, seed: int, save: Path | None = None) -> list[Report]:
    """Fuzz ``names`` with ``inputs`` inputs in all (split evenly, at least one each); print a
    line per target."""
    chosen = targets()
    unknown = [name for name in names if name not in chosen]
    if unknown:
        raise SystemExit(f"unknown fuzz target {unknown[0]!r}; choose from {', '.join(chosen)}")
    selected = [chosen[name] for name in names] if names else list(chosen.values())
    each, extra = divmod(inputs, len(selected))
    reports = []
    for n, target in enumerate(selected):
        report = fuzz_target(target, max(1, each + (n < extra)), seed)
        reports.append(report)
        print(
            f"{report.target:<44} {report.inputs:>9,} inputs {report.rate:>10,.0f}/s  "
            f"rejected {report.rejected:>8,}  slowest {report.slowest * 1000:7.1f} ms "
            f"(again {report.slowest_again * 1000:.1f})  crashes {len(report.crashes)}",
            flush=True,
        )
        if report.slowest_again > SLOW_SECONDS:
            print(f"  SLOW {report.slowest_again:.2f} s on {report.slowest_data[:120]!r}")
        for crash in report.crashes.values():
            print(f"  CRASH x{crash.count} {crash.error} at {crash.where}: {crash.data[:120]!r}")
            if save is not None:
                save.mkdir(parents=True, exist_ok=True)
                safe = crash.target.replace(":", "_")
                (save / f"{safe}-{abs(hash(crash.where)) % 10**8}.bin").write_bytes(crash.data)
    return reports


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m bench fuzz --inputs N``; exit status 1 when anything crashed
    or an input took over `SLOW_SECONDS` (timed again alone)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench fuzz",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--inputs", type=int, default=1_000_000, help="inputs in all")
    parser.add_argument("--seed", type=int, default=1, help="random seed (runs repeat)")
    parser.add_argument("--targets", default="", help="comma-separated target names")
    parser.add_argument("--save", type=Path, default=None, help="write crash inputs here")
    parser.add_argument("--quick", action="store_true", help="20,000 inputs")
    parser.add_argument("--list", action="store_true", help="list the targets and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, target in targets().items():
            print(f"{name:<44} {len(target.seeds):>3} seeds")
        return
    if args.inputs < 1:
        parser.error(f"--inputs must be at least 1, not {args.inputs}")
    inputs = 20_000 if args.quick else args.inputs
    names = [name for name in args.targets.split(",") if name]
    reports = run(names, inputs, args.seed, args.save)
    total = sum(report.inputs for report in reports)
    crashes = sum(len(report.crashes) for report in reports)
    slow = sum(1 for report in reports if report.slowest_again > SLOW_SECONDS)
    seconds = sum(report.seconds for report in reports)
    print(
        f"total {total:,} inputs in {seconds:.1f} s of fuzzing ({total / seconds:,.0f}/s), "
        f"{crashes} distinct crashes, {slow} targets with an input over {SLOW_SECONDS} s"
    )
    if crashes or slow:
        sys.exit(1)


if __name__ == "__main__":
    main()
