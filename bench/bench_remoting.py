"""Remoting round trips per second over loopback, client and server in separate processes.

Measures the BoltMQ remoting server (a synchronous echo handler) against a naive trio
length-prefixed echo server that sends once per frame, both driven by the same BoltMQ client,
with 1 and with 64 requests in flight on one connection.

    python -m bench remoting [--seconds 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import struct
import subprocess
import sys
import time

import trio

ECHO = 9001


async def _serve_boltmq(task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    from protocol.command import RemotingCommand
    from protocol.connection import Connection, Dispatcher
    from protocol.server import RemotingServer, ServerConfig

    def echo(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(ext_fields=request.ext_fields, body=request.body)

    dispatcher = Dispatcher()
    dispatcher.register(ECHO, echo)
    server = RemotingServer(dispatcher, ServerConfig(idle_timeout=None))
    await server.serve_tcp(0, task_status=task_status)


async def _naive_connection(stream: trio.SocketStream) -> None:
    buf = bytearray()
    while True:
        data = await stream.receive_some(65536)
        if not data:
            return
        buf += data
        while len(buf) >= 4:
            (length,) = struct.unpack_from(">i", buf)
            if len(buf) < 4 + length:
                break
            frame = bytes(buf[: 4 + length])
            del buf[: 4 + length]
            await stream.send_all(frame)  # one send per frame: the naive baseline


async def _serve_naive(task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(_naive_connection, listeners)


def serve(kind: str) -> None:
    """Run one server and print its port (child process entry point)."""

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            target = _serve_boltmq if kind == "boltmq" else _serve_naive
            port = await nursery.start(target)
            print(port, flush=True)

    trio.run(main)


async def _measure(port: int, in_flight: int, seconds: float) -> tuple[float, list[float]]:
    from protocol.client import RemotingClient
    from protocol.command import RemotingCommand

    address = f"127.0.0.1:{port}"
    latencies: list[float] = []
    count = 0
    async with RemotingClient() as client:
        await client.invoke(address, RemotingCommand.request(ECHO))
        deadline = trio.current_time() + seconds
        start = time.perf_counter()

        async def worker() -> None:
            nonlocal count
            ext = {"topic": "BenchTopic", "queueId": "0"}
            while trio.current_time() < deadline:
                t0 = time.perf_counter()
                await client.invoke(address, RemotingCommand.request(ECHO, ext, b"x" * 64))
                latencies.append(time.perf_counter() - t0)
                count += 1

        async with trio.open_nursery() as nursery:
            for _ in range(in_flight):
                nursery.start_soon(worker)
        elapsed = time.perf_counter() - start
    return count / elapsed, latencies


def _measure_blocking(port: int, seconds: float) -> float:
    """Sequential round trips from a plain blocking socket: the server's cost alone."""
    import socket

    from protocol.command import RemotingCommand
    from protocol.frame import encode

    frame = encode(
        RemotingCommand(ECHO, opaque=1, ext_fields={"topic": "BenchTopic"}, body=b"x" * 64)
    )
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        count = 0
        start = time.perf_counter()
        end = start + seconds
        while time.perf_counter() < end:
            sock.sendall(frame)
            need = None
            got = b""
            while need is None or len(got) < need:
                got += sock.recv(65536)
                if need is None and len(got) >= 4:
                    need = 4 + struct.unpack_from(">i", got)[0]
            count += 1
        return count / (time.perf_counter() - start)


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))] * 1e6


def main(argv: list[str] | None = None) -> None:
    """Print round-trip rates and latency percentiles for both servers."""
    parser = argparse.ArgumentParser(prog="bench remoting")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--serve", choices=["boltmq", "naive"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve)
        return
    print(
        f"remoting round trips: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cpus, python {platform.python_version()}, {args.seconds:g}s each"
    )
    results: dict[tuple[str, int], float] = {}
    for kind in ("naive", "boltmq"):
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.bench_remoting", "--serve", kind],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            port = int(proc.stdout.readline())
            blocking = _measure_blocking(port, args.seconds)
            results[(kind, 0)] = blocking
            print(
                f"  {kind:7s} blocking socket client, 1 in flight: {blocking:10,.0f} round trips/s"
            )
            for in_flight in (1, 64):
                rate, lat = trio.run(_measure, port, in_flight, args.seconds)
                results[(kind, in_flight)] = rate
                print(
                    f"  {kind:7s} in-flight {in_flight:3d}: {rate:10,.0f} round trips/s   "
                    f"p50 {_pct(lat, 0.5):7.0f} us  p99 {_pct(lat, 0.99):7.0f} us  "
                    f"p999 {_pct(lat, 0.999):7.0f} us"
                )
        finally:
            proc.terminate()
            proc.wait(5)
    seq = results[("boltmq", 1)] / results[("naive", 1)]
    raw = results[("boltmq", 0)] / results[("naive", 0)]
    print(
        f"  sequential boltmq/naive = {seq:.2f} with the BoltMQ client, {raw:.2f} with a "
        f"blocking client (target >= 0.80); "
        f"64 in flight boltmq = {results[('boltmq', 64)]:,.0f}/s (target >= 50,000)"
    )


if __name__ == "__main__":
    main()
