"""End-to-end produce and consume rates through a broker in its own process, over TCP.

For ASYNC_FLUSH and SYNC_FLUSH: 1 KiB messages sent one per request from 64 concurrent senders
(msgs/s, MB/s, send latency percentiles), sent in batches of 32 from 8 concurrent senders, then
read back with pulls of 32; and the send latency at half the single-send peak rate. The client
is BoltMQ's remoting client in this process (one connection, requests in flight by opaque).
``--store memory`` runs the same on a broker with storeType=memory (once: nothing to flush);
``--store file --store memory`` prints both, one after the other.

    python -m bench broker [--seconds 3] [--quick] [--store file --store memory]
    python -m bench broker --against ../base --rounds 5 --flush ASYNC_FLUSH

``--against DIR`` runs the broker of another checkout (an earlier commit, say) beside this
one's in the same run, alternating which goes first each round, and prints both with the
ratio of their medians: the machine is noisy, so only figures of one run compare.

``--keys`` gives every message a fresh UNIQ_KEY, as every producer's message has, so the
store's index writer runs too (without it the messages carry no key and the index is never
written): use it for a change that touches the index.

    python -m bench broker --against ../base --keys --flush ASYNC_FLUSH
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

import trio

from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode, names
from protocol.headers import (
    PullMessageRequestHeader,
    SendMessageRequestHeader,
    encode_header,
    encode_send_header_v2,
)
from protocol.message import BatchElement, create_uniq_id, encode_batch

READY = re.compile(r"ready on ([\d.]+:\d+)")
BODY = b"x" * 1024
QUEUES = 8
ROOT = Path(__file__).resolve().parents[1]


def _send_fields(topic: str, queue_id: int, batch: bool = False) -> dict[str, str]:
    """A sender's SEND_MESSAGE_V2 header fields; only the born timestamp ("g") changes."""
    header = SendMessageRequestHeader(
        producer_group="BenchPG", topic=topic, default_topic=names.AUTO_CREATE_TOPIC_KEY_TOPIC,
        default_topic_queue_nums=8,
        queue_id=queue_id, sys_flag=0, born_timestamp=0, flag=0,
        properties="TAGS\x01TagA", batch=batch,
    )  # fmt: skip
    return encode_send_header_v2(header)


def _send(
    fields: dict[str, str], body: bytes, batch: bool = False, key: bool = False
) -> RemotingCommand:
    # The header fields are built once per sender, as a client caches what does not change:
    # the load generator shares the machine's cpus with the broker it measures.
    fields = fields.copy()
    fields["g"] = str(int(time.time() * 1000))
    if key:  # a single message's UNIQ_KEY rides in the header's properties
        fields["i"] = f"{fields['i']}\x02UNIQ_KEY\x01{create_uniq_id()}"
    code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
    return RemotingCommand.request(code, fields, body)


def _pull(topic: str, queue_id: int, offset: int, commit: bool = False) -> RemotingCommand:
    # With ``commit``, each pull also commits the offset it starts from (the commit-offset
    # flag), as a push consumer's pulls do.
    header = PullMessageRequestHeader(
        consumer_group="BenchCommitCG" if commit else "BenchCG", topic=topic,
        queue_id=queue_id, queue_offset=offset, max_msg_nums=32,
        sys_flag=0x5 if commit else 0x4, commit_offset=offset if commit else 0,
        suspend_timeout_millis=0, subscription="*", sub_version=0,
    )  # fmt: skip
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header))


def _percentile(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


async def _produce(
    client: RemotingClient, address: str, topic: str, seconds: float, senders: int,
    batch: int = 1, rate: float | None = None, keys: bool = False,
) -> tuple[int, list[float]]:  # fmt: skip
    """(messages stored, latencies in s) for ``seconds`` of sends; ``rate`` caps msgs/s;
    ``keys``: each message with a fresh UNIQ_KEY."""
    body = encode_batch(BatchElement(0, BODY, "") for _ in range(batch)) if batch > 1 else BODY
    stored = 0
    latencies: list[float] = []
    deadline = trio.current_time() + seconds
    interval = senders / rate if rate else 0.0

    async def sender(n: int) -> None:
        nonlocal stored
        fields = _send_fields(topic, n % QUEUES, batch > 1)
        # Spread the senders over one interval, so a rate-limited run has no bursts.
        next_at = trio.current_time() + interval * n / senders
        while trio.current_time() < deadline:
            if interval:
                next_at += interval
                await trio.sleep_until(next_at)
            payload = body
            if keys and batch > 1:  # each element's own UNIQ_KEY, as a producer's batch has
                payload = encode_batch(
                    BatchElement(0, BODY, f"UNIQ_KEY\x01{create_uniq_id()}") for _ in range(batch)
                )
            start = time.perf_counter()
            request = _send(fields, payload, batch > 1, keys and batch == 1)
            answer = await client.invoke(address, request, 10)
            latencies.append(time.perf_counter() - start)
            if answer.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"send failed: {answer.code} {answer.remark}")
            stored += batch

    async with trio.open_nursery() as nursery:
        for n in range(senders):
            nursery.start_soon(sender, n)
    return stored, latencies


