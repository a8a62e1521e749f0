"""Cost growth: how a broker's rates, memory and start-up grow with topics, connections, held
pulls and commit-log size.

Each dimension starts a fresh broker in its own process (registry in another) on loopback with
a scratch store, and drives it from this process with BoltMQ's remoting client:

- topics: 1, 10, 100, 1,000, 5,000 topics of 8 queues, created by UPDATE_AND_CREATE_TOPIC;
  1 KiB sends spread round-robin over every queue of every topic (64 in flight), then every
  queue read back with pulls of 32; broker RSS (VmRSS) and broker CPU per message; the
  broker's REGISTER_BROKER body (its size, and the time a registry takes to accept it) and
  the time of one GET_ROUTEINFO_BY_TOPIC. Queue files hold no descriptor on Linux (mapped with
  libc's mmap); where they hold one each (no libc), a size that needs more than the hard
  open-file limit starts its broker with a limit raised to fit where this process may
  (CAP_SYS_RESOURCE, root). Where it may not, one line says what limit is needed
  and how an operator sets it; the size is then measured without traffic (creating,
  registering and routing topics opens no queue file) and traffic goes over the most topics
  that fit.
- connections: 1, 64, 512, 2,000 client connections; all but one are raw TCP connections of
  their own that send HEART_BEAT (each a distinct client id) when opened and every 20 s; the
  one working connection sends 1 KiB messages (64 in flight); its rate and broker RSS.
- held pulls: 1, 1,000, 10,000 long-polling PULL_MESSAGEs held on distinct queues (1,250
  topics x 8 queues, 1,000 per connection); broker RSS, broker CPU while they wait, and the
  latency from sending one message to one of those queues to the held pull's answer (p50/p99
  over many wakes).
- commit log: start-up time of an empty store, then with 1 GiB and 10 GiB of commit log
  (16 KiB bodies in batches of 32), after a clean stop (SIGTERM) and after kill -9.

    python -m bench scale                      # everything (about 4 minutes on 2 busy cores)
    python -m bench scale --quick              # a smoke run: small sizes, no 10 GiB
    python -m bench scale --only topics --topics 1 100 1000
    python -m bench scale --only recovery --gib 1

Every figure is printed as it is taken; the store directories are deleted at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import random
import resource
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import trio

from bench.bench_produce_consume import BODY, _send, _send_fields
from bench.scale_nodes import (
    QUEUES,
    Node,
    broker,
    call,
    can_start_with_open_file_limit,
    consume_all,
    create_topics,
    percentile,
    produce_spread,
    registry,
    say,
)
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.bodies import HeartbeatData, ProducerData
from protocol.headers import (
    GetRouteInfoRequestHeader,
    PullMessageRequestHeader,
    encode_header,
)
from protocol.message import BatchElement, encode_batch
from storage.mapped_file import QUEUE_FILE_DESCRIPTORS

DIMENSIONS = ("topics", "connections", "pulls", "recovery")
HELD_PER_CONNECTION = 1000


# -- topics -------------------------------------------------------------------------------------


async def _registration(
    client: RemotingClient, node: Node, registry: Node
) -> tuple[int, float, float]:
    """(bytes, seconds, registry CPU seconds): the broker's REGISTER_BROKER body now, the
    median time of 3 registrations of it by a probe broker (unregistered after each, routes
    stay the broker's), and the registry's CPU per registration and unregistration."""
    registry_address = registry.address
    import zlib

    from protocol.bodies import RegisterBrokerBody, TopicConfigSerializeWrapper
    from protocol.headers import RegisterBrokerRequestHeader, UnRegisterBrokerRequestHeader

    answer = await call(
        client, node.address, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG, {})
    )
    assert answer.body is not None
    wrapper = TopicConfigSerializeWrapper.from_json(answer.body)
    body = RegisterBrokerBody(topic_config_serialize_wrapper=wrapper).encode()
    name, addr, cluster = "scale-probe", "127.0.0.2:1", "ScaleProbe"
    register = encode_header(RegisterBrokerRequestHeader(
        broker_name=name, broker_addr=addr, cluster_name=cluster, broker_id=0,
        ha_server_addr="127.0.0.2:2", body_crc32=zlib.crc32(body) & 0x7FFFFFFF,
    ))  # fmt: skip
    unregister = encode_header(UnRegisterBrokerRequestHeader(
        broker_name=name, broker_addr=addr, cluster_name=cluster, broker_id=0,
    ))  # fmt: skip
    times = []
    cpu = registry.cpu_seconds()
    async with RemotingClient() as probe_client:
        for _ in range(3):
            start = time.perf_counter()
            request = RemotingCommand.request(RequestCode.REGISTER_BROKER, register, body)
            await call(probe_client, registry_address, request)
            times.append(time.perf_counter() - start)
            request = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, unregister)
            await call(probe_client, registry_address, request)
    return len(body), statistics.median(times), (registry.cpu_seconds() - cpu) / 3


async def _route_query(
    client: RemotingClient, registry_address: str, names: Sequence[str]
) -> float:
    """Median seconds of one GET_ROUTEINFO_BY_TOPIC, one in flight, over up to 200 topics."""
    chosen = random.Random(7).choices(names, k=200)
    times = []
    for name in chosen:
        header = encode_header(GetRouteInfoRequestHeader(topic=name))
        start = time.perf_counter()
        await call(
            client,
            registry_address,
            RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, header),
        )
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def _wait_routed(client: RemotingClient, registry_address: str, topic: str) -> None:
    header = encode_header(GetRouteInfoRequestHeader(topic=topic))
    with trio.fail_after(120):
        while True:
            request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, header)
            answer = await client.invoke(registry_address, request, 30)
            if answer.code == ResponseCode.SUCCESS:
                return
            await trio.sleep(0.1)


async def topics_dimension(
    root: Path, sizes: Sequence[int], minimum: int
) -> list[dict[str, float]]:
    """One broker per size: create, register, route, produce over all queues, consume."""
    rows: list[dict[str, float]] = []
    say(f"[scale] topics: {', '.join(f'{n:,}' for n in sizes)} topics x {QUEUES} queues")
    runs: list[tuple[int, int | None, bool]] = []  # (topics, open-file limit, with traffic)
    for wanted in sizes:
        fits, nofile = _broker_file_limit(wanted)
        if fits != wanted:
            # Creating, registering and routing topics opens no queue file: measured in full.
            runs.append((wanted, None, False))
        if fits and all(fits != size for size, _, traffic in runs if traffic):
            runs.append((fits, nofile, True))
    async with registry() as reg:
        for size, nofile, traffic in runs:
            names = [f"Scale-{size}-{i:05d}" for i in range(size)]
            queues = [(name, q) for name in names for q in range(QUEUES)]
            store = Path(tempfile.mkdtemp(prefix="scale-topics-", dir=root))
            async with (
                broker(store, "-n", reg.address, nofile=nofile) as node,
                RemotingClient() as client,
            ):
                base_rss = node.rss_mib()
                if nofile is not None:
                    say(
                        f"[scale]   {size:>5,} topics: broker started with RLIMIT_NOFILE "
                        f"{node.open_file_limit():,} (soft and hard; this process's hard limit "
                        f"is {resource.getrlimit(resource.RLIMIT_NOFILE)[1]:,})"
                    )
                before, reg_before = node.cpu_seconds(), reg.cpu_seconds()
                took = await create_topics(client, node.address, names)
                create_cpu = (node.cpu_seconds() - before) / size * 1e3
                await _wait_routed(client, reg.address, names[-1])
                # What the registrations that follow the creates cost the registry.
                create_reg_cpu = (reg.cpu_seconds() - reg_before) / size * 1e3
                size_bytes, register, register_cpu = await _registration(client, node, reg)
                route = await _route_query(client, reg.address, names)
                if not traffic:
                    say(
                        f"[scale]   {size:>5,} topics, no traffic: created in {took:.2f} s "
                        f"({took / size * 1e3:.2f} ms each, broker {create_cpu:.2f} ms CPU, "
                        f"registry {create_reg_cpu:.2f} ms CPU each); "
                        f"REGISTER_BROKER {size_bytes / 1024:,.0f} KiB accepted in "
                        f"{register * 1e3:.1f} ms (registry {register_cpu * 1e3:.0f} ms CPU with "
                        f"its unregistration); route query {route * 1e6:,.0f} us; "
                        f"RSS {base_rss:.0f} -> {node.rss_mib():.0f} MiB"
                    )
                    continue
                # The first message to a queue creates its consume-queue file: timed apart.
                _, first_cpu = await produce_spread(client, node, queues, len(queues))
                count = max(minimum, len(queues))
                say(
                    f"[scale]   {size:>5,} topics: created in {took:.2f} s "
                    f"({took / size * 1e3:.2f} ms each, broker {create_cpu:.2f} ms CPU, "
                    f"registry {create_reg_cpu:.2f} ms CPU each); "
                    f"REGISTER_BROKER {size_bytes / 1024:,.0f} KiB "
                    f"accepted in {register * 1e3:.1f} ms (registry {register_cpu * 1e3:.0f} ms "
                    f"CPU with its unregistration); route query {route * 1e6:,.0f} us; "
                    f"first message per queue: broker {first_cpu:.0f} us CPU each; "
                    f"sending {count:,}"
                )
                produce, cpu = await produce_spread(client, node, queues, count)
                after_produce = node.rss_mib()
                before = node.cpu_seconds()
                consume, pulls, read = await consume_all(client, node, queues)
                pull_cpu = (node.cpu_seconds() - before) / (pulls * read / consume) * 1e6
                if read != count + len(queues):
                    raise RuntimeError(f"read back {read:,} of {count + len(queues):,} messages")
                row = {
                    "size": size, "create_ms": took / size * 1e3, "create_cpu_ms": create_cpu,
                    "create_registry_cpu_ms": create_reg_cpu,
                    "pull_cpu_us": pull_cpu, "register_kib": size_bytes / 1024,
                    "register_ms": register * 1e3, "register_cpu_ms": register_cpu * 1e3,
                    "route_us": route * 1e6, "produce": produce,
                    "cpu_us": cpu, "first_cpu_us": first_cpu, "consume": consume,
                    "pulls": pulls, "rss_idle": base_rss,
                    "rss": max(after_produce, node.rss_mib()),
                }  # fmt: skip
                say(
                    f"[scale]   {size:>5,} topics: produce {produce:,.0f} msgs/s "
                    f"(broker {cpu:.0f} us CPU/msg), consume {consume:,.0f} msgs/s "
                    f"({pulls:,.0f} pulls/s, broker {pull_cpu:.0f} us CPU/pull), "
                    f"RSS {base_rss:.0f} -> {row['rss']:.0f} MiB"
                )
                rows.append(row)
            shutil.rmtree(store, ignore_errors=True)
    return rows


# -- connections --------------------------------------------------------------------------------


def _heartbeat(n: int) -> RemotingCommand:
    body = HeartbeatData(
        client_id=f"127.0.0.1@scale-idle-{n}",
        producer_data_set=[ProducerData(group_name="ScaleIdlePG")],
    ).to_json()
    return RemotingCommand.request(RequestCode.HEART_BEAT, {}, body)


async def _idle_connection(
    address: str, n: int, ready: trio.MemorySendChannel[None], stop: trio.Event
) -> None:
    """One client connection of its own: heartbeat when opened and every 20 s, until ``stop``."""
    async with RemotingClient() as client:
        await call(client, address, _heartbeat(n))
        await ready.send(None)
        while not stop.is_set():
            with trio.move_on_after(20):
                await stop.wait()
            if not stop.is_set():
                await call(client, address, _heartbeat(n))


async def connections_dimension(
    root: Path, counts: Sequence[int], seconds: float
) -> list[dict[str, float]]:
    """One broker; raise the connection count step by step and measure one working client."""
    rows = []
    say(
        f"[scale] connections: {', '.join(f'{n:,}' for n in counts)} (all but one idle, "
        "each its own TCP connection sending HEART_BEAT every 20 s)"
    )
    store = Path(tempfile.mkdtemp(prefix="scale-conns-", dir=root))
    stop = trio.Event()
    send, receive = trio.open_memory_channel[None](0)
    async with (
        broker(store) as node, RemotingClient() as client, trio.open_nursery() as idle
    ):  # fmt: skip
        queues = [("ScaleConnTopic", q) for q in range(QUEUES)]
        await create_topics(client, node.address, ["ScaleConnTopic"])
        await produce_spread(client, node, queues, 2000)  # warm up
        opened = 1
        for count in counts:
            start = time.perf_counter()
            for n in range(opened, count):
                idle.start_soon(_idle_connection, node.address, n, send, stop)
            with trio.fail_after(300):
                for _ in range(opened, count):
                    await receive.receive()
            opening = time.perf_counter() - start
            opened = max(opened, count)
            await _settle(node)
            quiet_cpu = node.cpu_seconds()
            await trio.sleep(2)
            idle_cpu = (node.cpu_seconds() - quiet_cpu) / 2
            sent = int(max(2000, 8000 * seconds))
            produce, cpu = await produce_spread(client, node, queues, sent)
            row = {"size": count, "produce": produce, "cpu_us": cpu, "rss": node.rss_mib(),
                   "idle_cpu": idle_cpu * 100, "open_s": opening}  # fmt: skip
            say(
                f"[scale]   {count:>5,} connections: opened in {opening:.1f} s; idle broker CPU "
                f"{idle_cpu * 100:.1f} %; produce {produce:,.0f} msgs/s (broker {cpu:.0f} us "
                f"CPU/msg); RSS {row['rss']:.0f} MiB"
            )
            rows.append(row)
        stop.set()
    shutil.rmtree(store, ignore_errors=True)
    return rows


# -- held pulls ---------------------------------------------------------------------------------


def _held_pull(topic: str, queue_id: int, offset: int) -> RemotingCommand:
    # Suspend (0x2) plus subscription (0x4): the broker holds the pull up to 60 s.
    header = PullMessageRequestHeader(
        consumer_group="ScaleHoldCG", topic=topic, queue_id=queue_id, queue_offset=offset,
        max_msg_nums=32, sys_flag=0x6, commit_offset=0, suspend_timeout_millis=60_000,
        subscription="*", sub_version=0,
    )  # fmt: skip
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header))


async def _holder(
    client: RemotingClient, address: str, topic: str, queue_id: int,
    arrived: dict[tuple[str, int], trio.Event], held: list[int],
) -> None:  # fmt: skip
    """Keep one pull held on (topic, queue id); set its event when a message is delivered."""
    offset = 0
    while True:
        held[0] += 1
        answer = await client.invoke(address, _held_pull(topic, queue_id, offset), 120)
        held[0] -= 1
        if answer.code == ResponseCode.SUCCESS:
            assert answer.ext_fields is not None
            offset = int(answer.ext_fields["nextBeginOffset"])
            arrived[(topic, queue_id)].set()
        elif answer.code not in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
            raise RuntimeError(f"held pull failed: {answer.code} {answer.remark}")


async def _settle(node: Node, seconds: float = 60) -> None:
    """Wait (up to ``seconds``) until the broker used under 10 % of a core for a second."""
    with trio.move_on_after(seconds):
        while True:
            before = node.cpu_seconds()
            await trio.sleep(1)
            if node.cpu_seconds() - before < 0.1:
                return


async def pulls_dimension(root: Path, counts: Sequence[int], wakes: int) -> list[dict[str, float]]:
    """One broker; hold more and more pulls on distinct queues and time wakes of random ones."""
    rows = []
    topics = max(1, (max(counts) + QUEUES - 1) // QUEUES)
    names = [f"ScaleHold-{i:05d}" for i in range(topics)]
    queues = [(name, q) for name in names for q in range(QUEUES)]
    say(
        f"[scale] held pulls: {', '.join(f'{n:,}' for n in counts)} on distinct queues "
        f"({topics:,} topics x {QUEUES}); {wakes} wakes at each"
    )
    store = Path(tempfile.mkdtemp(prefix="scale-pulls-", dir=root))
    arrived = {key: trio.Event() for key in queues}
    held = [0]
    extra = ("--maxHeldPulls", str(max(counts) + 100))
    async with (
        broker(store, *extra) as node,
        RemotingClient() as client,
        contextlib.AsyncExitStack() as stack,
    ):
        connections = (max(counts) + HELD_PER_CONNECTION - 1) // HELD_PER_CONNECTION
        pullers = [await stack.enter_async_context(RemotingClient()) for _ in range(connections)]
        await create_topics(client, node.address, names)
        fields = {key: _send_fields(*key) for key in queues}
        async with trio.open_nursery() as holders:
            holding = 0
            for count in counts:
                for n in range(holding, count):
                    # A connection runs at most 1,024 requests at once (the server's
                    # max_in_flight) and a held pull is one: 1,000 held pulls per connection.
                    puller = pullers[n // HELD_PER_CONNECTION]
                    holders.start_soon(_holder, puller, node.address, *queues[n], arrived, held)
                holding = max(holding, count)
                with trio.fail_after(300):
                    while held[0] < holding:
                        await trio.sleep(0.05)
                await _settle(node)  # the broker has read and held them all
                cpu = node.cpu_seconds()
                await trio.sleep(6)  # more than one 5 s re-check round
                idle_cpu = (node.cpu_seconds() - cpu) / 6
                rng = random.Random(count)
                latencies = []
                for _ in range(wakes):
                    key = queues[rng.randrange(holding)]
                    arrived[key] = event = trio.Event()
                    start = time.perf_counter()
                    await call(client, node.address, _send(fields[key], BODY))
                    with trio.fail_after(60):
                        await event.wait()
                    latencies.append(time.perf_counter() - start)
                row = {
                    "size": count, "rss": node.rss_mib(), "idle_cpu": idle_cpu * 100,
                    "p50_ms": percentile(latencies, 0.5) * 1e3,
                    "p99_ms": percentile(latencies, 0.99) * 1e3,
                }  # fmt: skip
                say(
                    f"[scale]   {count:>6,} held: RSS {row['rss']:.0f} MiB; broker CPU while "
                    f"they wait {idle_cpu * 100:.1f} %; wake (send to delivery) p50 "
                    f"{row['p50_ms']:.2f} ms p99 {row['p99_ms']:.2f} ms"
                )
                rows.append(row)
            holders.cancel_scope.cancel()
    shutil.rmtree(store, ignore_errors=True)
    return rows


# -- commit-log size: start-up and recovery -----------------------------------------------------

FILL_TOPIC = "ScaleFillTopic"
FILL_BODY = 16 * 1024
FILL_BATCH = 32


async def _max_offsets(client: RemotingClient, address: str) -> list[int]:
    from protocol.headers import GetMaxOffsetRequestHeader

    offsets = []
    for queue_id in range(QUEUES):
        header = encode_header(GetMaxOffsetRequestHeader(topic=FILL_TOPIC, queue_id=queue_id))
        request = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, header)
        answer = await call(client, address, request)
        assert answer.ext_fields is not None
        offsets.append(int(answer.ext_fields["offset"]))
    return offsets


async def _fill(node: Node, store_dir: Path, target: int) -> float:
    """Append batches until the commit log holds ``target`` bytes; MB/s."""
    body = encode_batch(BatchElement(0, b"r" * FILL_BODY, "") for _ in range(FILL_BATCH))
    per_request = FILL_BATCH * (FILL_BODY + 200)  # 200: a record's header, topic and properties
    have = _commit_log_bytes(store_dir)
    requests = iter(range(max(0, (target - have) // per_request)))
    start, last = time.perf_counter(), time.perf_counter()
    async with RemotingClient() as client:
        fields = [_send_fields(FILL_TOPIC, q, batch=True) for q in range(QUEUES)]

        async def sender(n: int) -> None:
            nonlocal last
            for i in requests:
                await call(client, node.address, _send(fields[n], body, batch=True))
                if time.perf_counter() - last > 15:
                    last = time.perf_counter()
                    say(f"[scale]     filling: {i * per_request / 2**30 + have / 2**30:.1f} GiB")

        async with trio.open_nursery() as nursery:
            for n in range(QUEUES):
                nursery.start_soon(sender, n)
    took = time.perf_counter() - start
    return (_commit_log_bytes(store_dir) - have) / took / 1e6


def _commit_log_bytes(store: Path) -> int:
    """Bytes written to the commit log: the last file's name is its start offset, and the
    store writes ahead of a never-zero record header (a zero total size ends the data)."""
    files = sorted((store / "commitlog").glob("[0-9]" * 20))  # not the spare next file
    if not files:
        return 0
    last = files[-1]
    with open(last, "rb") as handle:
        size = last.stat().st_size
        low, high = 0, size  # first all-zero 4 KiB block by bisection over written pages
        while high - low > 4096:
            middle = (low + high) // 2 // 4096 * 4096
            handle.seek(middle)
            if handle.read(4096).strip(b"\0"):
                low = middle + 4096
            else:
                high = middle
    return int(last.name) + high


async def recovery_dimension(root: Path, gibs: Sequence[int]) -> list[dict[str, float]]:
    """One store grown to each size: clean-restart and kill -9 recovery times."""
    rows: list[dict[str, float]] = []
    say(
        f"[scale] start-up and recovery: empty, then {', '.join(f'{g} GiB' for g in gibs)} of "
        f"commit log ({FILL_BODY // 1024} KiB bodies, batches of {FILL_BATCH})"
    )
    store = Path(tempfile.mkdtemp(prefix="scale-recovery-", dir=root))
    try:
        for gib in (0, *gibs):
            async with broker(store) as node:
                if gib:
                    if not rows or rows[-1]["size"] == 0:
                        async with RemotingClient() as client:
                            await create_topics(client, node.address, [FILL_TOPIC])
                    rate = await _fill(node, store, gib << 30)
                    say(
                        f"[scale]   filled to {_commit_log_bytes(store) / 2**30:.2f} GiB "
                        f"at {rate:,.0f} MB/s"
                    )
                async with RemotingClient() as client:
                    before = await _max_offsets(client, node.address) if gib else []
                stop = time.perf_counter()
            stop_s = time.perf_counter() - stop
            start = time.perf_counter()
            async with broker(store) as node:
                clean = time.perf_counter() - start
                rss = node.rss_mib()
                # What start-up spent its time on, in the broker's own words.
                for line in node.tail:
                    if "dedup index:" in line or "recovering" in line:
                        say(f"[scale]     broker: {line.split(': ', 1)[-1]}")
                await node.stop(kill=True)
            start = time.perf_counter()
            async with broker(store, timeout=1800) as node, RemotingClient() as client:
                recovered = time.perf_counter() - start
                after = await _max_offsets(client, node.address) if gib else []
            if after != before:
                raise RuntimeError(f"queue offsets {before} before kill -9, {after} after recovery")
            row = {"size": gib, "stop_s": stop_s, "start_s": clean, "recover_s": recovered,
                   "rss": rss}  # fmt: skip
            say(
                f"[scale]   {gib:>2} GiB: clean stop {stop_s:.1f} s; start after a clean stop "
                f"{clean:.1f} s (RSS {rss:.0f} MiB); start after kill -9 {recovered:.1f} s; "
                "queue offsets intact"
            )
            rows.append(row)
    finally:
        shutil.rmtree(store, ignore_errors=True)
    return rows


# -- the run ------------------------------------------------------------------------------------


def _growth(rows: Sequence[dict[str, float]], key: str) -> str:
    """How ``key`` changed from the first row to the last against the size's growth."""
    first, last = rows[0], rows[-1]
    if len(rows) < 2 or not first[key] or first["size"] == last["size"]:
        return ""
    return f"x{last[key] / first[key]:.2f} over x{last['size'] / max(first['size'], 1):,.0f}"


#: Descriptors a broker holds beside its queue files: commit-log, index and checkpoint files,
#: listening sockets, the registry and bench connections, worker threads' files.
BROKER_BASE_FILES = 512


def _broker_file_limit(size: int) -> tuple[int, int | None]:
    """(topics to measure, open-file limit to start their broker with) for ``size`` topics.

    The limit is None when the one the broker inherits is enough. When ``size`` needs more
    than the hard limit and it cannot be raised here, one line says what an operator sets,
    and the largest size that fits (in hundreds) is measured with traffic (0: none).
    """
    # A consume-queue file holds no descriptor where libc maps it, else one (its map's), as
    # RocketMQ's MappedFile holds a FileChannel; the broker raises its soft limit to the hard
    # one by itself.
    needed = size * QUEUES * QUEUE_FILE_DESCRIPTORS + BROKER_BASE_FILES
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or needed <= hard:
        return size, None
    why = can_start_with_open_file_limit(needed)
    if why is None:
        return size, needed
    fits = (hard - BROKER_BASE_FILES) // (QUEUES * QUEUE_FILE_DESCRIPTORS)
    fits = fits // 100 * 100 if fits >= 100 else max(fits, 0)
    say(
        f"[scale]   {size:>5,} topics: {size * QUEUES:,} queue files need an open-file limit of "
        f"at least {needed:,}; the hard limit is {hard:,} and {why}. An operator raises it with "
        f"`ulimit -n {needed}` (as root) before starting the broker, or LimitNOFILE={needed} in "
        f"its systemd unit. Measuring {size:,} topics without traffic (no queue file opened), "
        f"and traffic over {fits:,} topics, the most that fit."
    )
    return fits, None


def _raise_file_limit() -> None:
    # 2,000 connections need 2,000 descriptors here and as many in the broker, which inherits.
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < min(hard, 16384):
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 16384), hard))


