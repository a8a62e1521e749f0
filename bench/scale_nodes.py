"""Processes and requests of the cost-growth benchmark (`bench.scale`): a registry and brokers
in processes of their own (their VmRSS and CPU read from /proc), and the remoting requests
that create topics, send over many queues and read them back.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import resource
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import trio

from bench.bench_produce_consume import BODY, _pull, _send, _send_fields
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.headers import (
    CreateTopicRequestHeader,
    encode_header,
)
from protocol.names import AUTO_CREATE_TOPIC_KEY_TOPIC

READY = re.compile(r"ready on ([\d.]+:\d+)")
ROOT = Path(__file__).resolve().parents[1]
QUEUES = 8
DIMENSIONS = ("topics", "connections", "pulls", "recovery")


def say(line: str) -> None:
    print(line, flush=True)


# -- processes ----------------------------------------------------------------------------------


class Node:
    """A server process of this run: its process, address and /proc figures."""

    def __init__(self, proc: trio.Process, address: str) -> None:
        self.proc = proc
        self.address = address
        self.started = time.perf_counter()
        #: The last lines the process wrote, shown when a step fails.
        self.tail: collections.deque[str] = collections.deque(maxlen=40)

    @property
    def pid(self) -> int:
        """The process id."""
        return self.proc.pid

    def rss_mib(self) -> float:
        """VmRSS of the process in MiB."""
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def open_file_limit(self) -> int:
        """The process's soft open-file limit (the broker raises it to the hard one)."""
        with open(f"/proc/{self.pid}/limits") as limits:
            for line in limits:
                if line.startswith("Max open files"):
                    value = line.split()[3]
                    return 1 << 30 if value == "unlimited" else int(value)
        return 1 << 30

    def cpu_seconds(self) -> float:
        """User plus system CPU seconds the process has used."""
        with open(f"/proc/{self.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    async def stop(self, kill: bool = False) -> None:
        """SIGTERM (clean stop, waited for) or SIGKILL."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        with trio.move_on_after(120) as scope:
            await self.proc.wait()
        if scope.cancelled_caught:
            self.proc.kill()
            await self.proc.wait()


def open_file_limit_setter(nofile: int) -> Callable[[], None]:
    """A ``preexec_fn`` that sets a child's RLIMIT_NOFILE, soft and hard, to ``nofile``."""

    def set_limit() -> None:  # runs in the child, before exec
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    return set_limit


def can_start_with_open_file_limit(nofile: int) -> str | None:
    """None when a child can be started with RLIMIT_NOFILE ``nofile`` (soft and hard), else
    why not. Raising a hard limit needs CAP_SYS_RESOURCE (root): a short child tries it."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or nofile <= hard:
        return None
    try:
        ceiling = int(Path("/proc/sys/fs/nr_open").read_text())
    except (OSError, ValueError):
        ceiling = 1 << 20
    if nofile > ceiling:
        return f"the kernel's ceiling fs.nr_open is {ceiling:,}"
    try:
        subprocess.run(
            [sys.executable, "-c", "pass"], preexec_fn=open_file_limit_setter(nofile), check=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60,
        )  # fmt: skip
    except (subprocess.SubprocessError, OSError):
        return f"raising the hard limit above {hard:,} needs CAP_SYS_RESOURCE (root)"
    return None


async def _spawn(
    command: list[str], pattern: re.Pattern[str], timeout: float, nofile: int | None = None
) -> Node:
    """Start ``command`` and wait for ``pattern`` on its stderr (group 1 is its address);
    with ``nofile``, the child's soft and hard RLIMIT_NOFILE are set to it before exec."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    options: dict[str, Any] = {}
    if nofile is not None:
        options["preexec_fn"] = open_file_limit_setter(nofile)
    proc = await trio.lowlevel.open_process(
        command, cwd=ROOT, env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE, **options
    )
    stream = proc.stderr if pattern is READY else proc.stdout
    assert stream is not None
    buffer = b""
    try:
        with trio.fail_after(timeout):
            while True:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    tail = buffer.decode(errors="replace")[-2000:]
                    raise RuntimeError(f"{command[3]} ended before it was ready:\n{tail}")
                buffer += chunk
                if match := pattern.search(buffer.decode(errors="replace")):
                    node = Node(proc, match.group(1))
                    break
    except BaseException:
        proc.kill()
        raise
    node.tail.extend(buffer.decode(errors="replace").splitlines())
    return node


async def _drain(node: Node, stream: trio.abc.ReceiveStream | None) -> None:
    if stream is None:
        return
    pending = b""
    with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
        while chunk := await stream.receive_some(65536):
            *lines, pending = (pending + chunk).split(b"\n")
            node.tail.extend(line.decode(errors="replace") for line in lines)


@contextlib.asynccontextmanager
async def _running(node: Node) -> AsyncIterator[Node]:
    """Drain the node's output while it runs; stop it at the end; its last lines on failure."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_drain, node, node.proc.stdout)
        nursery.start_soon(_drain, node, node.proc.stderr)
        try:
            yield node
        except BaseException:
            say(f"[scale] a step failed; the last lines of process {node.pid}:")
            for line in node.tail:
                say(f"    {line}")
            raise
        finally:
            await node.stop()
            nursery.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def registry() -> AsyncIterator[Node]:
    """A registry in its own process."""
    command = [sys.executable, "-c", "from bench.bench_registry import serve; serve()", "registry"]
    node = await _spawn(command, re.compile(r"^(\d+)$", re.M), 60)
    node.address = f"127.0.0.1:{node.address}"
    async with _running(node):
        yield node


def broker_command(store: Path, *extra: str) -> list[str]:
    """The command line of a broker on an ephemeral loopback port storing in ``store``."""
    return [
        sys.executable, "-m", "boltmq.cli", "broker",
        "--listenPort", "0", "--bindAddress", "127.0.0.1", "--fastPortEnable", "false",
        "--storePathRootDir", str(store), *extra,
    ]  # fmt: skip


@contextlib.asynccontextmanager
async def broker(
    store: Path, *extra: str, timeout: float = 120, nofile: int | None = None
) -> AsyncIterator[Node]:
    """A broker in its own process, stopped cleanly at the end (unless already stopped);
    ``nofile``: its open-file limit, soft and hard (see `can_start_with_open_file_limit`)."""
    node = await _spawn(broker_command(store, *extra), READY, timeout, nofile)
    async with _running(node):
        yield node


# -- requests -----------------------------------------------------------------------------------


async def call(client: RemotingClient, address: str, request: RemotingCommand) -> RemotingCommand:
    answer = await client.invoke(address, request, 60)
    if answer.code != ResponseCode.SUCCESS:
        raise RuntimeError(f"request {request.code} failed: {answer.code} {answer.remark}")
    return answer


async def create_topics(client: RemotingClient, address: str, names: Sequence[str]) -> float:
    """Create ``names`` (8 queues each) with 16 requests in flight; seconds taken."""
    todo = iter(names)
    start = time.perf_counter()

    async def worker() -> None:
        for name in todo:
            header = CreateTopicRequestHeader(
                topic=name, default_topic=AUTO_CREATE_TOPIC_KEY_TOPIC, read_queue_nums=QUEUES,
                write_queue_nums=QUEUES, perm=6, topic_filter_type="SINGLE_TAG",
                topic_sys_flag=0, order=False,
            )  # fmt: skip
            request = RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_TOPIC, encode_header(header)
            )
            await call(client, address, request)

    async with trio.open_nursery() as nursery:
        for _ in range(16):
            nursery.start_soon(worker)
    return time.perf_counter() - start


async def produce_spread(
    client: RemotingClient, node: Node, queues: Sequence[tuple[str, int]], count: int
) -> tuple[float, float]:
    """Send ``count`` 1 KiB messages round-robin over ``queues``, 64 in flight;
    (msgs/s, broker CPU us per message)."""
    # Header fields built once per queue, as a client caches them: the client shares the cores.
    fields = [_send_fields(topic, queue_id) for topic, queue_id in queues]
    sequence = iter(range(count))
    cpu, start = node.cpu_seconds(), time.perf_counter()

    async def sender() -> None:
        for n in sequence:
            await call(client, node.address, _send(fields[n % len(fields)], BODY))

    async with trio.open_nursery() as nursery:
        for _ in range(64):
            nursery.start_soon(sender)
    took = time.perf_counter() - start
    return count / took, (node.cpu_seconds() - cpu) / count * 1e6


async def consume_all(
    client: RemotingClient, node: Node, queues: Sequence[tuple[str, int]]
) -> tuple[float, float, int]:
    """Read every queue from offset 0 with pulls of 32, 64 in flight; (msgs/s, pulls/s, msgs)."""
    todo = iter(queues)
    messages = pulls = 0
    start = time.perf_counter()

    async def reader() -> None:
        nonlocal messages, pulls
        for topic, queue_id in todo:
            offset = 0
            while True:
                answer = await client.invoke(node.address, _pull(topic, queue_id, offset), 60)
                pulls += 1
                if answer.code != ResponseCode.SUCCESS:
                    break
                assert answer.ext_fields is not None
                new_offset = int(answer.ext_fields["nextBeginOffset"])
                messages += new_offset - offset
                offset = new_offset

    async with trio.open_nursery() as nursery:
        for _ in range(64):
            nursery.start_soon(reader)
    took = time.perf_counter() - start
    return messages / took, pulls / took, messages


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))] if ordered else 0.0
