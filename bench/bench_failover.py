"""Automatic failover: time from a master's SIGKILL to a new master and to the first
acknowledged send, over N kills; and what controller mode costs SYNC_MASTER sends.

A registry, a controller and three controller-mode brokers of one group (SYNC_MASTER flavour,
SYNC_FLUSH) run as processes of their own on loopback. One BoltMQ producer (no retries of its
own, 3 s send timeout) sends one message at a time; the master is killed; the controller is
asked every 20 ms who the master is; the producer's first SEND_OK after the kill ends the
second figure. The killed broker is started again (it returns as a slave) and the next round
waits for it to be back in the SyncStateSet. Heartbeat keys default to the failover tests'
short ones (1 s beats, 5 s timeout, 1 s scan); ``--heartbeat-timeout 10000 --scan-interval
5000`` gives RocketMQ's defaults.

The steady-state part runs the same three brokers twice, each run from a fresh store: classic
(a SYNC_MASTER and two SLAVEs by configuration) and controller mode, and drives each master
with `bench.loadgen` (64 senders, 1 KiB, single sends) for ``--seconds``.

    python -m bench failover [--kills 10] [--seconds 5] [--rounds 1] [--quick]
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from bench.bench_produce_consume import BODY, _percentile
from bench.loadgen import produce
from boltmq import Message, Producer, SendStatus
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.bodies import SyncStateSet
from protocol.headers import (
    CreateTopicRequestHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    decode_header,
    encode_header,
)
from protocol.message import decode_offset_msg_id

ROOT = Path(__file__).resolve().parents[1]
TOPIC = "BenchFailover"
QUEUES = 4
BROKER_NAME = "broker-a"
READY = {"registry": "registry ready", "controller": "controller ready", "broker": "ready on"}
SMALL_STORE: dict[str, Any] = {
    "bindAddress": "127.0.0.1",
    "fastPortEnable": "false",
    "mapedFileSizeCommitLog": 64 << 20,
    "registerNameServerPeriod": 1000,
    "flushDiskType": "SYNC_FLUSH",
}
_ports: set[int] = set()


def _free_port(pair: bool = False) -> int:
    """A free loopback port (and the next one free too with ``pair``), never handed out twice."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port: int = probe.getsockname()[1]
        wanted = {port, port + 1} if pair else {port}
        if wanted & _ports:
            continue
        if pair:
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
        _ports.update(wanted)
        return port


class Node:
    """One ``python -m boltmq.cli <kind> -c <conf>`` process, its output in ``node.log``."""

    def __init__(self, kind: str, directory: Path, settings: dict[str, Any]) -> None:
        self.kind = kind
        self.directory = directory
        self.settings = settings
        self.address = f"127.0.0.1:{settings['listenPort']}"
        self.process: subprocess.Popen[bytes] | None = None
        self.log = directory / "node.log"

    async def start(self, timeout: float = 60.0) -> None:
        """Start the process and wait until it logs that it is ready."""
        self.directory.mkdir(parents=True, exist_ok=True)
        conf = self.directory / f"{self.kind}.conf"
        conf.write_text("".join(f"{k}={v}\n" for k, v in self.settings.items()))
        seen = self.log.stat().st_size if self.log.exists() else 0
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "boltmq.cli", self.kind, "-c", str(conf)],
                cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
            )  # fmt: skip
        with trio.fail_after(timeout):
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"{self.kind} {self.address} exited; see {self.log}")
                with self.log.open("rb") as text:
                    text.seek(seen)
                    if READY[self.kind].encode() in text.read():
                        return
                await trio.sleep(0.05)

    async def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the process (SIGKILL: a crash) and wait for it to end."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(sig)
        with trio.move_on_after(30):
            while process.poll() is None:
                await trio.sleep(0.02)
        if process.poll() is None:
            process.kill()
            process.wait()