async def _consume(
    client: RemotingClient, address: str, topic: str, commit: bool = False
) -> tuple[int, float]:
    """(messages, seconds) to read every queue of ``topic`` with pulls of 32."""
    count = 0
    start = time.perf_counter()

    async def reader(queue_id: int) -> None:
        nonlocal count
        offset = 0
        while True:
            answer = await client.invoke(address, _pull(topic, queue_id, offset, commit), 10)
            if answer.code != ResponseCode.SUCCESS:
                return
            assert answer.ext_fields is not None
            new_offset = int(answer.ext_fields["nextBeginOffset"])
            count += new_offset - offset
            offset = new_offset

    async with trio.open_nursery() as nursery:
        for queue_id in range(QUEUES):
            nursery.start_soon(reader, queue_id)
    return count, time.perf_counter() - start


def _entry_module(root: Path) -> str:
    # Checkouts from before the command line moved into boltmq/cli/ start it from supervisors.
    return "boltmq.cli" if (root / "boltmq" / "cli").is_dir() else "supervisors.cli"


async def _run_mode(
    flush: str, seconds: float, root: Path = ROOT, store_type: str = "file", keys: bool = False
) -> dict[str, float]:
    store = Path(tempfile.mkdtemp(prefix="boltmq-bench-"))
    env = {**os.environ, "PYTHONPATH": str(root)}
    command = [
        sys.executable, "-m", _entry_module(root), "broker",
        "--listenPort", "0", "--bindAddress", "127.0.0.1", "--fastPortEnable", "false",
        "--storePathRootDir", str(store), "--flushDiskType", flush,
        "--mapedFileSizeCommitLog", str(256 * 1024 * 1024),
    ]  # fmt: skip
    if store_type != "file":  # the flag is newer than the trees --against may run
        command += ["--storeType", store_type]
    proc = await trio.lowlevel.open_process(
        command, cwd=root, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL
    )
    assert proc.stderr is not None
    address = ""
    buffer = b""
    with trio.fail_after(30):
        while not address:
            chunk = await proc.stderr.receive_some(4096)
            if not chunk:
                raise RuntimeError("the broker process ended before it was ready")
            buffer += chunk
            if match := READY.search(buffer.decode(errors="replace")):
                address = match.group(1)
    figures: dict[str, float] = {}
    try:
        async with RemotingClient() as client:
            # Create the topic (and warm the connection) before measuring.
            await _produce(client, address, "BenchSingle", 0.3, 8)
            await _produce(client, address, "BenchBatch", 0.3, 2, batch=32)
            sent, latencies = await _produce(client, address, "BenchSingle", seconds, 64, keys=keys)
            figures["single"] = sent / seconds
            figures["single_p50"] = _percentile(latencies, 0.5)
            figures["single_p99"] = _percentile(latencies, 0.99)
            sent, latencies = await _produce(
                client, address, "BenchBatch", seconds, 8, batch=32, keys=keys
            )
            figures["batch"] = sent / seconds
            figures["batch_p50"] = _percentile(latencies, 0.5)
            read, took = await _consume(client, address, "BenchBatch")
            figures["consume"] = read / took
            read, took = await _consume(client, address, "BenchBatch", commit=True)
            figures["consume_commit"] = read / took
            half = figures["single"] / 2
            sent, latencies = await _produce(
                client, address, "BenchSingle", seconds, 64, rate=half, keys=keys
            )
            figures["half_rate"] = sent / seconds
            figures["half_p50"] = _percentile(latencies, 0.5)
            figures["half_p99"] = _percentile(latencies, 0.99)
    finally:
        proc.terminate()
        with trio.move_on_after(20):
            await proc.wait()
        shutil.rmtree(store, ignore_errors=True)
    return figures


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} us"


