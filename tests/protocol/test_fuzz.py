"""Fuzz a live server with thousands of random and mutated frames.

Afterwards a well-behaved client must still be served, every fuzzing connection must be gone,
and the server's memory must not have grown without bound.
"""

from __future__ import annotations

import gc
import logging
import random
import struct
import tracemalloc

import trio

from protocol.codes import ResponseCode, SerializeType
from protocol.command import RemotingCommand
from protocol.frame import FrameDecoder, encode
from protocol.server import ServerConfig

from .helpers import ECHO, FAIL, SLOW, start_harness

CONNECTIONS = 400
FRAMES_PER_CONNECTION = 8  # 3,200 fuzz frames in all


def _valid_frame(rng: random.Random) -> bytes:
    command = RemotingCommand(
        rng.choice([ECHO, FAIL, SLOW, 105, 4242, 0, -1]),
        opaque=rng.randrange(1 << 31),
        flag=rng.choice([0, 0, 2, 1]),
        ext_fields={"k": "v" * rng.randrange(5), "delayMillis": "0"},
        body=rng.randbytes(rng.randrange(64)) or None,
        serialize_type=rng.choice(list(SerializeType)),
    )
    return encode(command)


def _mutate(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    choice = rng.randrange(6)
    if choice == 0 and buf:  # flip bytes
        for _ in range(rng.randrange(1, 6)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    elif choice == 1:  # truncate
        del buf[rng.randrange(len(buf)) :]
    elif choice == 2:  # lie about the length
        struct.pack_into(">i", buf, 0, rng.choice([-5, 0, 3, 7, 1 << 20, 1 << 30]))
    elif choice == 3:  # lie about the header length
        struct.pack_into(">I", buf, 4, rng.randrange(1 << 32))
    elif choice == 4:  # pure noise
        return rng.randbytes(rng.randrange(1, 200))
    return bytes(buf)


async def _fuzz_one(port: int, rng: random.Random) -> None:
    try:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
    except OSError:
        return
    async with stream:
        for _ in range(FRAMES_PER_CONNECTION):
            data = _valid_frame(rng)
            if rng.random() < 0.8:
                data = _mutate(rng, data)
            try:
                await stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
        with trio.move_on_after(0.05):
            try:
                await stream.receive_some(65536)
            except trio.BrokenResourceError:
                return


async def _good_call(port: int) -> RemotingCommand:
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(encode(RemotingCommand(ECHO, opaque=5, body=b"still here")))
        decoder = FrameDecoder()
        while True:
            data = await stream.receive_some(65536)
            assert data, "server closed a good connection"
            for command in decoder.feed(data):
                return command


async def test_fuzzed_server_keeps_serving_and_memory_is_bounded(nursery: trio.Nursery) -> None:
    harness = await start_harness(
        nursery, "tcp", ServerConfig(frame_limit=1 << 20, idle_timeout=None)
    )
    rng = random.Random(20261122)
    with trio.fail_after(120):
        assert (await _good_call(harness.port)).body == b"still here"
        # pytest keeps every captured log record, which would count as growth here.
        logging.getLogger("boltmq.remoting").disabled = True
        tracemalloc.start()
        try:
            # A first round warms every cache, the second is measured against it.
            for round_no in range(2):
                for _ in range(CONNECTIONS // 2):
                    async with trio.open_nursery() as fuzzers:
                        for _ in range(2):
                            fuzzers.start_soon(_fuzz_one, harness.port, rng)
                while harness.server.connections:
                    await trio.sleep(0.01)
                # The harness keeps every closed connection for other tests' checks: only
                # what the server itself keeps is measured here.
                harness.closed.clear()
                gc.collect()
                if round_no == 0:
                    baseline, _ = tracemalloc.get_traced_memory()
            grown, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
            logging.getLogger("boltmq.remoting").disabled = False
        reply = await _good_call(harness.port)
    assert reply.code == ResponseCode.SUCCESS and reply.body == b"still here"
    assert harness.server.statistics().accepted_total >= CONNECTIONS + 2
    assert grown - baseline < 2 * 1024 * 1024, f"server memory grew by {grown - baseline} bytes"
