"""Cost of the Prometheus metrics, measured in-process on a broker with known traffic.

Two figures that do not depend on the machine's other load the way a throughput ratio does:

* one scrape, for a broker with ``--topics`` topics, each sent to and pulled by ``--groups``
  groups with committed offsets: the time the collector takes to read the statistics and
  tables (in the event loop: at one scrape a second, that time is the share of the loop
  scraping takes from requests) and the time prometheus_client takes to format the text (in
  a worker thread, sharing the interpreter with the loop); medians of ``--rounds`` scrapes.
* the counting the send path does for the metrics whether or not they are on: the message
  type read from the properties, the typed put counter with its size bucket
  (`BrokerStatsManager.on_put`) and the latency bucket (`RequestStats.on_rpc`), each timed
  alone as a loop of ``--calls`` calls.

* end to end, with ``--slices N``: two brokers in their own processes, one without metrics
  and one with metricsExporterType=PROM, loaded in turn with 1 KiB single sends from 64
  concurrent senders (and batches of 32 from 8) for slices of ``--slice`` seconds, the order
  alternating; while the PROM broker is loaded a scraper GETs its /metrics once a second.
  Short alternating slices keep both brokers under the same outside load (the machine is
  shared), and the ratio of the medians is the scrape's cost on the send path.

    python -m bench.bench_metrics [--topics 50] [--groups 2] [--rounds 30] [--quick]
    python -m bench.bench_metrics --slices 20 --slice 2 [--flush SYNC_FLUSH]
"""

from __future__ import annotations

import argparse
import bisect
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from actors.broker.broker import open_broker
from actors.broker.config import BrokerConfig
from actors.broker.services.request_stats import MESSAGE_SIZE_BUCKETS, RequestStats, message_type_of
from actors.broker.services.stats import BrokerStatsManager
from bench.bench_produce_consume import _produce
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode, names
from protocol.headers import (
    PullMessageRequestHeader,
    SendMessageRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    encode_header,
    encode_send_header_v2,
)
from protocol.message import properties_to_string
from supervisors.metrics_http import Snapshot

ROOT = Path(__file__).resolve().parents[1]
READY = re.compile(r"ready on ([\d.]+:\d+)")
METRICS_PORT = re.compile(r"metrics at :(\d+)/metrics")
PROPERTIES = properties_to_string({"TAGS": "TagA", "KEYS": "k1", "UNIQ_KEY": "0A0B0C0D" * 4})


def _send(topic: str, queue_id: int) -> RemotingCommand:
    header = SendMessageRequestHeader(
        producer_group="PG", topic=topic, default_topic=names.AUTO_CREATE_TOPIC_KEY_TOPIC,
        default_topic_queue_nums=4,
        queue_id=queue_id, sys_flag=0, born_timestamp=1_700_000_000_000, flag=0,
        properties=PROPERTIES,
    )  # fmt: skip
    return RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2, encode_send_header_v2(header), b"x" * 1024
    )


def _pull(topic: str, group: str, queue_id: int) -> RemotingCommand:
    header = PullMessageRequestHeader(
        consumer_group=group, topic=topic, queue_id=queue_id, queue_offset=0, max_msg_nums=32,
        sys_flag=0x4, commit_offset=0, suspend_timeout_millis=0, subscription="*",
        sub_version=0,
    )  # fmt: skip
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header))


def _commit(topic: str, group: str, queue_id: int, offset: int) -> RemotingCommand:
    header = UpdateConsumerOffsetRequestHeader(
        consumer_group=group, topic=topic, queue_id=queue_id, commit_offset=offset
    )
    return RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, encode_header(header))


async def _scrape_cost(args: argparse.Namespace) -> tuple[float, float, int, int]:
    """(median seconds to collect, and to format, bytes of the text, series in it)."""
    with tempfile.TemporaryDirectory() as root:
        config = BrokerConfig(
            listen_port=0, bind_address="127.0.0.1", fast_port_enable=False,
            store_path_root_dir=root, mapped_file_size_commit_log=64 * 1024 * 1024,
        )  # fmt: skip
        async with open_broker(config) as broker, RemotingClient() as client:
            address = broker.address
            for t in range(args.topics):
                topic = f"BenchMetrics{t}"
                for queue_id in range(4):
                    for _ in range(3):
                        answer = await client.invoke(address, _send(topic, queue_id))
                        assert answer.code == ResponseCode.SUCCESS, answer.remark
                    for g in range(args.groups):
                        group = f"BenchGroup{g}"
                        answer = await client.invoke(address, _pull(topic, group, queue_id))
                        assert answer.code == ResponseCode.SUCCESS, answer.remark
                        await client.invoke(address, _commit(topic, group, queue_id, 1))
            broker.stats.sample()
            collector = broker.metrics_collector
            text = Snapshot.take(collector).text()
            collects, formats = [], []
            for _ in range(args.rounds):
                start = time.perf_counter()
                snapshot = Snapshot.take(collector)
                collected = time.perf_counter()
                snapshot.text()
                collects.append(collected - start)
                formats.append(time.perf_counter() - collected)
                await trio.sleep(0)
    series = sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
    return statistics.median(collects), statistics.median(formats), len(text), series


