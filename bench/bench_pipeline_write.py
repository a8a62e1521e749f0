"""The Spark sink's write rate and the cost of exactly-once (the broker's dedup index).

One run, one cluster (registry and broker in a process of their own, ASYNC_FLUSH), 1 KiB
bodies:

1. BoltMQ's Python producer from this process: batches of 128 (what one write task sends),
   one sender, then two at once (what local[2]'s two tasks do).
2. ``df.write.format("boltmq")`` on local[2]: the same messages from a DataFrame of two
   partitions, without and with ``exactlyOnce`` (rounds alternate the order).
3. The broker's dedup cost: batches of 32 sent straight over the remoting client, with and
   without a dedup key per message (rounds alternate): msgs/s, and the broker process's CPU
   time per message (from /proc, which a busy machine disturbs less than a rate); and the
   index alone in this process: a lookup, reserve and record per key, and the memory a key
   takes (tracemalloc).

    python -m bench pipeline-write [--quick]
    python -m bench.bench_pipeline_write [--messages 200000] [--seconds 3] [--rounds 2] [--no-spark]

Needs the ``pipeline`` extra (pyspark, pyarrow) and Java 17 for part 2.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import IO

import trio

from actors.broker.services.dedup import DedupIndex, StoredMessage
from client import Message, Producer
from protocol import RemotingClient, ResponseCode
from protocol.bodies import MessageQueue
from protocol.message import BatchElement, MessageConst, encode_batch, properties_to_string

from .bench_produce_consume import _send, _send_fields

BODY = b"x" * 1024
SINK_BATCH = 128  # pipeline.sender.BATCH_MESSAGES
BROKER_READY = re.compile(r"ready on ([\d.]+:\d+)")
REGISTRY_READY = re.compile(r"registry ready: tcp port (\d+)")
ROOT = Path(__file__).resolve().parents[1]
MB = 1024 / 1e6


class Cluster:
    """``boltmq cluster`` (a registry and a broker) in a process of its own."""

    def __init__(self) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="boltmq-bench-write-"))
        self.namesrv = ""
        self.broker = ""
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Cluster:
        command = [
            sys.executable, "-m", "boltmq.cli", "cluster", "--home", str(self.home),
            "--registryPort", "0", "--listenPort", "0", "--bindAddress", "127.0.0.1",
            "--fastPortEnable", "false", "--mapedFileSizeCommitLog", str(256 * 1024 * 1024),
        ]  # fmt: skip
        self._proc = subprocess.Popen(
            command, cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL
        )
        assert self._proc.stderr is not None
        text = ""
        deadline = time.monotonic() + 60
        while not (self.namesrv and self.broker):
            line = self._proc.stderr.readline().decode(errors="replace")
            if not line or time.monotonic() > deadline:
                raise RuntimeError(f"the cluster did not start:\n{text}")
            text += line
            if match := REGISTRY_READY.search(line):
                self.namesrv = f"127.0.0.1:{match.group(1)}"
            if match := BROKER_READY.search(line):
                self.broker = match.group(1)
        # Keep reading its log so that a full pipe never blocks it.
        threading.Thread(target=_drain, args=(self._proc.stderr,), daemon=True).start()
        return self

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the cluster process has used so far (Linux /proc)."""
        assert self._proc is not None
        fields = Path(f"/proc/{self._proc.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def __exit__(self, *exc_info: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(20)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        shutil.rmtree(self.home, ignore_errors=True)


def _drain(stream: IO[bytes]) -> None:
    while stream.read(65536):
        pass


# -- 1. the Python producer --------------------------------------------------------------------


async def producer_rate(namesrv: str, topic: str, messages: int, senders: int) -> float:
    """msgs/s of ``senders`` tasks each sending its share in batches of SINK_BATCH."""
    async with Producer("bench-write-producer", namesrv_addr=namesrv) as producer:
        queues = await producer.queues(topic)
        await producer.send_batch([Message(topic, BODY)], queue=queues[0])  # warm the route
        share = messages // senders

        async def sender(n: int) -> None:
            queue: MessageQueue = queues[n % len(queues)]
            batch = [Message(topic, BODY) for _ in range(SINK_BATCH)]
            for _ in range(share // SINK_BATCH):
                await producer.send_batch(batch, queue=queue)

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for n in range(senders):
                nursery.start_soon(sender, n)
        return (share // SINK_BATCH) * SINK_BATCH * senders / (time.perf_counter() - start)


# -- 2. the Spark sink -------------------------------------------------------------------------


def spark_rates(namesrv: str, messages: int, rounds: int) -> dict[str, list[float]]:
    """msgs/s of a batch write of ``messages`` rows, plain and exactly-once, per round."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import pipeline

    pipeline.use_current_python()
    spark = (
        SparkSession.builder.master("local[2]").appName("boltmq-bench-write")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    pipeline.register(spark)
    rates: dict[str, list[float]] = {"plain": [], "exactly-once": []}
    try:
        df = spark.range(0, messages, numPartitions=2).select(
            F.lit(BODY).alias("body")
        ).cache()  # fmt: skip
        df.count()

        def write(kind: str, n: int) -> None:
            writer = (df.write.format("boltmq").mode("append").option("namesrvAddr", namesrv)
                      .option("topic", "BenchSink"))  # fmt: skip
            if kind == "exactly-once":
                writer = writer.option("exactlyOnce", "true").option("writeId", f"bench-{n}")
            start = time.perf_counter()
            writer.save()
            rates[kind].append(messages / (time.perf_counter() - start))

        # A first small write starts the Python workers and creates the topic.
        spark.range(0, 10, numPartitions=2).select(F.lit(BODY).alias("body")).write.format(
            "boltmq"
        ).mode("append").option("namesrvAddr", namesrv).option("topic", "BenchSink").save()
        for n in range(rounds):
            order = ["plain", "exactly-once"] if n % 2 == 0 else ["exactly-once", "plain"]
            for kind in order:
                write(kind, n)
                print(f"  sink round {n + 1} {kind:>12}: {rates[kind][-1]:>9,.0f} msgs/s",
                      flush=True)  # fmt: skip
    finally:
        spark.stop()
    return rates


# -- 3. the dedup index ------------------------------------------------------------------------


async def broker_rate(broker: str, seconds: float, keyed: bool, run: int) -> float:
    """msgs/s of batches of 32 from 8 senders; ``keyed``: each message with its dedup key."""
    stored = 0
    deadline = trio.current_time() + seconds

    async def sender(client: RemotingClient, n: int) -> None:
        nonlocal stored
        fields = _send_fields("BenchDedup", n % 8, True)
        sequence = 0
        while trio.current_time() < deadline:
            elements = []
            for _ in range(32):
                sequence += 1
                key = f"8d0c7a52-3c1e-4c5e-9a1f-{run:06d}{n:06d}:{sequence}:1:{sequence}"
                props = properties_to_string({MessageConst.DEDUP_KEY: key} if keyed else {})
                elements.append(BatchElement(0, BODY, props))
            answer = await client.invoke(broker, _send(fields, encode_batch(elements), True), 10)
            if answer.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"send failed: {answer.code} {answer.remark}")
            stored += 32

    async with RemotingClient() as client, trio.open_nursery() as nursery:
        for n in range(8):
            nursery.start_soon(sender, client, n)
    return stored / seconds


def index_cost(keys: int) -> tuple[float, float]:
    """(µs per new key: lookup, reserve and record, bytes per key) of the index alone; the
    time without tracemalloc (which slows every allocation), then the memory with it."""
    names = [f"8d0c7a52-3c1e-4c5e-9a1f-0123456789ab:{n // 5000}:{n % 7}:{n}" for n in range(keys)]
    msg_ids = [f"7F00000100002A9F{n:016X}" for n in range(keys)]

    def fill() -> DedupIndex:
        index = DedupIndex(window_ms=3_600_000, max_keys=keys)
        for n, name in enumerate(names):
            index.lookup("BenchDedup", name)
            index.reserve("BenchDedup", name)
            index.record("BenchDedup", name, StoredMessage(msg_ids[n], n % 8, n))
        return index

    start = time.perf_counter()
    fill()
    took = time.perf_counter() - start
    # The index keeps a key string of its own (topic and key) and the msg id string the
    # store made; the latter is made here before tracing starts, so it is added below.
    msg_ids = [f"{msg_id} "[:-1] for msg_id in msg_ids]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    index = fill()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    strings = sum(sys.getsizeof(s) for s in msg_ids)
    assert len(index) == keys
    return took / keys * 1e6, (after - before + strings) / keys


async def dedup_rates(
    cluster: Cluster, seconds: float, rounds: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Broker msgs/s and its CPU µs per message, without and with dedup keys, rounds
    alternating the order."""
    rates: dict[str, list[float]] = {"without keys": [], "with keys": []}
    cpu: dict[str, list[float]] = {"without keys": [], "with keys": []}
    client_cpu: dict[str, list[float]] = {"without keys": [], "with keys": []}
    await broker_rate(cluster.broker, 0.3, False, 99)  # create the topic, warm the connection
    for n in range(rounds):
        order = [False, True] if n % 2 == 0 else [True, False]
        for keyed in order:
            label = "with keys" if keyed else "without keys"
            before, client_before = cluster.cpu_seconds(), time.process_time()
            rate = await broker_rate(cluster.broker, seconds, keyed, n)
            rates[label].append(rate)
            cpu[label].append((cluster.cpu_seconds() - before) / (rate * seconds) * 1e6)
            client_cpu[label].append((time.process_time() - client_before) / (rate * seconds) * 1e6)
            print(f"  broker round {n + 1} {label:>12}: {rate:>9,.0f} msgs/s, CPU per message: "
                  f"broker {cpu[label][-1]:5.1f} us, sender {client_cpu[label][-1]:5.1f} us",
                  flush=True)  # fmt: skip
    for label, values in client_cpu.items():
        print(f"  sender CPU per message, {label} (median): {statistics.median(values):5.1f} us "
              "(the load generator shares the cpus)")  # fmt: skip
    return rates, cpu


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m bench pipeline-write``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench pipeline-write",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--messages", type=int, default=200_000, help="rows per write (200000)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per broker figure")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each comparison (2)")
    parser.add_argument("--quick", action="store_true", help="a short run (20000 rows, 0.5 s)")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark sink (part 2)")
    args = parser.parse_args(argv)
    messages = 20_000 if args.quick else args.messages
    seconds = 0.5 if args.quick else args.seconds
    if messages < SINK_BATCH * 2 or seconds <= 0 or args.rounds < 1:
        parser.error(f"--messages must be >= {SINK_BATCH * 2}, --seconds > 0, --rounds >= 1")
    print(
        f"pipeline write: {platform.machine()}, {os.cpu_count()} cpus, python "
        f"{platform.python_version()}, 1 KiB bodies, {messages:,} messages per write, "
        f"ASYNC_FLUSH",
        flush=True,
    )
    with Cluster() as cluster:
        one = trio.run(producer_rate, cluster.namesrv, "BenchProducer", messages, 1)
        two = trio.run(producer_rate, cluster.namesrv, "BenchProducer", messages, 2)
        print(f"  python producer, batches of {SINK_BATCH}, 1 sender : {one:>9,.0f} msgs/s "
              f"{one * MB:6.1f} MB/s", flush=True)  # fmt: skip
        print(f"  python producer, batches of {SINK_BATCH}, 2 senders: {two:>9,.0f} msgs/s "
              f"{two * MB:6.1f} MB/s", flush=True)  # fmt: skip
        sink: dict[str, list[float]] = {}
        if not args.no_spark:
            sink = spark_rates(cluster.namesrv, messages, args.rounds)
        broker, cpu = trio.run(dedup_rates, cluster, seconds, args.rounds)
    for kind, values in sink.items():
        rate = statistics.median(values)
        print(f"  spark sink local[2], {kind:>12} (median): {rate:>9,.0f} msgs/s "
              f"{rate * MB:6.1f} MB/s")  # fmt: skip
    if sink:
        plain, once = (statistics.median(sink[k]) for k in ("plain", "exactly-once"))
        print(f"  exactly-once sink cost: {(1 / once - 1 / plain) * 1e6:+.1f} us per message "
              f"({once / plain:.2f} of the plain rate)")  # fmt: skip
    without, keyed = (statistics.median(broker[k]) for k in ("without keys", "with keys"))
    cpu_without, cpu_keyed = (statistics.median(cpu[k]) for k in ("without keys", "with keys"))
    print(f"  broker batches of 32, without keys (median): {without:>9,.0f} msgs/s, "
          f"{cpu_without:5.1f} us CPU per message")  # fmt: skip
    print(f"  broker batches of 32, with keys    (median): {keyed:>9,.0f} msgs/s, "
          f"{cpu_keyed:5.1f} us CPU per message: {cpu_keyed - cpu_without:+.1f} us per "
          f"message ({(1 / keyed - 1 / without) * 1e6:+.1f} us by the rates)")  # fmt: skip
    per_key_us, per_key_bytes = index_cost(20_000 if args.quick else 200_000)
    print(f"  dedup index alone: {per_key_us:.2f} us per new key (lookup, reserve, record), "
          f"{per_key_bytes:,.0f} bytes per key (50-character keys)")  # fmt: skip


if __name__ == "__main__":
    main()
