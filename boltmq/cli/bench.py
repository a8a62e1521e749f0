"""`boltmq bench`: a load tool for a BoltMQ (or RocketMQ 4.x) cluster, like RocketMQ's
producer.sh and consumer.sh, built on the Python client.

    boltmq bench produce -n 127.0.0.1:9876 -t BenchTopic -s 1024 -b 32 -w 8 -d 10
    boltmq bench consume -n 127.0.0.1:9876 -t BenchTopic -g bench_cg -d 10 --from-first

A produce run first says where it sends, per broker, and whether latency fault avoidance
(``--latency-fault``) is on::

    producing to 8 queue(s) of BenchTopic on 2 brokers (broker-a: 4, broker-b: 4)

Every second a progress line goes to stderr (msgs/s, MB/s and the p50/p99 latency of that
second); at the end exactly one summary line goes to stdout::

    produce: N msgs in S s, R msgs/s, M MB/s, p50 X ms, p99 Y ms, errors E

Produce latency is a send call's round trip (a batch's round trip counts once per message in
it); consume latency is the time from a message's born timestamp to its arrival here. MB is
10^6 bytes of message bodies. Latencies go into a fixed log-scale histogram, so a long run
costs no memory per message. Ctrl-C (or SIGTERM) stops early and still prints the summary: a
producer first lets the sends in flight finish, so every message it counts is stored; a second
Ctrl-C stops at once.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any, TextIO

import attrs
import trio

from boltmq.cli._argtypes import add_namesrv_argument, non_negative_seconds, positive_int
from client.admin import Admin
from client.instance import MASTER_ID
from client.message import Message
from client.producer import Producer
from client.pull_consumer import PullConsumer
from protocol import names
from protocol.bodies import ConsumeFromWhere, MessageQueue
from protocol.command import RemotingError
from protocol.message import MessageFormatError

log = logging.getLogger("boltmq.bench")

EXIT_FAILED = 1
#: Seconds `--queues` waits for the registries to route the topic on every master.
ROUTE_WAIT = 10.0

# -- latency histogram ------------------------------------------------------------------------

_SUB_BITS = 4  # 16 buckets per power of two: a bucket is at most 1/16 (6.25%) wide
_LINEAR = 2 << _SUB_BITS  # values below 32 us get a bucket each
_MAX_MICROS = (1 << 40) - 1  # about 12 days; longer latencies are clamped
_BUCKETS = ((_MAX_MICROS.bit_length() - _SUB_BITS - 1) << _SUB_BITS) + _LINEAR


def _bucket(micros: int) -> int:
    if micros < _LINEAR:
        return micros if micros > 0 else 0
    if micros > _MAX_MICROS:
        micros = _MAX_MICROS
    shift = micros.bit_length() - _SUB_BITS - 1
    return (shift << _SUB_BITS) + (micros >> shift)


def _bucket_middle(index: int) -> float:
    if index < _LINEAR:
        return float(index)
    shift = (index >> _SUB_BITS) - 1
    low = (index - (shift << _SUB_BITS)) << shift
    return low + (1 << shift) / 2


class LatencyHistogram:
    """Counts of microsecond latencies in log-scale buckets (16 per power of two).

    Recording is one index computation and one list increment; a percentile walks the
    ~600 buckets. Values read back are bucket middles, within about 3% of the true value.
    """

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * _BUCKETS
        self.total = 0

    def record(self, micros: int, count: int = 1) -> None:
        """Add ``count`` samples of ``micros`` microseconds."""
        self.counts[_bucket(micros)] += count
        self.total += count

    def merge(self, other: LatencyHistogram) -> None:
        """Add every sample of ``other``."""
        if other.total:
            self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
            self.total += other.total

    def clear(self) -> None:
        """Forget every sample."""
        if self.total:
            self.counts = [0] * _BUCKETS
            self.total = 0

    def percentile(self, fraction: float) -> float | None:
        """The latency (microseconds) at or below which ``fraction`` of samples lie."""
        if not self.total:
            return None
        rank = max(1, math.ceil(fraction * self.total))
        seen = 0
        for index, count in enumerate(self.counts):
            seen += count
            if seen >= rank:
                return _bucket_middle(index)
        return _bucket_middle(_BUCKETS - 1)  # unreachable: counts sum to total


# -- counting -----------------------------------------------------------------------------


@attrs.define
class Figures:
    """Messages, body bytes, errors and latencies over some span of the run."""

    messages: int = 0
    body_bytes: int = 0
    errors: int = 0
    latency: LatencyHistogram = attrs.field(factory=LatencyHistogram)

    def add(self, other: Figures) -> None:
        """Fold ``other`` into these figures."""
        self.messages += other.messages
        self.body_bytes += other.body_bytes
        self.errors += other.errors
        self.latency.merge(other.latency)

    def line(self, seconds: float) -> str:
        """``N msgs/s, M MB/s, p50 X ms, p99 Y ms, errors E`` over ``seconds``."""
        rate, mb_rate = self.rates(seconds)
        return (
            f"{rate:.0f} msgs/s, {mb_rate:.2f} MB/s, p50 {_ms(self.latency.percentile(0.5))} ms, "
            f"p99 {_ms(self.latency.percentile(0.99))} ms, errors {self.errors}"
        )

    def rates(self, seconds: float) -> tuple[float, float]:
        """Messages and MB (10^6 bytes) per second over ``seconds``."""
        if seconds <= 0:
            return 0.0, 0.0
        return self.messages / seconds, self.body_bytes / seconds / 1e6


def _ms(micros: float | None) -> str:
    return "0.00" if micros is None else f"{micros / 1000:.2f}"


class Meter:
    """The figures of the current second (for progress lines) and of the whole run."""

    def __init__(self, mode: str, out: TextIO) -> None:
        self.mode = mode
        self.out = out
        self.second = Figures()
        self.total = Figures()
        self.started = time.monotonic()
        self._tick_at = self.started
        #: When the last message was counted (consume's --idle-stop measures from it).
        self.last_message_at = self.started

    def start(self) -> None:
        """Start the clock (after set-up, so route lookups are not counted)."""
        self.started = self._tick_at = self.last_message_at = time.monotonic()

    def tick(self) -> None:
        """Print the last interval's figures and fold them into the run's."""
        now = time.monotonic()
        span = now - self._tick_at
        self._tick_at = now
        current = self.second
        self.second = Figures()
        self.total.add(current)
        elapsed = now - self.started
        print(
            f"{self.mode} {elapsed:6.1f}s: {current.line(span)} (total {self.total.messages})",
            file=self.out,
            flush=True,
        )

    def finish(self, *, until_last_message: bool = False) -> float:
        """Fold the last partial interval in; the run's length in seconds (up to the last
        message, when asked, so that waiting for more is not counted)."""
        self.total.add(self.second)
        self.second = Figures()
        end = self.last_message_at if until_last_message else time.monotonic()
        return end - self.started


def summary(mode: str, figures: Figures, seconds: float, as_json: bool) -> str:
    """The one line printed on stdout at the end."""
    rate, mb_rate = figures.rates(seconds)
    p50 = figures.latency.percentile(0.5)
    p99 = figures.latency.percentile(0.99)
    if as_json:
        return json.dumps({
            "mode": mode, "messages": figures.messages, "seconds": round(seconds, 3),
            "msgs_per_s": round(rate, 1), "mb_per_s": round(mb_rate, 3),
            "p50_ms": None if p50 is None else round(p50 / 1000, 3),
            "p99_ms": None if p99 is None else round(p99 / 1000, 3),
            "errors": figures.errors,
        })  # fmt: skip
    return (
        f"{mode}: {figures.messages} msgs in {seconds:.2f} s, {rate:.0f} msgs/s, "
        f"{mb_rate:.2f} MB/s, p50 {_ms(p50)} ms, p99 {_ms(p99)} ms, errors {figures.errors}"
    )


class BenchFailed(Exception):
    """The run could not start (no registry, no route, bad arguments); the message says why."""


# -- the run ------------------------------------------------------------------------------


@attrs.define
class Control:
    """Stop requests: ``stopping`` lets work in flight finish; ``scope`` cancels at once."""

    stopping: trio.Event = attrs.field(factory=trio.Event)
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    #: Consume stopped because nothing arrived for --idle-stop seconds.
    idle_stopped: bool = False

    def stop(self) -> None:
        """Ask for a graceful stop; a second call stops at once."""
        if self.stopping.is_set():
            self.scope.cancel()
        self.stopping.set()


async def run_produce(args: argparse.Namespace, meter: Meter, control: Control) -> None:
    """Send until the duration ends, the message count is reached or a stop is asked."""
    body = os.urandom(args.size)
    batch: int = args.batch
    remaining: list[int] = [args.message_count or -1]
    async with Producer(
        args.group or "bench_producer", namesrv_addr=args.namesrv,
        send_latency_fault_enable=args.latency_fault,
    ) as producer:  # fmt: skip
        # A batch body adds 22 bytes and the properties to every message.
        if args.batch * (args.size + 200) > producer.max_message_size:
            raise BenchFailed(
                f"{args.batch} x {args.size} bytes exceeds a request's "
                f"{producer.max_message_size} bytes: use a smaller --batch or --size"
            )
        admin = Admin(instance=producer.instance)
        if args.queues:
            try:
                masters = await admin.create_topic(
                    args.topic, cluster=args.cluster, queue_nums=args.queues
                )
            except RemotingError as exc:
                raise BenchFailed(f"cannot create topic {args.topic}: {exc}") from exc
            await _wait_for_route(producer, args.topic, len(masters), args.queues)
        try:
            queues = await producer.queues(args.topic)
        except RemotingError as exc:
            raise BenchFailed(f"no route to send {args.topic}: {exc}") from exc
        log.info("%s", start_line(args.topic, queues, latency_fault=args.latency_fault))
        await _say_what_the_route_leaves_out(admin, args.topic, queues, args.cluster)
        sent_to: Counter[str] = Counter()

        def take() -> int:
            # Claim up to one batch of the message-count budget (-1: no budget).
            if remaining[0] < 0:
                return batch
            n = min(batch, remaining[0])
            remaining[0] -= n
            return n

        counter = [0]

        def make(n: int) -> list[Message]:
            messages = []
            for _ in range(n):
                keys = None
                if args.keys:
                    counter[0] += 1
                    keys = f"{args.keys}{counter[0]}"
                messages.append(Message(args.topic, body, tags=args.tags, keys=keys))
            return messages

        shared = make(batch) if not args.keys else []
        reported = [0]

        async def worker() -> None:
            while not control.stopping.is_set():
                n = take()
                if n == 0:
                    return
                messages = shared[:n] if shared else make(n)
                started = time.perf_counter_ns()
                try:
                    if n == 1:
                        result = await producer.send(messages[0])
                    else:
                        result = await producer.send_batch(messages)
                except (RemotingError, MessageFormatError) as exc:
                    meter.second.errors += 1
                    if remaining[0] >= 0:
                        remaining[0] += n  # a failed send does not use up the message count
                    if reported[0] < 5:  # say what goes wrong without flooding the terminal
                        reported[0] += 1
                        log.warning("send failed: %s", exc)
                    await trio.sleep(0.05)  # a broker in trouble: do not spin
                    continue
                figures = meter.second
                figures.messages += n
                figures.body_bytes += n * len(body)
                figures.latency.record((time.perf_counter_ns() - started) // 1000, n)
                sent_to[result.queue.broker_name] += n

        meter.start()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_ticker, meter, args.duration, control)
            async with trio.open_nursery() as workers:
                for _ in range(args.workers):
                    workers.start_soon(worker)
            nursery.cancel_scope.cancel()
        if sent_to:
            log.info("sent per broker: %s", ", ".join(
                f"{name} {count}" for name, count in sorted(sent_to.items())
            ))  # fmt: skip


def start_line(topic: str, queues: list[MessageQueue], *, latency_fault: bool) -> str:
    """The produce run's first line: the queues it sends to, per broker, and whether slow
    brokers are avoided (so a skew between brokers has its reason in sight)."""
    per_broker = Counter(queue.broker_name for queue in queues)
    brokers = ", ".join(f"{name}: {count}" for name, count in sorted(per_broker.items()))
    line = (
        f"producing to {len(queues)} queue(s) of {topic} on {len(per_broker)} "
        f"broker{'' if len(per_broker) == 1 else 's'} ({brokers})"
    )
    if latency_fault:
        line += ", latency fault avoidance: on"
    return line


async def _wait_for_route(producer: Producer, topic: str, brokers: int, queues: int) -> None:
    # A broker registers a topic an admin made a moment after answering: a route read at once
    # could name some of the masters, and the producer would keep to those until its next poll.
    with trio.move_on_after(ROUTE_WAIT):
        while True:
            route = await producer.instance.update_route(topic)
            if route is not None and brokers == sum(
                1 for data in route.queue_datas if data.write_queue_nums == queues
            ):
                return
            await trio.sleep(0.05)
    log.warning(
        "the registries do not route %s's %d queue(s) on all %d master(s) after %g s: "
        "producing to the queues they route", topic, queues, brokers, ROUTE_WAIT,
    )  # fmt: skip


async def _say_what_the_route_leaves_out(
    admin: Admin, topic: str, queues: list[MessageQueue], cluster: str | None
) -> None:
    """Log whether the topic is new, or which masters of its cluster it has no queue on."""
    if admin.instance.routes.get(topic) is None:
        log.info(
            "topic %s is new: each of those brokers creates it from %s at its first send",
            topic, names.AUTO_CREATE_TOPIC_KEY_TOPIC,
        )  # fmt: skip
        return
    try:
        info = await admin.cluster_info()
    except RemotingError:
        return  # only a hint: the run does not need it
    used = {queue.broker_name for queue in queues}
    clusters = [cluster] if cluster else [
        name for name, members in info.cluster_addr_table.items() if used & set(members)
    ]  # fmt: skip
    left_out = sorted(
        name
        for each in clusters
        for name in info.cluster_addr_table.get(each, ())
        if name not in used
        and name in info.broker_addr_table
        and MASTER_ID in info.broker_addr_table[name].broker_addrs
    )
    if left_out:
        log.warning(
            "topic %s has no writable queue on %s of cluster %s, so no message goes there: "
            "--queues N creates the topic with N queues on every master",
            topic, ", ".join(left_out), ", ".join(clusters),
        )  # fmt: skip


async def run_consume(args: argparse.Namespace, meter: Meter, control: Control) -> None:
    """Pull every queue of the topic until the duration ends, the count is reached or a stop."""
    where = (
        ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        if args.from_first
        else ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    )
    group = args.group or f"bench_consumer_{uuid.uuid4().hex[:8]}"
    async with PullConsumer(
        group, namesrv_addr=args.namesrv, consume_from_where=where,
        pull_batch_size=args.pull_batch,
    ) as consumer:  # fmt: skip
        try:
            queues = await consumer.subscribe(args.topic, args.tags or "*")
            for queue in queues:
                committed = await consumer.committed(queue)
                if committed is not None and committed >= 0:
                    await consumer.seek(queue, committed)
                elif args.from_first:
                    await consumer.seek_to_begin(queue)
                else:
                    await consumer.seek_to_end(queue)
        except RemotingError as exc:
            raise BenchFailed(f"cannot subscribe to {args.topic}: {exc}") from exc
        if not queues:
            raise BenchFailed(f"topic {args.topic} has no readable queue")
        log.info("consuming %d queue(s) of %s as group %s", len(queues), args.topic, group)
        limit = args.message_count or 0
        reported = [0]

        async def puller(queue: MessageQueue) -> None:
            suspend = 0.0
            while True:
                try:
                    messages = await consumer.pull(queue, suspend)
                except (RemotingError, MessageFormatError) as exc:
                    meter.second.errors += 1
                    if reported[0] < 5:
                        reported[0] += 1
                        log.warning("pull of %s failed: %s", queue, exc)
                    await trio.sleep(0.1)
                    continue
                if not messages:
                    suspend = 1.0  # caught up: let the broker hold the next pull
                    continue
                suspend = 0.0
                now_ms = time.time_ns() // 1_000_000
                figures = meter.second
                record = figures.latency.record
                size = 0
                for message in messages:
                    size += len(message.body)
                    record((now_ms - message.born_timestamp) * 1000)
                figures.messages += len(messages)
                figures.body_bytes += size
                meter.last_message_at = time.monotonic()
                if limit and meter.total.messages + figures.messages >= limit:
                    control.stopping.set()

        meter.start()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_ticker, meter, args.duration, control)
            for queue in queues:
                nursery.start_soon(puller, queue)
            if args.idle_stop:
                nursery.start_soon(_idle_watch, meter, args.idle_stop, control)
            await control.stopping.wait()
            nursery.cancel_scope.cancel()  # pulls held at the broker are simply dropped


async def _ticker(meter: Meter, duration: float, control: Control) -> None:
    start = trio.current_time()
    deadline = start + duration if duration > 0 else math.inf
    tick = start + 1.0
    while True:
        with trio.move_on_at(min(tick, deadline)):
            await control.stopping.wait()
            return
        if trio.current_time() >= deadline:
            control.stopping.set()
            return
        meter.tick()
        tick += 1.0


async def _idle_watch(meter: Meter, idle: float, control: Control) -> None:
    while time.monotonic() - meter.last_message_at < idle:
        await trio.sleep(0.1)
    control.stopping.set()
    control.idle_stopped = True


async def _on_signals(control: Control) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            control.stop()


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run one `boltmq bench` mode and print its summary; the process exit code."""
    mode: str = args.mode
    meter = Meter(mode, err)
    control = Control()
    runner: Callable[[argparse.Namespace, Meter, Control], Any] = (
        run_produce if mode == "produce" else run_consume
    )

    async def main() -> None:
        with control.scope:
            async with trio.open_nursery() as nursery:
                if threading.current_thread() is threading.main_thread():
                    nursery.start_soon(_on_signals, control)
                await runner(args, meter, control)
                nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    except KeyboardInterrupt:
        print(f"boltmq bench {mode}: interrupted before it started", file=err)
        return 130
    except BaseException as exc:
        error: BaseException = exc
        while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
            error = error.exceptions[0]
        if isinstance(error, BenchFailed | RemotingError | OSError):
            print(f"boltmq bench {mode}: {error}", file=err)
            return EXIT_FAILED
        raise
    seconds = meter.finish(until_last_message=control.idle_stopped)
    print(summary(mode, meter.total, seconds, args.json), file=out, flush=True)
    return 0