class Group:
    """A registry, optionally a controller, and three brokers of group broker-a."""

    def __init__(self, base: Path, controller_mode: bool, keys: dict[str, Any]) -> None:
        self.registry = Node("registry", base / "registry", {"listenPort": _free_port()})
        self.controller: Node | None = None
        common = {**SMALL_STORE, "namesrvAddr": self.registry.address, "brokerName": BROKER_NAME}
        if controller_mode:
            self.controller = Node(
                "controller", base / "controller",
                {"listenPort": _free_port(), "controllerStorePath": base / "controller" / "store",
                 "scanNotActiveBrokerInterval": keys["scanNotActiveBrokerInterval"]},
            )  # fmt: skip
            common.update(
                enableControllerMode="true", controllerAddr=self.controller.address,
                brokerRole="SYNC_MASTER",
                brokerHeartbeatInterval=keys["brokerHeartbeatInterval"],
                controllerHeartBeatTimeoutMills=keys["controllerHeartBeatTimeoutMills"],
                syncBrokerMetadataPeriod=1000, checkSyncStateSetPeriod=1000,
                haMaxTimeSlaveNotCatchup=3000,
            )  # fmt: skip
        self.brokers = []
        for n in range(3):
            port = _free_port(pair=True)
            role = {} if controller_mode else (
                {"brokerId": 0, "brokerRole": "SYNC_MASTER"} if n == 0
                else {"brokerId": n, "brokerRole": "SLAVE"}
            )  # fmt: skip
            self.brokers.append(Node(
                "broker", base / f"broker-{n}",
                {**common, **role, "listenPort": port, "haListenPort": port + 1,
                 "storePathRootDir": base / f"broker-{n}" / "store"},
            ))  # fmt: skip

    async def start(self) -> None:
        await self.registry.start()
        if self.controller is not None:
            await self.controller.start()
        for broker in self.brokers:  # in turn: the first becomes the master of a new group
            await broker.start()

    async def stop(self) -> None:
        for node in [*reversed(self.brokers), self.controller, self.registry]:
            if node is not None:
                await node.kill(signal.SIGTERM)

    def broker_at(self, address: str) -> Node:
        return next(b for b in self.brokers if b.address == address)


async def _replica_info(
    client: RemotingClient, controller: str
) -> tuple[str | None, int, frozenset[int]]:
    """(master address, master epoch, SyncStateSet) as the controller has them."""
    header = GetReplicaInfoRequestHeader(broker_name=BROKER_NAME)
    request = RemotingCommand.request(
        RequestCode.CONTROLLER_GET_REPLICA_INFO, encode_header(header)
    )
    try:
        with trio.fail_after(3):
            answer = await client.invoke(controller, request, 3)
    except Exception:
        return None, 0, frozenset()
    if answer.code != ResponseCode.SUCCESS:
        return None, 0, frozenset()
    fields = decode_header(GetReplicaInfoResponseHeader, answer.ext_fields)
    members = SyncStateSet.from_json(answer.body) if answer.body else SyncStateSet()
    return (
        fields.master_address or None,
        fields.master_epoch or 0,
        frozenset(members.sync_state_set),
    )


async def _wait(condition: Callable[[], bool | Awaitable[bool]], timeout: float, what: str) -> None:
    """Poll ``condition`` (plain or async) every 20 ms; RuntimeError naming ``what`` after
    ``timeout`` s."""
    with trio.move_on_after(timeout):
        while True:
            result = condition()
            if not isinstance(result, bool):
                result = await result
            if result:
                return
            await trio.sleep(0.02)
    raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")


async def _create_topic(client: RemotingClient, master: str) -> None:
    header = CreateTopicRequestHeader(
        topic=TOPIC, default_topic="TBW102", read_queue_nums=QUEUES, write_queue_nums=QUEUES,
        perm=6, topic_filter_type="SINGLE_TAG", order=False,
    )  # fmt: skip
    request = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, encode_header(header))
    answer = await client.invoke(master, request, 10)
    if answer.code != ResponseCode.SUCCESS:
        raise RuntimeError(f"creating {TOPIC} on {master}: {answer.code} {answer.remark}")


