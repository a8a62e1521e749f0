"""`boltmq controller` in a subprocess: start line, a query, SIGTERM, exit 0; a bad key
refused at start with a line naming it.

Loopback only, port 0; every wait has a deadline.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import trio

from protocol.client import RemotingClient
from protocol.codes import RequestCode

from .helpers import call

ROOT = Path(__file__).resolve().parents[3]
READY = re.compile(r"controller ready: remoting 127\.0\.0\.1:(\d+)")


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "boltmq.cli", "controller", *args]


async def test_controller_command_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = await trio.lowlevel.open_process(
        _command("--listenPort", "0", "--scanNotActiveBrokerInterval", "1000"),
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    assert proc.stderr is not None
    lines: list[str] = []
    buffer = b""
    port = None
    try:
        with trio.fail_after(30):
            while port is None:
                chunk = await proc.stderr.receive_some(4096)
                assert chunk, f"the controller ended before it was ready: {lines}"
                buffer += chunk
                *done, buffer = buffer.split(b"\n")
                lines.extend(line.decode() for line in done)
                for line in lines:
                    if match := READY.search(line):
                        port = int(match.group(1))
        assert any("single controller (no Raft)" in line for line in lines)
        async with RemotingClient() as client:
            meta = await call(client, f"127.0.0.1:{port}", RequestCode.CONTROLLER_GET_METADATA_INFO)
            assert meta.field("isLeader") == "true"
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            while await proc.stderr.receive_some(4096):
                pass
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()


def test_a_bad_value_is_refused_naming_the_key(tmp_path: Path) -> None:
    conf = tmp_path / "controller.conf"
    conf.write_text("controllerDLegerPeers=n0-127.0.0.1:9880\ncontrollerDLegerSelfId=n7\n")
    done = subprocess.run(
        _command("-c", str(conf)),
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "controllerDLegerSelfId" in done.stderr
