"""`boltmq monitor` at scale: requests and time per refresh at 1,000 topics and 500 groups.

An embedded cluster (registry and broker in this process) gets ``--topics`` topics of 4 queues
with a few messages each and ``--groups`` consumer groups with committed offsets (group i on
topic i). Then the monitor's collector and model refresh ``--refreshes`` times, once with the
default per-refresh budget of per-topic and per-group requests and once with no budget (every
topic's stats and every group's details each refresh: what the budget prevents). Printed per
mode: requests per refresh, median and worst time per refresh (collector plus model), and how
many refreshes one sweep of every topic and group takes.

The collector shares the process and event loop with the broker, so a refresh's time includes
the broker's work of answering it, as on a machine where both run.

    python -m bench.bench_monitor [--topics 1000] [--groups 500] [--refreshes 8] [--quick]
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time

import trio

import boltmq
from client import Admin, Message, Producer
from client.instance import ClientInstance
from monitor.collector import DETAIL_BUDGET, Collector
from monitor.model import Model
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import UpdateConsumerOffsetRequestHeader, encode_header

QUEUES = 4
MESSAGES = 8  # per topic


def main(argv: list[str] | None = None) -> None:
    """Parse the options, run the benchmark, print the figures."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_monitor",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--groups", type=int, default=500)
    parser.add_argument("--refreshes", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="100 topics, 50 groups, 4 refreshes")
    args = parser.parse_args(argv)
    if args.quick:
        args.topics, args.groups, args.refreshes = 100, 50, 4
    if args.groups > args.topics:
        parser.error("--groups must not exceed --topics (group i consumes topic i)")
    trio.run(_run, args.topics, args.groups, args.refreshes)


async def _run(topics: int, groups: int, refreshes: int) -> None:
    print(f"python {platform.python_version()}, {platform.machine()}, "
          f"{topics} topics x {QUEUES} queues, {groups} groups")  # fmt: skip
    async with boltmq.embedded() as cluster:
        started = time.perf_counter()
        await _populate(cluster.registry_address, cluster.broker_address, topics, groups)
        print(f"set-up: {time.perf_counter() - started:.1f} s")
        async with ClientInstance(cluster.registry_address) as instance:
            full = await _measure(instance, "no budget", None, refreshes)
            await _measure(instance, f"budget {DETAIL_BUDGET}", DETAIL_BUDGET, refreshes, full)


async def _measure(
    instance: ClientInstance, label: str, budget: int | None, refreshes: int, full: int = 0
) -> int:
    """Refresh ``refreshes`` times and print the figures; returns the requests per refresh."""
    collector = Collector(instance, detail_budget=budget or 1 << 30, timeout=30.0)
    model = Model()
    times, requests = [], []
    for _ in range(refreshes):
        started = time.perf_counter()
        snapshot = model.update(await collector.sample())
        times.append(time.perf_counter() - started)
        requests.append(snapshot.header.requests)
    median = int(statistics.median(requests))
    # One registry and the 4 broker-wide reads of the one master; the rest are details.
    sweep = (
        f", every topic and group fetched every {math.ceil((full - 5) / budget)} refreshes"
        if budget
        else ""
    )
    print(f"{label}: {median} requests/refresh, "
          f"refresh median {statistics.median(times) * 1000:.0f} ms, "
          f"worst {max(times) * 1000:.0f} ms{sweep}; "
          f"rows: {len(snapshot.topics)} topics, {len(snapshot.groups)} groups")  # fmt: skip
    return median


async def _populate(namesrv: str, broker: str, topics: int, groups: int) -> None:
    names = [f"BenchMon{i:04d}" for i in range(topics)]
    async with Admin(namesrv_addr=namesrv) as admin:
        limiter = trio.CapacityLimiter(32)

        async def create(name: str) -> None:
            async with limiter:
                await admin.create_topic(name, broker_addr=broker, queue_nums=QUEUES)

        async with trio.open_nursery() as nursery:
            for name in names:
                nursery.start_soon(create, name)
        async with Producer("bench_monitor_pg", namesrv_addr=namesrv) as producer:
            with trio.fail_after(120):
                while await producer.instance.fetch_route(names[-1]) is None:
                    await trio.sleep(0.2)

            async def send(name: str) -> None:
                async with limiter:
                    batch = [Message(name, b"x" * 64) for _ in range(MESSAGES)]
                    await producer.send_batch(batch)

            async with trio.open_nursery() as nursery:
                for name in names:
                    nursery.start_soon(send, name)

        async def commit(index: int) -> None:
            async with limiter:
                for queue_id in range(QUEUES):
                    header = UpdateConsumerOffsetRequestHeader(
                        consumer_group=f"bench_monitor_cg{index:04d}", topic=names[index],
                        queue_id=queue_id, commit_offset=queue_id % 2,
                    )  # fmt: skip
                    request = RemotingCommand.request(
                        RequestCode.UPDATE_CONSUMER_OFFSET, encode_header(header)
                    )
                    response = await admin.instance.invoke_broker(broker, request)
                    if response.code != ResponseCode.SUCCESS:
                        raise RuntimeError(f"commit refused: {response.remark}")

        async with trio.open_nursery() as nursery:
            for index in range(groups):
                nursery.start_soon(commit, index)


if __name__ == "__main__":
    main()