# -- command line -------------------------------------------------------------------------


HELP = "load tool: produce or consume as fast as allowed, with msgs/s, MB/s and latency"
EXAMPLE = """examples:
  boltmq bench produce -n 127.0.0.1:9876 -t BenchTopic -s 1024 -b 32 -w 8 -d 10
  boltmq bench produce -n 127.0.0.1:9876 -t BenchTopic --queues 8 --latency-fault -d 30
  boltmq bench consume -n 127.0.0.1:9876 -t BenchTopic -g bench_cg -d 10 --from-first"""


def command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """Set up `boltmq bench`'s arguments (``produce`` and ``consume`` modes)."""
    modes = parser.add_subparsers(dest="mode", metavar="MODE", required=True)
    common = argparse.ArgumentParser(add_help=False)
    add_namesrv_argument(
        common, dest="namesrv", metavar="HOST:PORT[;HOST:PORT]", help="the registries (required)"
    )
    common.add_argument(
        "-t", "--topic", default=names.BENCHMARK_TOPIC, help="the topic (default %(default)s)"
    )
    common.add_argument(
        "-d",
        "--duration",
        type=non_negative_seconds,
        default=10.0,
        metavar="S",
        help="seconds to run; 0 runs until Ctrl-C (default %(default)s)",
    )
    common.add_argument(
        "--message-count",
        type=positive_int,
        default=None,
        metavar="N",
        help="stop after N messages",
    )
    common.add_argument(
        "--tags", default=None, help="produce: the TAGS of every message; consume: a tag expression"
    )
    common.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    produce = modes.add_parser(
        "produce", parents=[common], help="send messages as fast as allowed",
        epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    produce.add_argument(
        "-s", "--size", type=positive_int, default=1024, help="body bytes (default %(default)s)"
    )
    produce.add_argument(
        "-b",
        "--batch",
        type=positive_int,
        default=1,
        help="messages per send; above 1 a SEND_BATCH_MESSAGE (default 1)",
    )
    produce.add_argument(
        "-w",
        "--workers",
        type=positive_int,
        default=16,
        help="sends in flight at once (default %(default)s)",
    )
    produce.add_argument("-g", "--group", default=None, help="producer group")
    produce.add_argument(
        "--keys", default=None, metavar="PREFIX", help="give every message the key PREFIX<n>"
    )
    produce.add_argument(
        "--queues",
        type=positive_int,
        default=None,
        metavar="N",
        help="first create or update the topic with N queues on every master",
    )
    produce.add_argument("--cluster", default=None, help="the cluster --queues creates it in")
    produce.add_argument(
        "--latency-fault",
        action="store_true",
        help="avoid slow or failing brokers for a while (RocketMQ's sendLatencyFaultEnable; "
        "off by default, as there: every writable queue of the topic gets its turn)",
    )
    consume = modes.add_parser(
        "consume", parents=[common], help="pull every queue of a topic",
        epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    consume.add_argument(
        "-g",
        "--group",
        default=None,
        help="consumer group (default: a new one, so no committed offsets)",
    )
    consume.add_argument(
        "--from-first",
        action="store_true",
        help="start queues the group has no offset for at their first message, not at their end",
    )
    consume.add_argument(
        "--pull-batch",
        type=positive_int,
        default=32,
        metavar="N",
        help="messages asked per pull (a broker gives at most 32)",
    )
    consume.add_argument("--idle-stop", type=non_negative_seconds, default=0.0, metavar="S",
                         help="stop once S seconds pass without a message (the run's time then "
                         "ends at the last message): drains a topic")  # fmt: skip

    def run_checked(args: argparse.Namespace) -> int:
        # Not required=True in argparse: the flag's hidden old spellings count as giving it.
        if args.namesrv is None:
            modes.choices[args.mode].error("the following arguments are required: -n/--namesrvAddr")
        return run(args)

    return run_checked