async def _main(args: argparse.Namespace) -> None:
    load = os.getloadavg()
    say(
        f"scale: {platform.machine()}, {os.cpu_count()} cpus, "
        f"python {platform.python_version()}, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, store under {args.dir}"
    )
    root = Path(tempfile.mkdtemp(prefix="boltmq-scale-", dir=args.dir))
    begun = time.perf_counter()
    summary: list[str] = []
    try:
        if "topics" in args.only:
            rows = await topics_dimension(root, args.topics, args.messages)
            summary.append("topics: " + "; ".join(
                f"{key} {_growth(rows, key)}"
                for key in (
                    "produce", "cpu_us", "consume", "pull_cpu_us", "rss", "register_ms",
                    "register_cpu_ms", "create_cpu_ms", "create_registry_cpu_ms", "route_us",
                )
            ))  # fmt: skip
        if "connections" in args.only:
            rows = await connections_dimension(root, args.connections, args.seconds)
            summary.append("connections: " + "; ".join(
                f"{key} {_growth(rows, key)}" for key in ("produce", "rss")
            ))  # fmt: skip
        if "pulls" in args.only:
            rows = await pulls_dimension(root, args.pulls, args.wakes)
            summary.append("held pulls: " + "; ".join(
                f"{key} {_growth(rows, key)}" for key in ("rss", "p50_ms", "p99_ms")
            ))  # fmt: skip
        if "recovery" in args.only and args.gib:
            rows = await recovery_dimension(root, args.gib)
            summary.append("commit log: " + "; ".join(
                f"{key} {_growth(rows[1:], key)}" for key in ("start_s", "recover_s")
            ))  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)
    say("[scale] growth, last size against the first:")
    for line in summary:
        say(f"  {line}")
    say(f"[scale] done in {time.perf_counter() - begun:.0f} s")


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m bench scale``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--only", nargs="+", choices=DIMENSIONS, default=list(DIMENSIONS),
                        help="dimensions to run (default: all)")  # fmt: skip
    parser.add_argument("--topics", nargs="+", type=int, default=[1, 10, 100, 1000, 5000],
                        metavar="N", help="topic counts (1 10 100 1000 5000)")  # fmt: skip
    parser.add_argument("--messages", type=int, default=20_000,
                        help="messages per topic count, beside one per queue (20000)")  # fmt: skip
    parser.add_argument("--connections", nargs="+", type=int, default=[1, 64, 512, 2000],
                        metavar="N", help="connection counts (1 64 512 2000)")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="about this long per connection-count produce figure (2)")  # fmt: skip
    parser.add_argument("--pulls", nargs="+", type=int, default=[1, 1000, 10_000], metavar="N",
                        help="held pull counts (1 1000 10000)")  # fmt: skip
    parser.add_argument("--wakes", type=int, default=200, help="wakes timed at each count (200)")
    parser.add_argument("--gib", nargs="*", type=int, default=[1, 10], metavar="GIB",
                        help="commit-log sizes for start-up and recovery (1 10)")  # fmt: skip
    parser.add_argument("--dir", type=Path, default=None,
                        help="where the scratch stores go (default: the temp dir)")  # fmt: skip
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 1 10 100 topics, 1 64 connections, 1 100 pulls, "
                             "20 wakes, no commit-log fill")  # fmt: skip
    args = parser.parse_args(argv)
    for name in ("topics", "connections", "pulls"):
        if any(n < 1 for n in getattr(args, name)):
            parser.error(f"--{name} counts must be at least 1")
    if any(g < 1 for g in args.gib):
        parser.error("--gib sizes must be at least 1")
    if args.quick:
        args.topics, args.messages, args.connections = [1, 10, 100], 2000, [1, 64]
        args.seconds, args.pulls, args.wakes, args.gib = 0.25, [1, 100], 20, []
    if args.dir is not None and not args.dir.is_dir():
        parser.error(f"--dir {args.dir} is not a directory; create it or pick another")
    _raise_file_limit()
    trio.run(_main, args)


if __name__ == "__main__":
    main()