async def _kills(kills: int, keys: dict[str, Any]) -> tuple[list[float], list[float]]:
    """Kill the master ``kills`` times; (seconds to a new master, seconds to the first ack)."""
    base = Path(tempfile.mkdtemp(prefix="boltmq-bench-failover-"))
    group = Group(base, True, keys)
    assert group.controller is not None
    controller = group.controller.address
    elected: list[float] = []
    resumed: list[float] = []
    #: (time of the answer, the broker that stored the message) of each SEND_OK.
    acks: list[tuple[float, str]] = []
    try:
        await group.start()
        async with RemotingClient() as client, Producer(
            "BenchFailoverPG", namesrv_addr=group.registry.address, send_msg_timeout=3.0,
            retry_times_when_send_failed=0,
        ) as producer, trio.open_nursery() as nursery:  # fmt: skip

            async def has_master() -> bool:
                return (await _replica_info(client, controller))[0] is not None

            await _wait(has_master, 60, "a master")
            master, _, _ = await _replica_info(client, controller)
            assert master is not None
            await _create_topic(client, master)

            async def load() -> None:
                n = 0
                while True:
                    n += 1
                    try:
                        result = await producer.send(Message(TOPIC, b"failover-%d" % n))
                    except Exception:
                        await trio.sleep(0.02)
                        continue
                    if result.status is SendStatus.SEND_OK:
                        host, _ = decode_offset_msg_id(result.offset_msg_id)
                        acks.append((time.monotonic(), f"{host[0]}:{host[1]}"))
                    await trio.sleep(0.005)

            nursery.start_soon(load)
            for kill in range(1, kills + 1):

                async def all_in_sync() -> bool:
                    address, _, members = await _replica_info(client, controller)
                    return address is not None and len(members) == len(group.brokers)

                await _wait(all_in_sync, 120, "all three brokers in the SyncStateSet")
                wanted = len(acks) + 20
                await _wait(lambda: len(acks) >= wanted, 60, "20 acknowledged sends")  # noqa: B023
                old_address, old_epoch, _ = await _replica_info(client, controller)
                assert old_address is not None
                old = group.broker_at(old_address)
                killed_at = time.monotonic()
                await old.kill()

                async def new_master(old: str = old_address, epoch: int = old_epoch) -> bool:
                    address, now, _ = await _replica_info(client, controller)
                    return address not in (None, old) and now > epoch

                await _wait(new_master, 120, "a new master")
                elected.append(time.monotonic() - killed_at)

                # An answer the old master sent just before it died may arrive just after.
                def acked(moment: float = killed_at, old: str = old_address) -> bool:
                    return any(at > moment and by != old for at, by in acks[-50:])

                await _wait(acked, 120, "a send acknowledged after the kill")
                resumed.append(
                    min(at for at, by in acks if at > killed_at and by != old_address) - killed_at
                )
                new_address, new_epoch, _ = await _replica_info(client, controller)
                print(
                    f"kill {kill}/{kills}: master {old_address} (epoch {old_epoch}) -> "
                    f"{new_address} (epoch {new_epoch}) in {elected[-1]:.2f} s; first "
                    f"acknowledged send after {resumed[-1]:.2f} s", flush=True,
                )  # fmt: skip
                await old.start()
            nursery.cancel_scope.cancel()
    finally:
        await group.stop()
        shutil.rmtree(base, ignore_errors=True)
    return elected, resumed


async def _steady(controller_mode: bool, seconds: float, keys: dict[str, Any]) -> dict[str, float]:
    """SYNC_MASTER send rate of the group, classic or in controller mode."""
    base = Path(tempfile.mkdtemp(prefix="boltmq-bench-failover-"))
    group = Group(base, controller_mode, keys)
    try:
        await group.start()
        async with RemotingClient() as client:
            if group.controller is not None:
                controller = group.controller.address

                async def all_in_sync() -> bool:
                    address, _, members = await _replica_info(client, controller)
                    return address is not None and len(members) == len(group.brokers)

                await _wait(all_in_sync, 120, "all three brokers in the SyncStateSet")
                master = (await _replica_info(client, controller))[0]
                assert master is not None
            else:
                master = group.brokers[0].address
            await _create_topic(client, master)
            await produce(master, TOPIC, 0.5, 8, QUEUES, BODY)  # warm up; slaves linked
            start = time.perf_counter()
            stored, latencies = await produce(master, TOPIC, seconds, 64, QUEUES, BODY)
            elapsed = time.perf_counter() - start
    finally:
        await group.stop()
        shutil.rmtree(base, ignore_errors=True)
    return {
        "msgs_per_s": stored / elapsed,
        "p50_ms": _percentile(latencies, 0.5) * 1e3,
        "p99_ms": _percentile(latencies, 0.99) * 1e3,
    }


