"""Codec throughput: remoting frames and message records encoded and decoded per second.

python -m bench codec [--seconds 1] [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable
from functools import partial

from protocol.codes import RequestCode, SerializeType
from protocol.command import RemotingCommand
from protocol.frame import decode, encode
from protocol.headers import SendMessageRequestHeader, decode_send_header, encode_send_header_v2
from protocol.message import (
    BatchElement,
    decode_batch,
    decode_record,
    encode_batch,
    encode_record,
    iter_records,
)

BODY = b"x" * 1024


def _rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls of ``fn`` per second, measured for about ``seconds``."""
    count = 0
    batch = 100
    start = time.perf_counter()
    deadline = start + seconds
    now = start
    while now < deadline:
        for _ in range(batch):
            fn()
        count += batch
        now = time.perf_counter()
    return count / (now - start)


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m bench codec``."""
    parser = argparse.ArgumentParser(prog="python -m bench codec", description=__doc__)
    parser.add_argument("--seconds", type=float, default=1.0, help="per measurement")
    parser.add_argument("--quick", action="store_true", help="0.2 s per measurement")
    args = parser.parse_args(argv)
    seconds = 0.2 if args.quick else args.seconds

    header = SendMessageRequestHeader(
        producer_group="PG", topic="BenchTopic", default_topic="TBW102",
        default_topic_queue_nums=4, queue_id=3, sys_flag=0, born_timestamp=1_700_000_000_000,
        flag=0, properties="TAGS\x01TagA\x02KEYS\x01k1\x02UNIQ_KEY\x017F0000010001",
    )  # fmt: skip
    ext = encode_send_header_v2(header)
    frames = {}
    for kind in (SerializeType.JSON, SerializeType.ROCKETMQ):
        command = RemotingCommand(
            RequestCode.SEND_MESSAGE_V2, opaque=1, ext_fields=ext, body=BODY, serialize_type=kind
        )
        frames[kind] = encode(command)
    record = bytes(
        encode_record(
            topic="BenchTopic", body=BODY, queue_id=3,
            properties="TAGS\x01TagA\x02KEYS\x01k1\x02UNIQ_KEY\x017F0000010001",
            born_host=("10.0.0.1", 5000), store_host=("10.0.0.2", 10911),
        )
    )  # fmt: skip
    pull_body = record * 32
    batch = encode_batch(BatchElement(0, BODY, "UNIQ_KEY\x01X") for _ in range(32))

    rows: list[tuple[str, float, int]] = []
    for kind, name in ((SerializeType.JSON, "JSON"), (SerializeType.ROCKETMQ, "ROCKETMQ")):
        command = RemotingCommand(
            RequestCode.SEND_MESSAGE_V2, opaque=1, ext_fields=ext, body=BODY, serialize_type=kind
        )
        frame = frames[kind]
        rows.append((f"frame encode, {name} header", _rate(partial(encode, command), seconds), 1))
        rows.append((f"frame decode, {name} header", _rate(partial(decode, frame), seconds), 1))
    rows.append(("send header V2 decode", _rate(lambda: decode_send_header(ext), seconds), 1))
    rows.append(
        (
            "record encode (1 KiB body)",
            _rate(
                lambda: encode_record(
                    topic="BenchTopic", body=BODY, queue_id=3, properties="TAGS\x01TagA",
                    born_host=("10.0.0.1", 5000), store_host=("10.0.0.2", 10911),
                ),
                seconds,
            ),
            1,
        )
    )  # fmt: skip
    rows.append(("record decode", _rate(lambda: decode_record(record), seconds), 1))
    rows.append(
        (
            "pull body of 32 records decoded",
            _rate(lambda: list(iter_records(pull_body)), seconds),
            32,
        )
    )
    rows.append(("batch body of 32 decoded", _rate(lambda: decode_batch(batch), seconds), 32))

    print(f"codec: {platform.machine()}, {os.cpu_count()} cpus, python {platform.python_version()}")
    for name, per_second, messages in rows:
        extra = f"  ({per_second * messages:,.0f} msgs/s)" if messages > 1 else ""
        print(f"  {name:<34} {per_second:>12,.0f} /s{extra}")


if __name__ == "__main__":
    main()
