"""Spark batch read throughput of the boltmq data source beside the project's own consumer.

A `boltmq cluster` (registry and broker, one process, ASYNC_FLUSH, 256 MiB commit-log files)
is started in a temporary directory; `boltmq bench produce` stores N messages of 1 KiB in a
topic of 8 queues; then, round by round, `boltmq bench consume` pulls them all (the Python
client's pull consumer, from the first offset) and a Spark session on local[2] reads them all
with ``spark.read.format("boltmq")`` (``count`` and the sum of body lengths, so every body is
pulled and handed to Spark). Figures: msgs/s and MB/s (10^6 bytes of bodies) of each.

    python -m bench pipeline-read [--messages 200000] [--rounds 3] [--quick]

The three processes (broker, consumer or Spark's JVM and Python workers) share the machine's
cpus, so compare the figures of one run only; the load average is printed with each round.
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
import time
from pathlib import Path

TOPIC = "PipeReadBench"
BODY_SIZE = 1024
QUEUES = 8
SUMMARY = re.compile(r"consume: (\d+) msgs in ([\d.]+) s, (\d+) msgs/s, ([\d.]+) MB/s")
REGISTRIES = re.compile(r"registries: ([\d.]+:\d+)")


def _boltmq(*args: str) -> list[str]:
    return [sys.executable, "-m", "boltmq.cli", *args]


def start_cluster(home: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A `boltmq cluster` in ``home`` (its log in home/cluster.log); the process and its
    registry address."""
    home.mkdir(parents=True, exist_ok=True)
    log_path = home / "cluster.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            _boltmq("cluster", "--home", str(home), "--registryPort", "0", "--listenPort", "0",
                    "--bindAddress", "127.0.0.1", "--fastPortEnable", "false",
                    "--mapedFileSizeCommitLog", str(256 << 20)),
            stdout=log_file, stderr=subprocess.STDOUT,
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        found = REGISTRIES.search(log_path.read_text(errors="replace"))
        if found:
            return process, found.group(1)
        time.sleep(0.1)
    process.terminate()
    raise RuntimeError(f"the cluster did not say it was ready within 60 s; see {log_path}")


def produce(namesrv: str, messages: int) -> None:
    """``messages`` bodies of 1 KiB into TOPIC, batches of 32 from 8 senders."""
    done = subprocess.run(
        _boltmq("bench", "produce", "-n", namesrv, "-t", TOPIC, "--queues", str(QUEUES),
                "-s", str(BODY_SIZE), "-b", "32", "-w", "8", "--message-count", str(messages),
                "-d", "0"),
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    print(f"  stored: {done.stdout.strip()}", flush=True)


def consume(namesrv: str, messages: int) -> tuple[float, float]:
    """(msgs/s, MB/s) of `boltmq bench consume` reading every message from the first."""
    done = subprocess.run(
        _boltmq("bench", "consume", "-n", namesrv, "-t", TOPIC, "--from-first",
                "--idle-stop", "1", "-d", "600", "--message-count", str(messages)),
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    found = SUMMARY.search(done.stdout)
    if found is None or int(found.group(1)) != messages:
        raise RuntimeError(f"the consumer did not read {messages} messages: {done.stdout}")
    seconds = float(found.group(2))
    return messages / seconds, messages * BODY_SIZE / seconds / 1e6


def spark_read(spark: object, namesrv: str, messages: int) -> tuple[float, float]:
    """(msgs/s, MB/s) of one Spark batch read of the whole topic."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    assert isinstance(spark, SparkSession)
    start = time.perf_counter()
    row = (
        spark.read.format("boltmq").option("namesrvAddr", namesrv).option("topic", TOPIC)
        .load().agg(F.count(F.lit(1)), F.sum(F.length("body"))).first()
    )  # fmt: skip
    seconds = time.perf_counter() - start
    if row is None or row[0] != messages or row[1] != messages * BODY_SIZE:
        raise RuntimeError(f"Spark read {row}, not {messages} messages of {BODY_SIZE} bytes")
    return messages / seconds, messages * BODY_SIZE / seconds / 1e6


def session() -> object:
    """A local[2] session with the boltmq format, as a user's would be."""
    from pyspark.sql import SparkSession

    import pipeline

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    pipeline.use_current_python()
    spark = (SparkSession.builder.master("local[2]").appName("boltmq-read-bench")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    pipeline.register(spark)
    return spark


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(
        prog="python -m bench pipeline-read", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("--messages", type=int, default=200_000, help="messages stored")
    parser.add_argument("--rounds", type=int, default=3, help="reads of each kind")
    parser.add_argument("--quick", action="store_true", help="20,000 messages, 1 round")
    args = parser.parse_args(argv)
    messages, rounds = (20_000, 1) if args.quick else (args.messages, args.rounds)
    print(f"{platform.machine()}, {os.cpu_count()} cpus, Python {platform.python_version()}; "
          f"{messages:,} messages of {BODY_SIZE} bytes in {QUEUES} queues", flush=True)  # fmt: skip
    home = Path(tempfile.mkdtemp(prefix="boltmq-read-bench-"))
    process, namesrv = start_cluster(home)
    try:
        produce(namesrv, messages)
        spark = session()
        spark_read(spark, namesrv, messages)  # warm-up: the JVM's and the workers' start
        found: dict[str, list[tuple[float, float]]] = {"consumer": [], "spark": []}
        for round_number in range(1, rounds + 1):
            for kind in ("consumer", "spark"):
                rate, mb = (consume(namesrv, messages) if kind == "consumer"
                            else spark_read(spark, namesrv, messages))  # fmt: skip
                found[kind].append((rate, mb))
                print(f"  round {round_number} {kind:<8} {rate:>9,.0f} msgs/s {mb:7.1f} MB/s "
                      f"(load {os.getloadavg()[0]:.2f})", flush=True)  # fmt: skip
        for kind, figures in found.items():
            rates = [rate for rate, _ in figures]
            mbs = [mb for _, mb in figures]
            print(f"{kind}: median {statistics.median(rates):,.0f} msgs/s "
                  f"{statistics.median(mbs):.1f} MB/s, best {max(rates):,.0f} msgs/s")
        spark.stop()  # type: ignore[attr-defined]
    finally:
        process.terminate()
        process.wait(30)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
