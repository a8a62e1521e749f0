"""The comparison's workloads, run on asyncio in one client process against any adapter:

(a) ``single``: 64 concurrent publishers, each publishing one message and awaiting its ack;
(b) ``batch``: 8 publishers of batches of 32, awaiting all 32 acks;
(c) ``consume``: consume a backlog (default 200,000), acknowledging or committing;
(d) ``e2e``: publish-to-receipt latency at a given rate (half of (a)'s peak).

Each returns a Result; only the timed window is sampled for CPU (client, server, others).
"""

from __future__ import annotations

import asyncio
import statistics
import struct
import time
import uuid
from collections.abc import Callable

import attrs

from bench.peers.base import PAYLOAD, Client
from bench.peers.cpu import Usage, Window

WORKLOADS = ("a", "b", "c", "d")
NAMES = {"a": "single", "b": "batch", "c": "consume", "d": "e2e"}
SINGLE_SENDERS = 64
BATCH_SENDERS = 8
BATCH_SIZE = 32
_STAMP = struct.Struct(">q")


@attrs.define
class Result:
    """One timed run: its rate, latencies (ms) and CPU (cores)."""

    messages: int
    seconds: float
    rate: float
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    client_cpu: float = 0.0
    server_cpu: float = 0.0
    others_cpu: float = 0.0

    @classmethod
    def of(cls, messages: int, usage: Usage, latencies: list[float] | None = None) -> Result:
        """A result from a count, the window's usage and latencies in seconds."""
        p50 = p99 = 0.0
        if latencies:
            ordered = sorted(latencies)
            p50 = statistics.median(ordered) * 1000
            p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
        return cls(
            messages, usage.seconds, messages / usage.seconds, p50, p99,
            usage.client, usage.server, usage.others,
        )  # fmt: skip


def payload(stamp: int = 0) -> bytes:
    """A 1 KiB body whose first 8 bytes carry a perf_counter_ns stamp (0 = not timed)."""
    return _STAMP.pack(stamp) + b"x" * (PAYLOAD - _STAMP.size)


async def _publish_for(
    client: Client, topic: str, seconds: float, senders: int, batch: int = 1,
    rate: float | None = None, latencies: list[float] | None = None, stamped: bool = False,
) -> int:  # fmt: skip
    """Messages acknowledged by ``senders`` tasks publishing for ``seconds`` (``rate`` caps
    the total msgs/s, spread evenly over the senders)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    interval = senders * batch / rate if rate else 0.0
    body = payload()
    done = 0

    async def sender(n: int) -> None:
        nonlocal done
        next_at = loop.time() + interval * n / senders
        while loop.time() < deadline:
            if interval:
                next_at += interval
                delay = next_at - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            message = payload(time.perf_counter_ns()) if stamped else body
            start = time.perf_counter()
            if batch > 1:
                await client.publish_batch(topic, [message] * batch)
            else:
                await client.publish(topic, message)
            if latencies is not None:
                latencies.append(time.perf_counter() - start)
            done += batch

    await asyncio.gather(*(sender(n) for n in range(senders)))
    return done


def new_topic(workload: str) -> str:
    """A topic (stream, queue) name of its own for one run."""
    return f"Compare_{NAMES[workload]}_{uuid.uuid4().hex[:10]}"


async def single(client: Client, pgid: int | None, seconds: float) -> Result:
    """(a): 64 publishers, one message per request."""
    topic = new_topic("a")
    await client.create(topic)
    await _publish_for(client, topic, 0.5, SINGLE_SENDERS)  # warm up: connections, routes
    latencies: list[float] = []
    window = Window(pgid)
    count = await _publish_for(client, topic, seconds, SINGLE_SENDERS, latencies=latencies)
    return Result.of(count, window.end(), latencies)


async def batch(client: Client, pgid: int | None, seconds: float) -> Result:
    """(b): 8 publishers of batches of 32."""
    topic = new_topic("b")
    await client.create(topic)
    await _publish_for(client, topic, 0.5, BATCH_SENDERS, batch=BATCH_SIZE)
    latencies: list[float] = []
    window = Window(pgid)
    count = await _publish_for(
        client, topic, seconds, BATCH_SENDERS, batch=BATCH_SIZE, latencies=latencies
    )
    return Result.of(count, window.end(), latencies)


#: Publishers filling (c)'s backlog: more batches in flight than (b), so peers that confirm a
#: publish only once it is fsynced still fill 200,000 in reasonable time.
FILL_SENDERS = 32


async def fill(client: Client, topic: str, count: int) -> None:
    """Publish ``count`` messages in batches of 32 from 32 publishers (not timed)."""
    body = payload()
    batches = -(-count // BATCH_SIZE)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for n in range(batches):
        queue.put_nowait(min(BATCH_SIZE, count - n * BATCH_SIZE))

    async def sender() -> None:
        while not queue.empty():
            size = queue.get_nowait()
            await client.publish_batch(topic, [body] * size)

    await asyncio.gather(*(sender() for _ in range(FILL_SENDERS)))


async def make_backlog(client: Client, backlog: int) -> str:
    """A new topic holding ``backlog`` messages (not timed); its name."""
    topic = new_topic("c")
    await client.create(topic)
    await fill(client, topic, backlog)
    return topic


async def consume(client: Client, pgid: int | None, backlog: int, topic: str = "") -> Result:
    """(c): time consuming a backlog of ``backlog`` with acks/commits, as a new consumer
    (group) of ``topic``; without a topic, one is filled first."""
    if not topic:
        topic = await make_backlog(client, backlog)
    seen = 0

    def count(_body: bytes) -> None:
        nonlocal seen
        seen += 1

    window = Window(pgid)
    await client.consume(topic, backlog, count)
    return Result.of(seen, window.end())


async def e2e(client: Client, pgid: int | None, seconds: float, rate: float) -> Result:
    """(d): publish at ``rate`` msgs/s from 64 publishers while one consumer receives; the
    latency of each timed message from before its publish to its receipt."""
    topic = new_topic("d")
    await client.create(topic)
    latencies: list[float] = []
    arrived = 0

    def on_message(body: bytes) -> None:
        nonlocal arrived
        arrived += 1
        (stamp,) = _STAMP.unpack_from(body)
        if stamp:
            latencies.append((time.perf_counter_ns() - stamp) / 1e9)

    consumer = asyncio.create_task(client.consume(topic, 1 << 62, on_message))
    try:
        # The consumer is running once a warm-up message has come through.
        await client.publish(topic, payload())
        await _until(lambda: arrived >= 1 or consumer.done(), 60, "the warm-up message")
        if consumer.done():
            consumer.result()  # the consumer failed: raise its error
        window = Window(pgid)
        sent = await _publish_for(client, topic, seconds, SINGLE_SENDERS, rate=rate, stamped=True)
        await _until(lambda: len(latencies) >= sent or consumer.done(), 60, "every message")
        usage = window.end()
    finally:
        consumer.cancel()
        # A client whose blocking read ignores the cancel must not hold the run forever.
        await asyncio.wait([consumer], timeout=10)
    if len(latencies) < sent:
        raise RuntimeError(f"only {len(latencies)} of {sent} messages arrived")
    result = Result.of(sent, usage, latencies)
    result.rate = sent / seconds  # the rate offered; the window also waited for the tail
    return result


async def _until(condition: Callable[[], bool], deadline: float, what: str) -> None:
    end = asyncio.get_running_loop().time() + deadline
    while not condition():
        if asyncio.get_running_loop().time() > end:
            raise RuntimeError(f"waited {deadline:.0f} s for {what}")
        await asyncio.sleep(0.01)
