"""SYNC_FLUSH group commit: put rate and fdatasync rate as the number of concurrent senders grows.

With SYNC_FLUSH a put is answered only once an fdatasync covered it; the store's group commit
lets one fdatasync answer every put appended while the previous one ran. So as senders are
added the put rate should rise while the flush rate stays at (or under) what the disk can do.
For 1, 8, 64 and 256 trio tasks each calling ``put_message`` (1 KiB bodies with TAGS and a
UNIQ_KEY) in a loop: msgs/s, fdatasyncs/s, messages per flush, the trio thread's CPU per
message, and, beside them, the disk's own ceiling (fdatasyncs/s of a bare one-page write).

    python -m bench group-commit [--seconds 3] [--senders 1 8 64 256] [--dir /path/on/the/disk]
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

from storage import FlushDiskType, MessageExtBrokerInner, MessageStoreConfig, open_message_store

SENDERS = (1, 8, 64, 256)
BODY = b"x" * 1024


async def _run(root: Path, senders: int, seconds: float) -> tuple[float, float, float]:
    """(msgs/s, fdatasyncs/s, trio-thread CPU us per message) of ``senders`` putting tasks."""
    config = MessageStoreConfig(store_path_root_dir=root, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    count = 0
    async with open_message_store(config) as store:
        flushes0 = store.statistics().flushes
        deadline = trio.current_time() + seconds
        start, cpu_start = time.perf_counter(), time.thread_time()

        async def sender(s: int) -> None:
            nonlocal count
            n = 0
            while trio.current_time() < deadline:
                properties = {"TAGS": "TagA", "UNIQ_KEY": f"{s:016X}{n:016X}"}
                msg = MessageExtBrokerInner(
                    topic="BenchGroupCommit", body=BODY, queue_id=s % 8, properties=properties
                )
                await store.put_message(msg)
                n += 1
                count += 1

        async with trio.open_nursery() as nursery:
            for s in range(senders):
                nursery.start_soon(sender, s)
        elapsed = time.perf_counter() - start
        cpu = time.thread_time() - cpu_start
        flushes = store.statistics().flushes - flushes0
    return count / elapsed, flushes / elapsed, cpu / max(1, count) * 1e6


def _disk_ceiling(root: Path, seconds: float) -> float:
    """fdatasyncs/s of one 4 KiB write each: the most flushes the disk allows."""
    path = root / "ceiling"
    sync = getattr(os, "fdatasync", os.fsync)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        page = b"x" * 4096
        n = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            os.pwrite(fd, page, (n % 256) * 4096)
            sync(fd)
            n += 1
        return n / (time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m bench group-commit``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench group-commit",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per figure (3)")
    parser.add_argument("--quick", action="store_true", help="a short run (1 s per figure)")
    parser.add_argument(
        "--senders", type=int, nargs="+", default=list(SENDERS), help="sender counts to run"
    )
    parser.add_argument("--dir", type=Path, help="a directory on the disk to measure")
    args = parser.parse_args(argv)
    if any(n < 1 for n in args.senders):
        parser.error("--senders: each count must be at least 1")
    if args.dir is not None and not args.dir.is_dir():
        parser.error(f"--dir {args.dir}: not a directory")
    seconds = 1.0 if args.quick else args.seconds
    base = Path(tempfile.mkdtemp(prefix="boltmq-group-commit-", dir=args.dir))
    try:
        load = os.getloadavg()
        print(
            f"SYNC_FLUSH group commit: {platform.machine()}, {os.cpu_count()} cpus, python "
            f"{platform.python_version()}, 1 KiB bodies, {seconds:g}s per figure, load average "
            f"{load[0]:.2f}, disk ceiling {_disk_ceiling(base, min(seconds, 2.0)):,.0f} "
            "fdatasyncs/s"
        )
        print(f"  {'senders':>7}  {'msgs/s':>9}  {'fsyncs/s':>8}  {'msgs/fsync':>10}  cpu us/msg")
        for n, senders in enumerate(args.senders):
            rate, flushes, cpu = trio.run(_run, base / f"run{n}", senders, seconds)
            print(
                f"  {senders:>7}  {rate:>9,.0f}  {flushes:>8,.0f}  "
                f"{rate / max(flushes, 1e-9):>10.1f}  {cpu:>10.1f}",
                flush=True,
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