def _summary(name: str, values: list[float]) -> str:
    return (
        f"{name}: p50 {statistics.median(values):.2f} s, p99 {_percentile(values, 0.99):.2f} s, "
        f"min {min(values):.2f} s, max {max(values):.2f} s over {len(values)} kills"
    )


async def _main(kills: int, seconds: float, rounds: int, keys: dict[str, Any]) -> None:
    print(
        f"# failover, {platform.machine()}, {os.cpu_count()} cpus, Python "
        f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f}; "
        f"brokerHeartbeatInterval={keys['brokerHeartbeatInterval']} "
        f"controllerHeartBeatTimeoutMills={keys['controllerHeartBeatTimeoutMills']} "
        f"scanNotActiveBrokerInterval={keys['scanNotActiveBrokerInterval']}",
        flush=True,
    )
    if kills:
        elected, resumed = await _kills(kills, keys)
        print(_summary("kill to new master", elected))
        print(_summary("kill to first acknowledged send", resumed))
    if seconds:
        print(f"# SYNC_MASTER + 2 slaves, SYNC_FLUSH, 64 senders, 1 KiB, {seconds:g} s each")
        print("| round | group | msgs/s | p50 / p99 ms | load average |")
        print("|---|---|---|---|---|")
        ratios = []
        # Rounds alternate the two setups, so a change of the machine's load hits both alike.
        for run in range(1, rounds + 1):
            rates = {}
            for label, mode in (("classic (roles by configuration)", False),
                                ("controller mode", True)):  # fmt: skip
                f = await _steady(mode, seconds, keys)
                rates[mode] = f["msgs_per_s"]
                print(
                    f"| {run} | {label} | {f['msgs_per_s']:,.0f} | {f['p50_ms']:.1f} / "
                    f"{f['p99_ms']:.1f} | {os.getloadavg()[0]:.1f} |", flush=True,
                )  # fmt: skip
            ratios.append(rates[True] / rates[False])
        listed = ", ".join(f"{r:.0%}" for r in ratios)
        print(f"# controller mode / classic: median {statistics.median(ratios):.0%} ({listed})")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(
        prog="python -m bench failover",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--kills", type=int, default=10, help="masters to kill (default 10)")
    parser.add_argument("--seconds", type=float, default=5.0,
                        help="seconds of load per steady-state run (0: skip it)")  # fmt: skip
    parser.add_argument("--heartbeat-interval", type=int, default=1000, metavar="MS",
                        help="brokerHeartbeatInterval (default 1000)")  # fmt: skip
    parser.add_argument("--heartbeat-timeout", type=int, default=5000, metavar="MS",
                        help="controllerHeartBeatTimeoutMills (5000; RocketMQ: 10000)")  # fmt: skip
    parser.add_argument("--scan-interval", type=int, default=1000, metavar="MS",
                        help="scanNotActiveBrokerInterval (1000; RocketMQ: 5000)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1,
                        help="steady-state runs of each setup, in turn (default 1)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="2 kills, 1 s of steady load")
    args = parser.parse_args(argv)
    if args.kills < 0 or args.seconds < 0 or args.rounds < 1:
        parser.error("--kills and --seconds must not be negative, --rounds at least 1")
    keys = {
        "brokerHeartbeatInterval": args.heartbeat_interval,
        "controllerHeartBeatTimeoutMills": args.heartbeat_timeout,
        "scanNotActiveBrokerInterval": args.scan_interval,
    }
    kills, seconds = (2, 1.0) if args.quick else (args.kills, args.seconds)
    # Every kill makes the client's reconnects to the dead master warn; expected here.
    logging.getLogger("boltmq.remoting").setLevel(logging.ERROR)
    trio.run(_main, kills, seconds, args.rounds, keys)
    return 0


if __name__ == "__main__":
    sys.exit(main())
