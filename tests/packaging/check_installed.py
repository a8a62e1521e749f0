"""Run by test_install.py inside a fresh venv holding only the built wheel: which codecs run,
and do they decode real client frames, stored records and Java hashes as the pure code does?

Usage: python -P check_installed.py CAPTURES.jsonl EXPECTED_STATUS
Prints where the package and the extension were loaded from; exits 1 on any difference.
"""

from __future__ import annotations

import json
import struct
import sys
from typing import Any

import attrs

import protocol
from protocol import frame
from protocol.command import RemotingCommand
from protocol.message import _record, encode_record
from storage import _hash


def frame_outcome(fn: Any, data: bytes) -> tuple[Any, ...]:
    """A decode's result (or its error) as plain values."""
    try:
        command = fn(memoryview(data), 4, len(data) - 4)
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return "ok", tuple(getattr(command, name) for name in RemotingCommand.__slots__)


def main(captures: str, expected: str) -> int:
    """Compare the running codecs with the pure ones; 0 when all agree and the path is right."""
    status = protocol.codecs_status()
    print(f"package {protocol.__file__}; codecs: {status}")
    if status != expected:
        print(f"expected codecs: {expected}")
        return 1
    frames = 0
    with open(captures) as lines:
        for line in lines:
            capture = json.loads(line)
            header = capture["raw_header"].encode()
            body = (capture["body_as_logged"] or "").encode()
            word = (capture["serialize_type"] << 24) | len(header)
            data = struct.pack(">ii", 4 + len(header) + len(body), word) + header + body
            pure = frame_outcome(frame._decode_payload_py, data)
            assert pure[0] == "ok", (capture["name"], pure)
            assert frame_outcome(frame._decode_payload, data) == pure, capture["name"]
            frames += 1
    records = b"".join(
        bytes(
            encode_record(
                topic=f"Topic{i}", body=bytes(range(i % 256)) * 3, queue_id=i % 4, flag=i,
                properties=f"KEYS\x01k{i}\x02TAGS\x01T\u00e9{i}\x02", sys_flag=0,
                born_timestamp=1_700_000_000_000 + i, born_host=("10.0.0.1", 51234),
                store_host=("127.0.0.1", 10911), store_timestamp=1_700_000_000_500 + i,
                queue_offset=i, physical_offset=i * 300, reconsume_times=i % 3,
            )
        )
        for i in range(64)
    )  # fmt: skip
    compiled = [attrs.astuple(m) for m in _record.decode_records(records)]
    assert compiled == [attrs.astuple(m) for m in _record.decode_records_py(records)]
    texts = ["", "TopicTest", "k\u00e9y-\U0001f600", "a" * 35, "\ud800 lone"]
    assert [_hash.java_hash(t) for t in texts] == [_hash.java_hash_py(t) for t in texts]
    if status == "compiled":
        import protocol._speedups as speedups

        assert frame._decode_payload is speedups.decode_payload
        assert _record.decode_records is speedups.decode_records
        print(f"extension {speedups.__file__}")
    print(f"agree: {frames} client frames, {len(compiled)} records, {len(texts)} hashes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
