"""Codec throughput: remoting frames and message records encoded and decoded per second.

Frames carry a typical SEND_MESSAGE_V2 request (one-letter header keys, TAGS/KEYS/UNIQ_KEY
properties, a 1 KiB body) with a JSON and with a ROCKETMQ binary header. Records are commit-log
records of the same message; a pull body is 32 such records, a batch body 32 elements.
Single process, single thread: these are the costs of the pure-Python codecs alone.

    python -m bench codec [--seconds 1] [--body-size 1024] [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable
from functools import partial

from protocol import names
from protocol.codes import RequestCode, SerializeType
from protocol.command import RemotingCommand
from protocol.frame import decode, encode
from protocol.headers import SendMessageRequestHeader, encode_send_header_v2
from protocol.message import (
    BatchElement,
    MessageConst,
    create_uniq_id,
    decode_batch,
    decode_record,
    encode_batch,
    encode_record,
    iter_records,
    properties_to_string,
)

PULL_BATCH = 32
BORN_HOST = ("10.0.0.1", 51234)
STORE_HOST = ("10.0.0.2", 10911)


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls of ``fn`` per second, measured for about ``seconds`` after a short warm-up."""
    for _ in range(10):
        fn()
    count = 0
    rounds = 50  # calls between clock reads, so the clock costs nothing noticeable
    start = now = time.perf_counter()
    deadline = start + seconds
    while now < deadline:
        for _ in range(rounds):
            fn()
        count += rounds
        now = time.perf_counter()
    return count / (now - start)


def _properties() -> str:
    return properties_to_string(
        {
            MessageConst.KEYS: "order-20240101-0001",
            MessageConst.TAGS: "TagA",
            MessageConst.WAIT: "true",
            MessageConst.UNIQ_KEY: create_uniq_id(),
        }
    )


def _send_command(serialize_type: SerializeType, body: bytes, properties: str) -> RemotingCommand:
    """A SEND_MESSAGE_V2 request as the Java producer sends it."""
    header = SendMessageRequestHeader(
        producer_group="ProducerGroupA", topic="BenchTopic",
        default_topic=names.AUTO_CREATE_TOPIC_KEY_TOPIC,
        default_topic_queue_nums=4, queue_id=3, sys_flag=0,
        born_timestamp=int(time.time() * 1000), flag=0, properties=properties,
        reconsume_times=0, unit_mode=False, batch=False,
    )  # fmt: skip
    return RemotingCommand(
        RequestCode.SEND_MESSAGE_V2, opaque=42, ext_fields=encode_send_header_v2(header),
        body=body, serialize_type=serialize_type,
    )  # fmt: skip


def measure(seconds: float, body_size: int) -> list[tuple[str, float, int]]:
    """(operation, operations per second, messages per operation) for every codec path."""
    body = os.urandom(body_size)
    properties = _properties()
    cases: list[tuple[str, Callable[[], object], int]] = []
    for serialize_type in (SerializeType.JSON, SerializeType.ROCKETMQ):
        command = _send_command(serialize_type, body, properties)
        frame = encode(command)
        assert decode(frame).ext_fields == command.ext_fields
        kind = serialize_type.name
        cases.append((f"frame encode, {kind} header", partial(encode, command), 1))
        cases.append((f"frame decode, {kind} header", partial(decode, frame), 1))

    encode_one = partial(
        encode_record, topic="BenchTopic", body=body, queue_id=3, properties=properties,
        born_timestamp=1_700_000_000_000, born_host=BORN_HOST, store_host=STORE_HOST,
        store_timestamp=1_700_000_000_005, queue_offset=7, physical_offset=4096,
    )  # fmt: skip
    record = bytes(encode_one())
    # Each record of the pull body has its own UNIQ_KEY and offsets, as a real one does.
    pull_body = b"".join(
        encode_one(properties=_properties(), queue_offset=i, physical_offset=i * len(record))
        for i in range(PULL_BATCH)
    )
    batch = encode_batch(BatchElement(0, body, _properties()) for _ in range(PULL_BATCH))
    assert len(list(iter_records(pull_body))) == len(decode_batch(batch)) == PULL_BATCH
    cases += [
        ("record encode", encode_one, 1),
        ("record decode", partial(decode_record, record), 1),
        ("record decode, CRC checked", partial(decode_record, record, check_crc=True), 1),
        (f"iter_records, pull body of {PULL_BATCH}", lambda: list(iter_records(pull_body)),
         PULL_BATCH),
        (f"decode_batch of {PULL_BATCH}", partial(decode_batch, batch), PULL_BATCH),
    ]  # fmt: skip
    return [(name, rate(fn, seconds), messages) for name, fn, messages in cases]


def main(argv: list[str] | None = None) -> None:
    """Print the codec rates as a table."""
    parser = argparse.ArgumentParser(prog="bench codec", description=__doc__)
    parser.add_argument("--seconds", type=float, default=1.0, help="per figure (default 1)")
    parser.add_argument("--body-size", type=int, default=1024, help="message body bytes")
    parser.add_argument("--quick", action="store_true", help="a short run (0.2 s per figure)")
    args = parser.parse_args(argv)
    seconds = 0.2 if args.quick else args.seconds
    print(
        f"codec: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
        f"python {platform.python_version()}, {args.body_size} B bodies, {seconds:g}s each"
    )
    print(f"  {'operation':<36} {'ops/s':>11} {'us/op':>9} {'msgs/s':>11}")
    for name, per_second, messages in measure(seconds, args.body_size):
        print(
            f"  {name:<36} {per_second:>11,.0f} {1e6 / per_second:>9.2f} "
            f"{per_second * messages:>11,.0f}"
        )


if __name__ == "__main__":
    main()
