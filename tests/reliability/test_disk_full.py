"""A broker whose disk fills: an 8 MiB tmpfs the test mounts (root only; skipped otherwise).

Sends are refused with SERVICE_NOT_AVAILABLE and a remark saying the disk is full (before,
the first write into a sparse page with no space left killed the broker with SIGBUS); the
broker logs it once; nothing acknowledged is lost and no record is damaged; when space is
freed, sends are stored again at once, without a restart, at the next dense queue offset.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol import RemotingClient
from protocol.codes import ResponseCode
from tests.actors.broker.helpers import send_request
from tests.reliability.nodes import broker_node, call, read_queue

pytestmark = pytest.mark.timeout(120)

TOPIC = "FullTopic"
BODY = 2048


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs mounted at ``tmp_path/disk``, always unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip(f"mounting a tmpfs needs root; this test runs as uid {os.geteuid()}")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


async def test_a_full_disk_refuses_sends_and_they_resume_when_space_returns(
    small_disk: Path,
) -> None:
    # Ballast the test frees later to give the broker room again.
    ballast = small_disk / "ballast"
    ballast.write_bytes(bytes(2 << 20))
    broker = broker_node(small_disk, "broker", "", flushDiskType="SYNC_FLUSH")
    broker.log_path = small_disk.parent / "broker.log"  # the log must not fill the disk
    await broker.start()
    acked: dict[int, list[int]] = {0: [], 1: []}
    try:
        async with RemotingClient() as client:
            refusal = None
            for i in range(10_000):
                request = send_request(TOPIC, bytes([i % 251]) * BODY, queue_id=i % 2)
                answer = await call(client, broker.address, request)
                if answer.code != ResponseCode.SUCCESS:
                    refusal = answer
                    break
                acked[i % 2].append(int((answer.ext_fields or {})["queueOffset"]))
            assert refusal is not None, "the disk never filled"
            assert refusal.code == ResponseCode.SERVICE_NOT_AVAILABLE, refusal.remark
            assert "disk is full" in (refusal.remark or "")
            # More sends: refused the same way, and the broker stays up.
            for _ in range(50):
                answer = await call(client, broker.address, send_request(TOPIC, b"x" * BODY))
                assert answer.code == ResponseCode.SERVICE_NOT_AVAILABLE, answer.remark
            assert broker.process is not None and broker.process.poll() is None
            assert broker.log_text().count("the disk is full") == 1
            # Space returns: sends are stored again, at once, at the next queue offsets.
            ballast.unlink()
            for i in range(20):
                request = send_request(TOPIC, b"y" * BODY, queue_id=i % 2)
                answer = await call(client, broker.address, request)
                assert answer.code == ResponseCode.SUCCESS, answer.remark
                acked[i % 2].append(int((answer.ext_fields or {})["queueOffset"]))
            assert "disk space is back" in broker.log_text()
            for queue_id in (0, 1):
                assert acked[queue_id] == list(range(len(acked[queue_id])))
                messages = await read_queue(client, broker.address, TOPIC, queue_id)
                assert len(messages) == len(acked[queue_id])
        # A restart finds every record whole (recovery checks each one's CRC).
        await broker.stop()
        await broker.start()
        assert "torn tail" not in broker.log_text()
        async with RemotingClient() as client:
            for queue_id in (0, 1):
                messages = await read_queue(client, broker.address, TOPIC, queue_id)
                assert [m.queue_offset for m in messages] == acked[queue_id]
            # The disk is nearly full still: what the restart found written needs no new room.
            answer = await call(client, broker.address, send_request(TOPIC, b"z", queue_id=0))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            assert int((answer.ext_fields or {})["queueOffset"]) == len(acked[0])
    finally:
        await broker.stop()