async def _main(seconds: float, stores: list[str], keys: bool = False) -> None:
    print(
        f"broker produce/consume: {platform.machine()}, {os.cpu_count()} cpus, "
        f"python {platform.python_version()}, 1 KiB bodies{_KEYED if keys else ''}, "
        f"{seconds:g}s per figure"
    )
    # The memory store has nothing to flush: one run, whatever the flush mode.
    runs = [
        (store, flush)
        for store in stores
        for flush in (("ASYNC_FLUSH", "SYNC_FLUSH") if store == "file" else ("ASYNC_FLUSH",))
    ]
    for store, flush in runs:
        f = await _run_mode(flush, seconds, store_type=store, keys=keys)
        mb = 1024 / 1e6
        print(f"  {flush} (file store)" if store == "file" else "  memory store (storeType=memory)")
        print(
            f"    single sends, 64 senders : {f['single']:>9,.0f} msgs/s "
            f"{f['single'] * mb:6.1f} MB/s"
            f"   p50 {_us(f['single_p50'])}  p99 {_us(f['single_p99'])}"
        )
        print(
            f"    batches of 32, 8 senders : {f['batch']:>9,.0f} msgs/s {f['batch'] * mb:6.1f} MB/s"
            f"   p50 {_us(f['batch_p50'])} per batch"
        )
        print(
            f"    pulls of 32, 8 queues    : {f['consume']:>9,.0f} msgs/s "
            f"{f['consume'] * mb:6.1f} MB/s"
        )
        print(
            f"    pulls committing offsets : {f['consume_commit']:>9,.0f} msgs/s "
            f"{f['consume_commit'] * mb:6.1f} MB/s"
        )
        print(f"    single at half the peak  : {f['half_rate']:>9,.0f} msgs/s"
              f"   p50 {_us(f['half_p50'])}  p99 {_us(f['half_p99'])}")  # fmt: skip
    print("  targets (ASYNC_FLUSH): single >= 20,000 msgs/s, batched >= 100,000 msgs/s")


COMPARED = ("single", "batch", "consume", "consume_commit")
_KEYED = " each with a UNIQ_KEY"


async def _compare(
    against: Path, seconds: float, rounds: int, modes: list[str], keys: bool = False
) -> None:
    print(
        f"broker produce/consume, this tree against {against}: {platform.machine()}, "
        f"{os.cpu_count()} cpus, python {platform.python_version()}, 1 KiB bodies"
        f"{_KEYED if keys else ''}, {seconds:g}s per figure, {rounds} rounds, order alternating"
    )
    for flush in modes:
        runs: dict[str, list[dict[str, float]]] = {"this": [], "against": []}
        for n in range(rounds):
            order = [("this", ROOT), ("against", against)]
            for label, root in order if n % 2 == 0 else order[::-1]:
                figures = await _run_mode(flush, seconds, root, keys=keys)
                runs[label].append(figures)
                print(
                    f"  {flush} round {n + 1} {label:>7}: "
                    + ", ".join(f"{name} {figures[name]:,.0f}" for name in COMPARED)
                    + " msgs/s",
                    flush=True,
                )
        print(f"  {flush} medians (msgs/s) and this/against:")
        for name in COMPARED:
            this = statistics.median(f[name] for f in runs["this"])
            base = statistics.median(f[name] for f in runs["against"])
            print(f"    {name:<8} this {this:>9,.0f}  against {base:>9,.0f}  "
                  f"ratio {this / base:.3f}")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m bench broker``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench broker",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per figure")
    parser.add_argument("--quick", action="store_true", help="a short run (0.5 s per figure)")
    parser.add_argument(
        "--against", type=Path, metavar="DIR", help="also run the broker of the checkout DIR"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds with --against (3)")
    parser.add_argument(
        "--store", choices=["file", "memory"], action="append",
        help="the broker's storeType, without --against (repeatable: side by side; default file)",
    )  # fmt: skip
    parser.add_argument(
        "--flush", choices=["ASYNC_FLUSH", "SYNC_FLUSH"], action="append",
        help="flush mode with --against (repeatable; default both)",
    )  # fmt: skip
    parser.add_argument(
        "--keys", action="store_true",
        help="give every message a fresh UNIQ_KEY, so the store's index is written too",
    )  # fmt: skip
    args = parser.parse_args(argv)
    seconds = 0.5 if args.quick else args.seconds
    if args.against is not None:
        modes = args.flush or ["ASYNC_FLUSH", "SYNC_FLUSH"]
        trio.run(_compare, args.against.resolve(), seconds, args.rounds, modes, args.keys)
    else:
        trio.run(_main, seconds, args.store or ["file"], args.keys)


if __name__ == "__main__":
    main()
