"""Soak: a master/slave cluster under steady load through a master and a slave restart, with
exact accounting at the end.

A registry, ``broker-a`` as ASYNC_MASTER and its SLAVE (slaveReadEnable) run as node processes
of `boltmq.launch`, with one-second delay levels so retries and delays resolve in seconds.
Producers send all the time: sync, async, batches of four, delayed (level 2), and
transactional (committed at once, rolled back, or left unknown and committed when the broker
checks back). Two push consumers of one group consume; a few first deliveries answer
RECONSUME_LATER. The master restarts once (at 40 % of the run) and the slave once (at 70 %).

At the end, after a drain: every acknowledged message (a send that returned a result, a
transaction committed) must have been consumed at least once; no rolled-back message may be;
each extra delivery is explained, by a retry asked for or by a restart between the first
delivery and this one. Progress is printed every few seconds. Exit status 1 on a loss, a
rolled-back delivery or an unexplained duplicate.

    python -m bench soak [--duration 600] [--rate 40] [--drain 120] [--dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import socket
import sys
import tempfile
import time
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

import boltmq
from boltmq.launcher import RunningCluster
from client import (
    Admin,
    ConsumeConcurrentlyStatus,
    Message,
    Producer,
    PushConsumer,
    TransactionProducer,
)
from client.transaction import COMMIT_MESSAGE, ROLLBACK_MESSAGE, UNKNOW, LocalTransactionState
from protocol.bodies import ConsumeFromWhere
from protocol.message import MessageExt

TOPIC = "SoakTopic"
GROUP = "CG_soak"
QUEUES = 8
#: Every 50th first delivery asks for a retry.
RETRY_EVERY = 50
#: A delivery this long after a restart's end still counts as caused by it (route refresh,
#: rebalance and offset commit periods are 20-30 s).
RESTART_SHADOW = 60.0


@dataclass
class Ledger:
    """What was sent, acknowledged and delivered, and when the restarts were."""

    acked: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    rolled_back: set[str] = field(default_factory=set)
    pending_tx: set[str] = field(default_factory=set)
    deliveries: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    retried: Counter[str] = field(default_factory=Counter)
    restarts: list[tuple[str, float, float]] = field(default_factory=list)
    kinds: Counter[str] = field(default_factory=Counter)

    def listener(self, messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        """The push consumers' listener: record, and ask for a retry now and then."""
        now = time.monotonic()
        status = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        for message in messages:
            key = message.body.decode()
            self.deliveries[key].append(now)
            if message.reconsume_times == 0 and zlib.crc32(key.encode()) % RETRY_EVERY == 0:
                self.retried[key] += 1
                status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        return status


@dataclass
class Verdict:
    """The accounting at the end."""

    acked: int
    consumed: int
    lost: list[str]
    rolled_back_delivered: list[str]
    duplicates: int
    by_retry: int
    by_restart: int
    unexplained: list[str]
    #: Transactions left unknown that the broker never checked back by the end.
    unresolved: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No loss, no rolled-back delivery, every duplicate explained, every transaction
        resolved."""
        return not (self.lost or self.rolled_back_delivered or self.unexplained or self.unresolved)


def account(ledger: Ledger) -> Verdict:
    """Check the ledger: losses, rolled-back deliveries and each duplicate's cause."""
    delivered = ledger.deliveries
    lost = sorted(key for key in ledger.acked if key not in delivered)
    rolled = sorted(key for key in ledger.rolled_back if key in delivered)
    duplicates = by_retry = by_restart = 0
    unexplained: list[str] = []
    for key, times in delivered.items():
        extra = len(times) - 1
        if extra <= 0:
            continue
        duplicates += extra
        retries = min(extra, ledger.retried[key])
        by_retry += retries
        for at in times[1 + retries :]:
            if any(
                times[0] <= end + RESTART_SHADOW and at >= begin
                for _, begin, end in ledger.restarts
            ):
                by_restart += 1
            else:
                unexplained.append(key)
    consumed = sum(1 for key in ledger.acked if key in delivered)
    return Verdict(
        len(ledger.acked),
        consumed,
        lost,
        rolled,
        duplicates,
        by_retry,
        by_restart,
        unexplained,
        sorted(ledger.pending_tx),
    )


# -- the cluster --------------------------------------------------------------------------------


def _free_port_pair() -> int:
    for _ in range(100):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port: int = first.getsockname()[1]
            with socket.socket() as second:
                try:
                    second.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
                return port
    raise RuntimeError("no two adjacent free loopback ports")


def write_spec(root: Path) -> Path:
    """A registry, an ASYNC_MASTER and its slave on free loopback ports, data under ``root``."""
    registry, master, slave = _free_port_pair(), _free_port_pair(), _free_port_pair()
    levels = " ".join(["1s"] * 18)
    path = root / "soak.toml"
    path.write_text(f"""
dataDir = "data"
logDir = "logs"
[defaults]
fastPortEnable = false
mapedFileSizeCommitLog = {16 << 20}
messageDelayLevel = "{levels}"
transactionCheckInterval = 1000
transactionTimeOut = 2000
[[registry]]
listenPort = {registry}
[[broker.broker-a.node]]
brokerId = 0
brokerRole = "ASYNC_MASTER"
listenPort = {master}
haListenPort = {master + 1}
[[broker.broker-a.node]]
brokerId = 1
brokerRole = "SLAVE"
slaveReadEnable = true
listenPort = {slave}
haListenPort = {slave + 1}
""")
    return path


