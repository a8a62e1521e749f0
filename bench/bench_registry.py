"""Registry route queries per second beside the raw remoting round trip of the same process.

A registry runs in a subprocess with 10,000 topics on 4 master brokers (every topic on every
broker, so each route names 4 brokers); the client here sends GET_ROUTEINFO_BY_TOPIC for
topics in turn with 1 and with 64 requests in flight on one connection. The same registry
process also answers bench_remoting's echo code, measured by bench_remoting's own loop, so the
two rates differ only by the route handler.

    python -m bench registry [--seconds 3] [--topics 10000] [--brokers 4]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time

import trio

from bench.bench_remoting import ECHO, _measure, _pct


def serve() -> None:
    """Run a registry with the echo code added and print its port (child process entry)."""
    from actors.registry import Registry, RegistryConfig
    from protocol.command import RemotingCommand
    from protocol.connection import Connection

    def echo(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(ext_fields=request.ext_fields, body=request.body)

    async def main() -> None:
        config = RegistryConfig(
            listen_port=0,
            bind_address="127.0.0.1",
            kv_config_path=None,
            server_channel_max_idle_time_seconds=0,
        )
        registry = Registry(config)
        registry.dispatcher.register(ECHO, echo)
        async with trio.open_nursery() as nursery:
            await nursery.start(registry.run)
            print(registry.port, flush=True)

    trio.run(main)


async def _run(port: int, topics: int, brokers: int, seconds: float) -> dict[str, float]:
    from actors.registry.wire import DataVersion, TopicConfig, body_crc32, encode_register_body
    from protocol.client import RemotingClient
    from protocol.codes import RequestCode, ResponseCode
    from protocol.command import RemotingCommand

    address = f"127.0.0.1:{port}"
    names = [f"BenchTopic-{i:05d}" for i in range(topics)]
    table = [TopicConfig(topic_name=n, read_queue_nums=8, write_queue_nums=8) for n in names]
    results: dict[str, float] = {}
    # The brokers' connection stays open for the whole run: closing it would drop them.
    async with RemotingClient() as broker_client:
        started = time.perf_counter()
        for b in range(brokers):
            version = DataVersion(timestamp=int(time.time() * 1000), counter=1)
            body = encode_register_body(version, table)
            ext = {
                "brokerName": f"broker-{b}",
                "brokerAddr": f"10.0.0.{b + 1}:10911",
                "clusterName": "BenchCluster",
                "haServerAddr": f"10.0.0.{b + 1}:10912",
                "brokerId": "0",
                "bodyCrc32": str(body_crc32(body)),
            }
            reply = await broker_client.invoke(
                address, RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body), 30
            )
            assert reply.code == ResponseCode.SUCCESS, reply
        print(
            f"  registered {brokers} brokers x {topics:,} topics "
            f"in {time.perf_counter() - started:.2f}s"
        )
        async with RemotingClient() as client:
            first = await client.invoke(
                address,
                RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": names[0]}),
            )
            assert first.code == ResponseCode.SUCCESS and first.body
            print(f"  route body: {len(first.body)} bytes")
            for in_flight in (1, 64):
                raw, raw_lat = await _measure(port, in_flight, seconds)
                rate, lat = await _measure_routes(client, address, names, in_flight, seconds)
                results[f"raw{in_flight}"] = raw
                results[f"route{in_flight}"] = rate
                for label, value, latencies in (
                    ("echo (raw)", raw, raw_lat),
                    ("route query", rate, lat),
                ):
                    print(
                        f"  {label:12s} in-flight {in_flight:3d}: {value:10,.0f} /s   "
                        f"p50 {_pct(latencies, 0.5):6.0f} us  p99 {_pct(latencies, 0.99):6.0f} us"
                    )
                print(f"  route/raw at {in_flight} in flight: {rate / raw:.2f} (target >= 0.70)")
    return results


async def _measure_routes(
    client: object, address: str, names: list[str], in_flight: int, seconds: float
) -> tuple[float, list[float]]:
    from protocol.client import RemotingClient
    from protocol.codes import RequestCode
    from protocol.command import RemotingCommand

    assert isinstance(client, RemotingClient)
    latencies: list[float] = []
    count = 0
    deadline = trio.current_time() + seconds
    start = time.perf_counter()
    total = len(names)

    async def worker(offset: int) -> None:
        nonlocal count
        index = offset
        while trio.current_time() < deadline:
            request = RemotingCommand.request(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": names[index % total]}
            )
            t0 = time.perf_counter()
            await client.invoke(address, request)
            latencies.append(time.perf_counter() - t0)
            count += 1
            index += 97  # walk the topics: cold routes on the first pass, cached after

    async with trio.open_nursery() as nursery:
        for n in range(in_flight):
            nursery.start_soon(worker, n * (total // max(in_flight, 1)))
    return count / (time.perf_counter() - start), latencies


def main(argv: list[str] | None = None) -> None:
    """Print route-query and raw round-trip rates at 1 and 64 in flight."""
    parser = argparse.ArgumentParser(prog="bench registry")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--brokers", type=int, default=4)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve()
        return
    print(
        f"registry route queries: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cpus, python {platform.python_version()}, {args.seconds:g}s each"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.bench_registry", "--serve"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        trio.run(_run, port, args.topics, args.brokers, args.seconds)
    finally:
        proc.terminate()
        proc.wait(5)


if __name__ == "__main__":
    main()
