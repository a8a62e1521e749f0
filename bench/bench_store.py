"""Message store append and read throughput beside the raw file-write ceiling.

For 128 B, 1 KiB and 16 KiB bodies, under ASYNC_FLUSH and SYNC_FLUSH, with 1, 16 and 256
trio tasks calling ``put_message`` concurrently (each message has a TAGS and a UNIQ_KEY, so
the consume queue and the index are written too). Beside each figure, the raw rate of
writing records of the same size to a plain file with the same flush policy: one ``os.write``
per record for ASYNC; for SYNC one ``os.write`` of as many records as the store's average
group commit held (column "group") and one ``fdatasync``. Column "cpu us" is the trio
thread's CPU time per stored message (steadier than msgs/s when other processes share the
machine). Then reads by queue offset (32 per get).

    python -m bench store [--seconds 1] [--quick] [--dir /path/on/the/disk/to/test]
        [--sizes 1024 ...] [--writers 1 16 256] [--flush ASYNC_FLUSH SYNC_FLUSH] [--no-read]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

import trio

from storage import (
    FlushDiskType,
    GetMessageStatus,
    MessageExtBrokerInner,
    MessageStoreConfig,
    open_message_store,
)

SIZES = (128, 1024, 16 * 1024)
WRITERS = (1, 16, 256)
RECORD_OVERHEAD = 91 + len("BenchTopic") + len("TAGS\x01TagA\x02UNIQ_KEY\x01") + 32 + 1


async def _append(
    root: Path, flush: FlushDiskType, size: int, writers: int, seconds: float
) -> tuple[float, float, float, float]:
    """(msgs/s, MB/s, average messages per group commit, trio-thread CPU microseconds per
    message) of put_message for ``seconds``."""
    config = MessageStoreConfig(store_path_root_dir=root, flush_disk_type=flush)
    body = b"x" * size
    count = 0
    async with open_message_store(config) as store:
        deadline = trio.current_time() + seconds
        start = time.perf_counter()
        cpu_start = time.thread_time()

        async def writer(w: int) -> None:
            nonlocal count
            n = 0
            while trio.current_time() < deadline:
                msg = MessageExtBrokerInner(
                    topic="BenchTopic",
                    body=body,
                    queue_id=w % 8,
                    properties={"TAGS": "TagA", "UNIQ_KEY": f"{w:016X}{n:016X}"},
                )
                await store.put_message(msg)
                n += 1
                count += 1

        async with trio.open_nursery() as nursery:
            for w in range(writers):
                nursery.start_soon(writer, w)
        elapsed = time.perf_counter() - start
        cpu = time.thread_time() - cpu_start
        written = store.get_max_phy_offset()
        stats = store.statistics()
    return (
        count / elapsed,
        written / elapsed / 1e6,
        stats.put_messages / max(1, stats.write_batches),
        cpu / max(1, count) * 1e6,
    )


def _raw(root: Path, flush: FlushDiskType, size: int, group: int, seconds: float) -> float:
    """Records/s of writing records of the same size straight to a file: one write per
    record (ASYNC), or one write of ``group`` records and one fdatasync (SYNC)."""
    record = b"x" * (size + RECORD_OVERHEAD)
    per_write = group if flush is FlushDiskType.SYNC_FLUSH else 1
    chunk = record * per_write
    path = root / "raw"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sync = getattr(os, "fdatasync", os.fsync)
    count = 0
    try:
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            for _ in range(64 if flush is FlushDiskType.ASYNC_FLUSH else 1):
                os.write(fd, chunk)
                count += per_write
            if flush is FlushDiskType.SYNC_FLUSH:
                sync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink()
    return count / elapsed


async def _read(root: Path, size: int, messages: int) -> float:
    """Messages/s read back by queue offset, 32 per get, from a store of ``messages``."""
    config = MessageStoreConfig(store_path_root_dir=root)
    body = b"r" * size
    async with open_message_store(config) as store:
        for _ in range(messages):
            await store.put_message(
                MessageExtBrokerInner(topic="BenchTopic", body=body, properties={"TAGS": "TagA"})
            )
        start = time.perf_counter()
        read = 0
        offset = 0
        while True:
            got = store.get_message("bench", "BenchTopic", 0, offset, 32)
            if got.status is not GetMessageStatus.FOUND:
                break
            read += got.message_count
            offset = got.next_begin_offset
            got.release()
        elapsed = time.perf_counter() - start
    assert read == messages, (read, messages)
    return read / elapsed


def main(argv: list[str] | None = None) -> None:
    """Print append, raw-write and read rates."""
    parser = argparse.ArgumentParser(prog="bench store")
    parser.add_argument("--seconds", type=float, default=1.0, help="per append measurement")
    parser.add_argument("--quick", action="store_true", help="0.3 s per measurement")
    parser.add_argument("--dir", default=None, help="where the stores go (default: a temp dir)")
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES, help="body sizes")
    parser.add_argument("--writers", type=int, nargs="+", default=WRITERS, help="writer tasks")
    parser.add_argument(
        "--flush",
        nargs="+",
        choices=[f.value for f in FlushDiskType],
        default=[f.value for f in FlushDiskType],
        help="flush disk types",
    )
    parser.add_argument("--no-read", action="store_true", help="skip the read measurements")
    args = parser.parse_args(argv)
    seconds = 0.3 if args.quick else args.seconds
    base = Path(tempfile.mkdtemp(prefix="boltmq-bench-store-", dir=args.dir))
    print(
        f"store appends: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
        f"python {platform.python_version()}, {seconds:g}s each, store in {base}"
    )
    print(
        f"{'flush':<12}{'body':>7}{'writers':>9}{'msgs/s':>12}{'MB/s':>9}{'group':>7}"
        f"{'cpu us':>8}{'raw msgs/s':>13}{'of raw':>8}"
    )
    try:
        run = 0
        for flush in (FlushDiskType(value) for value in args.flush):
            for size in args.sizes:
                for writers in args.writers:
                    run += 1
                    root = base / f"run{run}"
                    rate, mbps, group, cpu = trio.run(_append, root, flush, size, writers, seconds)
                    shutil.rmtree(root, ignore_errors=True)
                    raw = _raw(base, flush, size, max(1, round(group)), min(seconds, 0.5))
                    print(
                        f"{flush.value:<12}{size:>7}{writers:>9}{rate:>12,.0f}{mbps:>9.1f}"
                        f"{group:>7.1f}{cpu:>8.1f}{raw:>13,.0f}{rate / raw:>8.0%}"
                    )
        for size in () if args.no_read else args.sizes:
            root = base / f"read{size}"
            messages = 20_000 if args.quick else 100_000
            rate = trio.run(_read, root, size, messages if size < 16384 else messages // 4)
            shutil.rmtree(root, ignore_errors=True)
            print(f"read by queue offset, {size} B bodies, 32 per get: {rate:,.0f} msgs/s")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