async def restart(cluster: RunningCluster, ledger: Ledger, name: str) -> None:
    """Restart node ``name`` cleanly and wait until it runs again; the window is recorded."""
    begin = time.monotonic()
    print(f"[soak] restarting {name}", flush=True)
    cluster.restart(name)
    with trio.fail_after(120):
        while cluster.states[name].status == "running":
            await trio.sleep(0.05)
        while cluster.states[name].status != "running":
            await trio.sleep(0.1)
    end = time.monotonic()
    ledger.restarts.append((name, begin, end))
    print(f"[soak] {name} back after {end - begin:.1f} s", flush=True)


# -- the producers ----------------------------------------------------------------------------


async def _paced(stop: trio.Event, rate: float) -> Any:
    """An async iterator of ticks at ``rate`` per second until ``stop``."""
    period = 1.0 / rate
    next_at = time.monotonic()
    for n in itertools.count():
        if stop.is_set():
            return
        yield n
        next_at += period
        await trio.sleep(max(0.0, next_at - time.monotonic()))


async def sync_producer(
    producer: Producer,
    ledger: Ledger,
    stop: trio.Event,
    rate: float,
    kind: str = "sync",
    delay: int = 0,
) -> None:
    """Sync sends (delayed ones with ``delay``): acknowledged when ``send`` returns."""
    async for n in _paced(stop, rate):
        key = f"{kind}-{n}"
        ledger.kinds[kind] += 1
        try:
            await producer.send(Message(TOPIC, key.encode(), delay_level=delay))
        except Exception:
            ledger.failed.add(key)
            await trio.sleep(0.2)
        else:
            ledger.acked.add(key)


async def async_producer(producer: Producer, ledger: Ledger, stop: trio.Event, rate: float) -> None:
    """Async sends: acknowledged when the callback reports a result."""

    def done(key: str) -> Any:
        def callback(result: Any, error: BaseException | None) -> None:
            (ledger.failed if error is not None else ledger.acked).add(key)

        return callback

    async for n in _paced(stop, rate):
        key = f"async-{n}"
        ledger.kinds["async"] += 1
        await producer.send_async(Message(TOPIC, key.encode()), done(key))


async def batch_producer(producer: Producer, ledger: Ledger, stop: trio.Event, rate: float) -> None:
    """Batches of four: all acknowledged when the batch send returns."""
    async for n in _paced(stop, rate / 4):
        keys = [f"batch-{n}-{i}" for i in range(4)]
        ledger.kinds["batch"] += 4
        try:
            await producer.send_batch([Message(TOPIC, key.encode()) for key in keys])
        except Exception:
            ledger.failed.update(keys)
            await trio.sleep(0.2)
        else:
            ledger.acked.update(keys)


async def tx_producer(
    producer: TransactionProducer, ledger: Ledger, stop: trio.Event, rate: float
) -> None:
    """Transactions: 80 % committed, 10 % rolled back, 10 % unknown (committed on check)."""
    async for n in _paced(stop, rate):
        key = f"tx-{n}"
        ledger.kinds["tx"] += 1
        state = ROLLBACK_MESSAGE if n % 10 == 3 else UNKNOW if n % 10 == 7 else COMMIT_MESSAGE

        def local(message: Message, arg: Any, state: LocalTransactionState = state) -> Any:
            return state

        try:
            result = await producer.send_message_in_transaction(Message(TOPIC, key.encode()), local)
        except Exception:
            ledger.failed.add(key)
            await trio.sleep(0.2)
            continue
        if state is COMMIT_MESSAGE and result.local_transaction_state is COMMIT_MESSAGE:
            ledger.acked.add(key)
        elif state is ROLLBACK_MESSAGE:
            ledger.rolled_back.add(key)
        else:
            ledger.pending_tx.add(key)  # acknowledged once the broker's check commits it


def check_listener(ledger: Ledger) -> Any:
    """The broker's check-back: an unknown transaction is committed, and then acknowledged."""

    def check(message: MessageExt) -> LocalTransactionState:
        key = message.body.decode()
        if key.startswith("tx-") and int(key[3:]) % 10 == 3:
            return ROLLBACK_MESSAGE
        if key in ledger.pending_tx or key in ledger.failed:
            ledger.pending_tx.discard(key)
            ledger.failed.discard(key)
            ledger.acked.add(key)
        return COMMIT_MESSAGE

    return check


# -- the run ----------------------------------------------------------------------------------