def _counting_cost(calls: int) -> tuple[float, float, float]:
    """Seconds per send of each piece the metrics add to the send path: the message type, the
    typed counter with its size bucket, the latency bucket (with its two clock reads)."""
    topic = "BenchMetrics"
    start = time.perf_counter()
    for _ in range(calls):
        message_type_of(PROPERTIES)
    message_type = (time.perf_counter() - start) / calls
    stats = BrokerStatsManager("C")
    stats.on_put(topic, 1, 1200)
    counter, bounds = stats.topic_put_typed[topic][0], MESSAGE_SIZE_BUCKETS
    start = time.perf_counter()
    for _ in range(calls):  # the lines on_put runs for the typed counter
        typed = stats.topic_put_typed[topic][0]
        typed[0] += 1
        typed[1] += 1200
        typed[2 + bisect.bisect_left(bounds, 1200 // max(1, 1))] += 1
    typed_counter = (time.perf_counter() - start) / calls
    assert counter[0] == calls + 1
    requests = RequestStats()
    start = time.perf_counter()
    for _ in range(calls):
        requests.on_rpc(310, 0, time.perf_counter())
    latency = (time.perf_counter() - start) / calls
    return message_type, typed_counter, latency


async def _start_broker(
    flush: str, store: Path, metrics: bool
) -> tuple[trio.Process, str, int | None]:
    command = [
        sys.executable, "-m", "boltmq.cli", "broker",
        "--listenPort", "0", "--bindAddress", "127.0.0.1", "--fastPortEnable", "false",
        "--storePathRootDir", str(store), "--flushDiskType", flush,
        "--mapedFileSizeCommitLog", str(256 * 1024 * 1024),
    ]  # fmt: skip
    if metrics:
        command += [
            "--metricsExporterType", "PROM", "--metricsPromExporterPort", "0",
            "--metricsPromExporterHost", "127.0.0.1",
        ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await trio.lowlevel.open_process(
        command, cwd=ROOT, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL
    )
    assert proc.stderr is not None
    text = ""
    with trio.fail_after(30):
        while not (ready := READY.search(text)):
            chunk = await proc.stderr.receive_some(4096)
            if not chunk:
                raise RuntimeError(f"the broker process ended before it was ready: {text}")
            text += chunk.decode(errors="replace")
    port = METRICS_PORT.search(text)
    if metrics and port is None:
        raise RuntimeError("the PROM broker did not name its metrics port")
    return proc, ready.group(1), int(port.group(1)) if port else None


async def _scrape_every_second(port: int, sizes: list[int]) -> None:
    """GET /metrics at once and then once a second until cancelled."""
    next_at = trio.current_time()
    while True:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n")
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
        if not data.startswith(b"HTTP/1.1 200 "):
            raise RuntimeError(f"scrape failed: {data[:80]!r}")
        sizes.append(len(data))
        next_at += 1.0
        await trio.sleep_until(next_at)


async def _slice(
    client: RemotingClient, address: str, port: int | None, seconds: float, batch: int
) -> tuple[float, int]:
    """(msgs/s, scrapes) of one slice; scraped once a second when ``port`` is given."""
    sizes: list[int] = []
    async with trio.open_nursery() as nursery:
        if port is not None:
            nursery.start_soon(_scrape_every_second, port, sizes)
        topic = "BenchBatch" if batch > 1 else "BenchSingle"
        senders = 8 if batch > 1 else 64
        sent, _ = await _produce(client, address, topic, seconds, senders, batch=batch)
        nursery.cancel_scope.cancel()
    return sent / seconds, len(sizes)


async def _compare(args: argparse.Namespace) -> None:
    what = "PROM, not scraped" if args.no_scrape else "PROM scraped once a second"
    print(f"metrics off against {what}: {args.flush}, {args.slices} slices "
          f"of {args.slice:g} s per figure and broker, order alternating")  # fmt: skip
    stores = [Path(tempfile.mkdtemp(prefix="boltmq-bench-")) for _ in range(2)]
    procs: list[trio.Process] = []
    try:
        off_proc, off_address, _ = await _start_broker(args.flush, stores[0], False)
        procs.append(off_proc)
        on_proc, on_address, port = await _start_broker(args.flush, stores[1], True)
        procs.append(on_proc)
        async with RemotingClient() as client:
            for address in (off_address, on_address):  # create the topics, warm up
                await _produce(client, address, "BenchSingle", 0.5, 8)
                await _produce(client, address, "BenchBatch", 0.5, 2, batch=32)
            for batch, name in ((1, "single sends, 64 senders"), (32, "batches of 32, 8 senders")):
                figures: dict[str, list[float]] = {"off": [], "scraped": []}
                scrapes = 0
                for n in range(args.slices):
                    scraped_port = None if args.no_scrape else port
                    order = [("off", off_address, None), ("scraped", on_address, scraped_port)]
                    for label, address, metrics in order if n % 2 == 0 else order[::-1]:
                        rate, count = await _slice(client, address, metrics, args.slice, batch)
                        figures[label].append(rate)
                        scrapes += count
                off = statistics.median(figures["off"])
                scraped = statistics.median(figures["scraped"])
                pairs = [b / a for a, b in zip(figures["off"], figures["scraped"], strict=True)]
                quartiles = ", ".join(f"{q:.2f}" for q in statistics.quantiles(pairs, n=4))
                print(f"  {name}: ratios of slice pairs, quartiles {quartiles}")
                print(f"  {name}: off {off:>9,.0f} msgs/s, scraped {scraped:>9,.0f} msgs/s "
                      f"({scrapes} scrapes), ratio {scraped / off:.3f}", flush=True)  # fmt: skip
    finally:
        for proc in procs:
            proc.terminate()
            with trio.move_on_after(20):
                await proc.wait()
        for store in stores:
            shutil.rmtree(store, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m bench.bench_metrics``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_metrics",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--topics", type=int, default=50, help="topics with traffic (50)")
    parser.add_argument("--groups", type=int, default=2, help="groups per topic (2)")
    parser.add_argument("--rounds", type=int, default=30, help="renders timed (30)")
    parser.add_argument("--calls", type=int, default=200_000, help="counting calls timed")
    parser.add_argument(
        "--slices", type=int, default=0,
        help="compare end to end: slices per broker and figure (0 = skip; try 20)",
    )  # fmt: skip
    parser.add_argument("--slice", type=float, default=2.0, help="seconds per slice (2)")
    parser.add_argument(
        "--no-scrape", action="store_true",
        help="with --slices: leave the PROM broker unscraped (what turning metrics on costs)",
    )  # fmt: skip
    parser.add_argument(
        "--flush", choices=["ASYNC_FLUSH", "SYNC_FLUSH"], default="ASYNC_FLUSH",
        help="flushDiskType of both brokers (ASYNC_FLUSH)",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="a short run")
    args = parser.parse_args(argv)
    if args.quick:
        args.topics, args.rounds, args.calls = 5, 5, 20_000
        args.slices, args.slice = min(args.slices, 2), min(args.slice, 1.0)
    if args.slices:
        trio.run(_compare, args)
        return
    collect, format_text, size, series = trio.run(_scrape_cost, args)
    message_type, typed_counter, latency = _counting_cost(args.calls)
    print(f"python {platform.python_version()}, {platform.machine()}; {args.topics} topics x "
          f"{args.groups} groups, 4 queues each")  # fmt: skip
    print(f"one scrape, {series:,} series ({size:,} bytes): collect {collect * 1e3:.2f} ms in "
          f"the event loop ({collect * 100:.2f}% of it at 1 scrape/s), format "
          f"{format_text * 1e3:.2f} ms in a worker thread")  # fmt: skip
    total = message_type + typed_counter + latency
    print(f"counting on the send path for the metrics: {total * 1e9:.0f} ns per send (message "
          f"type {message_type * 1e9:.0f}, typed counter {typed_counter * 1e9:.0f}, latency "
          f"bucket {latency * 1e9:.0f})")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
