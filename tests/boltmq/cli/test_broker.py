"""`boltmq broker` and `boltmq cluster` in a subprocess: start, serve, SIGTERM, exit 0.

Loopback only, ephemeral ports; every wait has a deadline.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import trio

from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.message import iter_records
from tests.actors.broker.helpers import pull_request, send_request

ROOT = Path(__file__).resolve().parents[3]
BROKER_READY = re.compile(r"broker (\S+) .* ready on ([\d.]+:\d+)")
REGISTRY_READY = re.compile(r"registry ready: tcp port (\d+)")


async def start(args: list[str], home: Path) -> tuple[trio.Process, list[str], dict[str, str]]:
    """Run ``boltmq <args>``; return once every ready line in ``wanted`` was logged."""
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT)}
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "boltmq.cli", *args],
        cwd=ROOT, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stderr is not None
    lines: list[str] = []
    found: dict[str, str] = {}
    buffer = b""
    with trio.fail_after(30):
        while "broker" not in found:
            chunk = await proc.stderr.receive_some(4096)
            assert chunk, f"the process ended before it was ready: {lines}"
            buffer += chunk
            *done, buffer = buffer.split(b"\n")
            for line in (raw.decode() for raw in done):
                lines.append(line)
                if match := BROKER_READY.search(line):
                    found["broker"] = match.group(2)
                if match := REGISTRY_READY.search(line):
                    found["registry"] = f"127.0.0.1:{match.group(1)}"
    return proc, lines, found


async def stop(proc: trio.Process, lines: list[str], sig: int = signal.SIGTERM) -> int:
    proc.send_signal(sig)
    assert proc.stderr is not None
    with trio.fail_after(20):
        while chunk := await proc.stderr.receive_some(4096):
            lines.extend(chunk.decode().splitlines())
        return await proc.wait()


async def test_broker_command_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# a broker.conf as RocketMQ operators write them\n"
        "brokerClusterName=TestCluster\nbrokerName=broker-t\nbrokerId=0\n"
        f"storePathRootDir={tmp_path / 'data'}\nlistenPort=1\nbindAddress=127.0.0.1\n"
        "flushDiskType=SYNC_FLUSH\nmapedFileSizeCommitLog=1048576\nnoSuchKey=1\n"
    )
    proc, lines, found = await start(
        ["broker", "-c", str(conf), "--listenPort", "0", "--fastPortEnable", "false"], tmp_path
    )
    assert any("unknown key 'noSuchKey'" in line for line in lines), lines
    async with RemotingClient() as client:
        with trio.fail_after(10):
            sent = await client.invoke(found["broker"], send_request("CliTopic", b"kept"))
            assert sent.code == ResponseCode.SUCCESS, sent.remark
    assert await stop(proc, lines) == 0, lines
    # Clean shutdown: no abort file, and the message is there after a restart.
    assert not (tmp_path / "data" / "abort").exists()
    assert (tmp_path / "data" / "commitlog" / "00000000000000000000").stat().st_size == 1048576
    proc, lines, found = await start(["broker", "-c", str(conf), "--listenPort", "0"], tmp_path)
    async with RemotingClient() as client:
        with trio.fail_after(10):
            pulled = await client.invoke(found["broker"], pull_request("CliTopic"))
    assert pulled.body is not None
    assert [r.body for r in iter_records(pulled.body)] == [b"kept"]
    assert await stop(proc, lines, signal.SIGINT) == 0, lines


async def test_bad_broker_config_is_refused_with_exit_2(tmp_path: Path) -> None:
    result = await trio.run_process(
        [sys.executable, "-m", "boltmq.cli", "broker", "--listenPort", "many"],
        cwd=ROOT, env={**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)},
        capture_stderr=True, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert b"listenPort" in result.stderr and b"many" in result.stderr


async def test_cluster_command_runs_registry_and_broker_under_home(tmp_path: Path) -> None:
    proc, lines, found = await start(
        ["cluster", "--registryPort", "0", "--listenPort", "0", "--bindAddress", "127.0.0.1"],
        tmp_path,
    )
    async with RemotingClient() as client:
        with trio.fail_after(10):
            info = await client.invoke(
                found["registry"], RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
            )
    assert info.body is not None
    brokers = orjson.loads(info.body)["brokerAddrTable"]
    assert brokers["broker-a"]["brokerAddrs"]["0"] == found["broker"]
    assert (tmp_path / "boltmq" / "store" / "commitlog").is_dir()
    assert await stop(proc, lines, signal.SIGINT) == 0, lines
    assert (tmp_path / "boltmq" / "store" / "config" / "topics.json").exists()


def test_the_default_cluster_turns_the_websocket_listeners_on() -> None:
    from boltmq.cli.broker import default_websocket_ports

    assert default_websocket_ports(9876, None) == (9877, 10913)
    assert default_websocket_ports(0, "0") == (0, 0)  # chosen ports choose their websockets
    assert default_websocket_ports(9876, "10921") == (9877, 0)


def listening_hosts(port: int) -> set[str]:
    """The IPv4 addresses a socket listens on at ``port``, from the kernel's table."""
    hosts = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, _, hex_port = local.partition(":")
        if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
            hosts.add(".".join(str(b) for b in reversed(bytes.fromhex(address))))
    return hosts


async def test_the_cluster_command_listens_on_loopback_unless_told(tmp_path: Path) -> None:
    for extra, expected in (([], "127.0.0.1"), (["--bindAddress", "0.0.0.0"], "0.0.0.0")):
        home = tmp_path / (expected or "default")
        proc, lines, found = await start(
            ["cluster", "--registryPort", "0", "--listenPort", "0", *extra], home
        )
        try:
            for address in (found["registry"], found["broker"]):
                assert listening_hosts(int(address.rpartition(":")[2])) == {expected}, address
        finally:
            assert await stop(proc, lines, signal.SIGINT) == 0, lines
