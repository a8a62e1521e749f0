"""Cost of the message statistics on the send path, measured in-process.

A broker (no registry, store in a temporary directory) serves SEND_MESSAGE_V2 requests handed
straight to its send handler, the way the connection's reader calls it, in bursts of
``--burst`` sends; a burst ends when the store writer's callbacks have queued every answer.
Rounds alternate between the real statistics collector and one whose ``on_put`` does nothing,
so both run on the same broker, store and warm caches; the figures are the medians. The hook's
own statement (``if result.msg_num: stats.on_put(...)``) is also timed alone.

    python -m bench.bench_stats [--rounds 40] [--burst 1000] [--quick]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from typing import cast

import trio

from actors.broker.broker import open_broker
from actors.broker.config import BrokerConfig
from actors.broker.services.stats import BrokerStatsManager
from protocol import names
from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.connection import Connection, SyncHandler
from protocol.headers import SendMessageRequestHeader, encode_send_header_v2
from protocol.message import MessageConst, properties_to_string
from storage import PutMessageResult, PutMessageStatus

TOPIC = "BenchStats"


class _Sink:
    """Stands in for the producer's connection: counts the answers queued for it."""

    peer = "127.0.0.1:40000"
    closed = False

    def __init__(self) -> None:
        self.sent = 0
        self.target = 0
        self.done = trio.Event()

    def send(self, command: RemotingCommand) -> None:
        self.sent += 1
        if self.sent >= self.target:
            self.done.set()


class _NoStats(BrokerStatsManager):
    """A collector that counts nothing."""

    def on_put(self, topic: str, nums: int, size: int, message_type: int = 0) -> None:
        """Do nothing."""


def _request(body_size: int) -> RemotingCommand:
    header = SendMessageRequestHeader(
        producer_group="PG",
        topic=TOPIC,
        default_topic=names.AUTO_CREATE_TOPIC_KEY_TOPIC,
        default_topic_queue_nums=8,
        queue_id=-1,
        sys_flag=0,
        born_timestamp=1_700_000_000_000,
        flag=0,
        properties=properties_to_string({MessageConst.TAGS: "TagA"}),
    )
    ext = encode_send_header_v2(header)
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, b"x" * body_size)


async def _burst(handler: SyncHandler, sink: _Sink, request: RemotingCommand, count: int) -> float:
    """Seconds per send for ``count`` sends, until every answer is queued."""
    sink.sent = 0
    sink.target = count
    sink.done = trio.Event()
    connection = cast(Connection, sink)
    start = time.perf_counter()
    for _ in range(count):
        handler(connection, request)
    await sink.done.wait()
    return (time.perf_counter() - start) / count


def _hook_cost(rounds: int = 200_000) -> float:
    """Seconds for the hook's statement alone, with the real collector."""
    stats = BrokerStatsManager("C")
    result = PutMessageResult(PutMessageStatus.PUT_OK, wrote_bytes=1200, msg_num=1)
    topic = TOPIC
    start = time.perf_counter()
    for _ in range(rounds):
        if result.msg_num:
            stats.on_put(topic, result.msg_num, result.wrote_bytes)
    return (time.perf_counter() - start) / rounds


async def _run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as root:
        config = BrokerConfig(
            listen_port=0,
            fast_port_enable=False,
            store_path_root_dir=root,
            mapped_file_size_commit_log=256 * 1024 * 1024,
        )
        async with open_broker(config) as broker:
            entry = broker.dispatcher.lookup(RequestCode.SEND_MESSAGE_V2)
            assert entry is not None and not entry[0], "the send handler is a plain function"
            handler = cast(SyncHandler, entry[1])
            sink = _Sink()
            request = _request(args.body_size)
            real, off = broker.stats, _NoStats(config.broker_cluster_name)
            await _burst(handler, sink, request, args.burst)  # warm-up
            with_stats: list[float] = []
            without: list[float] = []
            for round_number in range(args.rounds):
                order = [(real, with_stats), (off, without)]
                if round_number % 2:
                    order.reverse()
                for collector, figures in order:
                    broker.stats = collector
                    figures.append(await _burst(handler, sink, request, args.burst))
            broker.stats = real
            counted = real.topic_put[TOPIC][0]
    on = statistics.median(with_stats)
    base = statistics.median(without)
    hook = _hook_cost()
    print(f"python {platform.python_version()}, {platform.machine()}; "
          f"{args.rounds} rounds of {args.burst} sends, {args.body_size} B bodies")  # fmt: skip
    print(f"send path without statistics: {base * 1e6:8.2f} us/send  ({1 / base:,.0f} sends/s)")
    print(f"send path with statistics:    {on * 1e6:8.2f} us/send  ({1 / on:,.0f} sends/s)")
    print(f"ratio with/without: {on / base:.4f} ({(on / base - 1) * 100:+.2f}%)")
    print(f"hook statement alone: {hook * 1e9:.0f} ns = {hook / base * 100:.2f}% of a send")
    print(f"sends counted by the collector: {counted:,}")


def main(argv: list[str] | None = None) -> None:
    """Measure and print the cost of statistics on the send path."""
    parser = argparse.ArgumentParser(prog="python -m bench.bench_stats", description=__doc__)
    parser.add_argument("--rounds", type=int, default=40, help="rounds per mode")
    parser.add_argument("--burst", type=int, default=1000, help="sends per round (<= 8192)")
    parser.add_argument("--body-size", type=int, default=1024)
    parser.add_argument("--quick", action="store_true", help="a short run")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.burst = 4, 500
    trio.run(_run, args)


if __name__ == "__main__":
    main(sys.argv[1:])