async def soak(root: Path, duration: float, rate: float, drain: float) -> Verdict:
    """Run the soak under ``root`` and return the accounting."""
    ledger = Ledger()
    async with boltmq.launch(write_spec(root)) as cluster:
        namesrv = cluster.namesrv_addr
        async with Admin(namesrv_addr=namesrv) as admin:
            await admin.create_topic(TOPIC, queue_nums=QUEUES)
            with trio.fail_after(30):
                while True:
                    with contextlib.suppress(Exception):
                        await admin.route(TOPIC)
                        break
                    await trio.sleep(0.1)
        consumers = [
            PushConsumer(
                GROUP,
                ledger.listener,
                namesrv_addr=namesrv,
                instance_name=f"soak{n}",
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            )
            for n in range(2)
        ]
        for consumer in consumers:
            consumer.subscribe(TOPIC)
        stop = trio.Event()
        async with contextlib.AsyncExitStack() as stack:
            for consumer in consumers:
                await stack.enter_async_context(consumer)
            producer = await stack.enter_async_context(Producer("PG_soak", namesrv_addr=namesrv))
            transactions = await stack.enter_async_context(
                TransactionProducer(
                    "PG_soak_tx", namesrv_addr=namesrv, check_listener=check_listener(ledger)
                )
            )
            start = time.monotonic()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sync_producer, producer, ledger, stop, rate)
                nursery.start_soon(async_producer, producer, ledger, stop, rate)
                nursery.start_soon(batch_producer, producer, ledger, stop, rate)
                nursery.start_soon(sync_producer, producer, ledger, stop, rate / 4, "delay", 2)
                nursery.start_soon(tx_producer, transactions, ledger, stop, rate / 2)
                nursery.start_soon(_progress, ledger, start, stop)
                await _sleep_until(start + duration * 0.4)
                await restart(cluster, ledger, "broker-a-0")
                await _sleep_until(start + duration * 0.7)
                await restart(cluster, ledger, "broker-a-1")
                await _sleep_until(start + duration)
                stop.set()
            print(
                f"[soak] producers stopped after {time.monotonic() - start:.0f} s; draining",
                flush=True,
            )
            with trio.move_on_after(drain):
                while ledger.pending_tx or any(k not in ledger.deliveries for k in ledger.acked):
                    await trio.sleep(0.5)
            await trio.sleep(2)  # late redeliveries are counted too
    return account(ledger)


async def _sleep_until(at: float) -> None:
    """Sleep until ``time.monotonic()`` reaches ``at`` (trio's own clock is another one)."""
    await trio.sleep(max(0.0, at - time.monotonic()))


async def _progress(ledger: Ledger, start: float, stop: trio.Event) -> None:
    while not stop.is_set():
        await trio.sleep(5)
        consumed = sum(1 for key in ledger.acked if key in ledger.deliveries)
        print(
            f"[soak] {time.monotonic() - start:5.0f} s  sent {sum(ledger.kinds.values()):,}  "
            f"acked {len(ledger.acked):,}  failed {len(ledger.failed):,}  consumed {consumed:,}  "
            f"retries {sum(ledger.retried.values()):,}",
            flush=True,
        )


def report(verdict: Verdict) -> str:
    """The accounting, a few lines a person can act on."""
    lines = [
        f"acknowledged {verdict.acked:,}, consumed {verdict.consumed:,}, lost {len(verdict.lost)}",
        f"duplicates {verdict.duplicates:,}: {verdict.by_retry:,} retries asked for, "
        f"{verdict.by_restart:,} after a restart, {len(verdict.unexplained)} unexplained",
    ]
    if verdict.lost:
        lines.append(f"LOST (first 10): {verdict.lost[:10]}")
    if verdict.rolled_back_delivered:
        lines.append(f"ROLLED BACK BUT DELIVERED: {verdict.rolled_back_delivered[:10]}")
    if verdict.unresolved:
        lines.append(f"UNKNOWN TRANSACTIONS NEVER CHECKED (first 10): {verdict.unresolved[:10]}")
    if verdict.unexplained:
        lines.append(f"UNEXPLAINED DUPLICATES (first 10): {verdict.unexplained[:10]}")
    lines.append("soak: OK" if verdict.ok else "soak: FAILED")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m bench soak --duration 600``; exit status 1 when it failed."""
    parser = argparse.ArgumentParser(
        prog="python -m bench soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of load")
    parser.add_argument("--rate", type=float, default=40.0, help="sends/s per producer")
    parser.add_argument("--drain", type=float, default=120.0, help="seconds to wait at the end")
    parser.add_argument("--dir", type=Path, default=None, help="data dir (default: a temp dir)")
    parser.add_argument("--quick", action="store_true", help="a 30 s run")
    parser.add_argument("--verbose", action="store_true", help="log the clients' warnings")
    args = parser.parse_args(argv)
    duration = 30.0 if args.quick else args.duration
    if duration < 10:
        parser.error(f"--duration must be at least 10 s (two restarts fit in it), not {duration}")
    if args.rate <= 0:
        parser.error(f"--rate must be positive, not {args.rate}")
    # Clients log every failed pull while a broker is down; the accounting says what matters.
    level = logging.WARNING if args.verbose else logging.ERROR
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(message)s")
    with contextlib.ExitStack() as stack:
        root = args.dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="soak")))
        verdict = trio.run(soak, root, duration, args.rate, args.drain)
    print(report(verdict), flush=True)
    if not verdict.ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
