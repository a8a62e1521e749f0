"""A lean send load: SEND_MESSAGE_V2 requests kept in flight on one connection.

The HA benchmark measures what replication costs a master, on a machine where the master, its
slave and the load share two cpus. A load generator that spends 14 us of cpu per send (the
remoting client: a task, an event and a header encode per request) takes a third of a cpu at
the master's rate and competes with both brokers; this one spends ~5 us. Each of the ``senders``
senders keeps one request outstanding: an answer sends that sender's next request. The frames
are the ones `RemotingCommand` encodes (same header fields, same JSON); only the opaque and the
born timestamp are filled in per request.
"""

from __future__ import annotations

import struct
import time

import orjson
import trio

from bench.bench_produce_consume import _send_fields
from protocol import RemotingCommand, RequestCode, ResponseCode
from protocol.frame import encode_header
from protocol.transport import parse_address

_PREFIX = struct.Struct(">ii")
_OPAQUE_MARK = 2_000_000_017
_BORN_MARK = "9999999999999"


class SendFrames:
    """SEND_MESSAGE_V2 frames of one topic, one header template per queue."""

    def __init__(self, topic: str, queues: int, body: bytes) -> None:
        self.body = body
        self._templates: list[tuple[bytes, bytes, bytes]] = []
        for queue_id in range(queues):
            fields = _send_fields(topic, queue_id)
            fields["g"] = _BORN_MARK
            command = RemotingCommand(
                RequestCode.SEND_MESSAGE_V2, opaque=_OPAQUE_MARK, ext_fields=fields
            )
            header = encode_header(command)
            before, rest = header.split(str(_OPAQUE_MARK).encode(), 1)
            middle, after = rest.split(_BORN_MARK.encode(), 1)
            self._templates.append((before, middle, after))

    def frame(self, queue_id: int, opaque: int, born: bytes) -> bytes:
        """The whole frame (length prefix, header, body) of one send."""
        before, middle, after = self._templates[queue_id]
        header = b"".join((before, str(opaque).encode(), middle, born, after))
        size = len(header)
        return b"".join((_PREFIX.pack(4 + size + len(self.body), size), header, self.body))


async def produce(
    address: str,
    topic: str,
    seconds: float,
    senders: int,
    queues: int,
    body: bytes,
) -> tuple[int, list[float]]:
    """(messages stored, latencies in s) of ``senders`` closed-loop senders for ``seconds``.

    Sender ``n`` sends to queue ``n % queues``. Raises RuntimeError on any answer but SUCCESS.
    """
    host, port = parse_address(address)
    frames = SendFrames(topic, queues, body)
    outstanding: dict[int, tuple[float, int]] = {}  # opaque -> (sent at, queue id)
    latencies: list[float] = []
    stored = 0
    opaques = iter(range(1, 2**31))
    deadline = time.perf_counter() + seconds
    buffer = bytearray()
    loads = orjson.loads

    def request(queue_id: int, now: float, born: bytes) -> bytes:
        opaque = next(opaques)
        outstanding[opaque] = (now, queue_id)
        return frames.frame(queue_id, opaque, born)

    def born_now() -> bytes:
        return str(int(time.time() * 1000)).encode()

    async with await trio.open_tcp_stream(host, port) as stream:
        now, born = time.perf_counter(), born_now()
        await stream.send_all(b"".join(request(n % queues, now, born) for n in range(senders)))
        while outstanding:
            data = await stream.receive_some(256 * 1024)
            if not data:
                raise RuntimeError(f"{address} closed the connection")
            buffer += data
            now, born = time.perf_counter(), born_now()
            out: list[bytes] = []
            pos = 0
            while len(buffer) - pos >= 8:
                length, word = _PREFIX.unpack_from(buffer, pos)
                if len(buffer) - pos - 4 < length:
                    break
                header = loads(bytes(buffer[pos + 8 : pos + 8 + (word & 0xFFFFFF)]))
                pos += 4 + length
                if header["code"] != ResponseCode.SUCCESS:
                    raise RuntimeError(f"send failed: {header['code']} {header.get('remark')}")
                sent, queue_id = outstanding.pop(header["opaque"])
                latencies.append(now - sent)
                stored += 1
                if now < deadline:
                    out.append(request(queue_id, now, born))
            del buffer[:pos]
            if out:
                await stream.send_all(b"".join(out))
    return stored, latencies
