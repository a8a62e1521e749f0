"""`boltmq registry` in a subprocess: start, query, SIGTERM, exit 0.

Loopback only, port 0; every wait has a deadline.
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

from protocol.client import RemotingClient
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from tests.actors.registry.helpers import register_request, topics

ROOT = Path(__file__).resolve().parents[3]
READY = re.compile(r"registry ready: tcp port (\d+)(?:, websocket port (\d+))?")


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "boltmq.cli", *args]


async def _start(args: list[str], home: Path) -> tuple[trio.Process, int, int | None, list[str]]:
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT)}
    proc = await trio.lowlevel.open_process(
        _command(*args), cwd=ROOT, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL
    )
    assert proc.stderr is not None
    lines: list[str] = []
    buffer = b""
    with trio.fail_after(20):
        while True:
            chunk = await proc.stderr.receive_some(4096)
            assert chunk, f"process ended before it was ready: {lines}"
            buffer += chunk
            *done, buffer = buffer.split(b"\n")
            lines.extend(line.decode() for line in done)
            for line in lines:
                match = READY.search(line)
                if match:
                    ws = int(match.group(2)) if match.group(2) else None
                    return proc, int(match.group(1)), ws, lines


async def _drain(proc: trio.Process, lines: list[str]) -> None:
    assert proc.stderr is not None
    while chunk := await proc.stderr.receive_some(4096):
        lines.extend(chunk.decode().splitlines())


async def test_registry_command_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.conf"
    conf.write_text(
        "# registry test\n"
        f"kvConfigPath={tmp_path / 'kv' / 'kvConfig.json'}\n"
        "bindAddress=127.0.0.1\nlistenPort=1\n"
    )
    proc, port, ws_port, lines = await _start(
        ["registry", "-c", str(conf), "--listenPort", "0", "--websocketListenPort", "0"], tmp_path
    )
    assert ws_port is None
    async with RemotingClient() as client:
        address = f"127.0.0.1:{port}"
        with trio.fail_after(5):
            await client.invoke(
                address, register_request("broker-a", 0, "10.0.0.1:10911", topics(("T", 4)))
            )
            put = RemotingCommand.request(
                RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k", "value": "v"}
            )
            assert (await client.invoke(address, put)).code == ResponseCode.SUCCESS
            response = await client.invoke(
                address, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
            )
    assert response.code == ResponseCode.SUCCESS
    assert orjson.loads(response.body or b"")["queueDatas"][0]["brokerName"] == "broker-a"
    assert (tmp_path / "kv" / "kvConfig.json").exists()
    proc.send_signal(signal.SIGTERM)
    with trio.fail_after(10):
        await _drain(proc, lines)
        status = await proc.wait()
    assert status == 0, lines
    assert any("SIGTERM" in line for line in lines)


async def test_bad_kv_file_fails_the_start_with_its_name(tmp_path: Path) -> None:
    kv = tmp_path / "kvConfig.json"
    kv.write_bytes(b"{oops")
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    with trio.fail_after(20):
        result = await trio.run_process(
            _command("registry", "--listenPort", "0", "--kvConfigPath", str(kv)),
            cwd=ROOT,
            env=env,
            capture_stderr=True,
            check=False,
        )
    assert result.returncode == 1
    assert str(kv) in result.stderr.decode()
    assert kv.read_bytes() == b"{oops"
