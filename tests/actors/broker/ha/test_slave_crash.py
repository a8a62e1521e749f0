"""A slave process killed with SIGKILL mid-stream resumes from its own max offset.

The master runs in-process; the slave is ``boltmq broker`` in a subprocess with
``haMasterAddress``. Sends go on while the slave is killed and restarted; at the end the
slave's commit-log files hold exactly the master's bytes. Loopback only; deadlines everywhere.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import trio

from actors.broker.broker import Broker, open_broker
from protocol import RemotingClient, ResponseCode
from storage import BrokerRole
from tests.actors.broker.ha.helpers import (
    COMMIT_LOG_FILE,
    broker_config,
    commit_log_bytes,
    master_service,
    wait_for,
)
from tests.actors.broker.helpers import call, send_request

ROOT = Path(__file__).resolve().parents[4]
BROKER_READY = re.compile(r"broker (\S+) .* ready on ([\d.]+:\d+)")


async def start_slave(store: Path, master_ha: str) -> tuple[trio.Process, list[str]]:
    """``boltmq broker`` as a slave of ``master_ha``; returns once it is ready."""
    args = [
        "broker", "--brokerRole", "SLAVE", "--brokerId", "1", "--listenPort", "0",
        "--fastPortEnable", "false", "--bindAddress", "127.0.0.1",
        "--storePathRootDir", str(store), "--mapedFileSizeCommitLog", str(COMMIT_LOG_FILE),
        "--haMasterAddress", master_ha,
    ]  # fmt: skip
    env = {**os.environ, "HOME": str(store.parent), "PYTHONPATH": str(ROOT)}
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "boltmq.cli", *args],
        cwd=ROOT, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stderr is not None
    lines: list[str] = []
    buffer = b""
    with trio.fail_after(30):
        while not any(BROKER_READY.search(line) for line in lines):
            chunk = await proc.stderr.receive_some(4096)
            assert chunk, f"the slave ended before it was ready: {lines}"
            buffer += chunk
            *done, buffer = buffer.split(b"\n")
            lines.extend(raw.decode() for raw in done)
    return proc, lines


async def drain(proc: trio.Process) -> None:
    """Read the process's stderr to its end (so it never blocks on a full pipe)."""
    assert proc.stderr is not None
    while await proc.stderr.receive_some(65536):
        pass


def acked(master: Broker) -> int:
    """The best offset a slave acknowledged (-1 with no slave)."""
    return max((c.acked_offset for c in master_service(master).connections.values()), default=-1)


def files_bytes(commit_log_dir: Path, length: int) -> bytes:
    """The first ``length`` bytes of a commit log, read from its files."""
    data = b"".join(path.read_bytes() for path in sorted(commit_log_dir.iterdir()))
    return data[:length]


async def test_slave_killed_mid_stream_resumes(tmp_path: Path) -> None:
    config = broker_config(tmp_path / "master", "", BrokerRole.ASYNC_MASTER)
    slave_store = tmp_path / "slave"
    async with open_broker(config) as master, RemotingClient() as client:
        sent = 0
        stop_sending = trio.Event()

        stopped = trio.Event()

        async def keep_sending() -> None:
            nonlocal sent
            while not stop_sending.is_set():
                body = f"m-{sent:06d}-".encode() + b"x" * 900
                response = await call(client, master.address, send_request("Crash", body))
                assert response.code == ResponseCode.SUCCESS
                sent += 1
                await trio.sleep(0.001)
            stopped.set()

        async with trio.open_nursery() as nursery:
            proc, _ = await start_slave(slave_store, master.config.ha_addr)
            nursery.start_soon(drain, proc)
            nursery.start_soon(keep_sending)
            # Mid-stream: the slave has some data, the master keeps writing.
            await wait_for(lambda: acked(master) > COMMIT_LOG_FILE, timeout=30)
            proc.send_signal(signal.SIGKILL)
            with trio.fail_after(10):
                assert await proc.wait() == -signal.SIGKILL
            killed_at = master.store.get_max_phy_offset()
            await wait_for(lambda: master.store.get_max_phy_offset() > killed_at + COMMIT_LOG_FILE)

            proc, _ = await start_slave(slave_store, master.config.ha_addr)
            nursery.start_soon(drain, proc)
            await wait_for(lambda: acked(master) > killed_at + COMMIT_LOG_FILE, timeout=30)
            stop_sending.set()
            with trio.fail_after(10):
                await stopped.wait()
            end = master.store.get_max_phy_offset()
            await wait_for(lambda: acked(master) == end, timeout=30)
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(20):
                assert await proc.wait() == 0
        assert sent > 100
        assert files_bytes(slave_store / "commitlog", end) == commit_log_bytes(master.store)
