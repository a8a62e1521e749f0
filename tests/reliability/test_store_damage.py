"""A damaged commit log at a broker's restart.

A torn tail (the last record only half written when the process died) is truncated, and the
log says where; the broker serves everything before it and writes on from there. A flipped
byte in a record with valid records after it is corruption: the broker refuses to start, with
one line naming the file and the offset and what to do, and changes nothing on disk; once the
file is restored (here: the byte flipped back) it starts and serves every message.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from protocol import RemotingClient
from protocol.codes import ResponseCode
from protocol.message import decode_records
from tests.actors.broker.helpers import pull_request, send_request
from tests.reliability.nodes import Node, broker_node, call, max_offset, read_queue

pytestmark = pytest.mark.timeout(120)

TOPIC = "DamageTopic"
COUNT = 1200  # about 1.3 MiB: two commit-log files of 1 MiB


async def fill(broker: Node) -> list[tuple[int, int, int]]:
    """COUNT sends to queue 0..1; (queue id, queue offset, commit-log offset) of each."""
    placed = []
    async with RemotingClient() as client:
        for i in range(COUNT):
            request = send_request(TOPIC, f"m{i:05d}".encode() * 180, queue_id=i % 2)
            answer = await call(client, broker.address, request)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            fields = answer.ext_fields or {}
            physical = int(fields["msgId"][-16:], 16)
            placed.append((int(fields["queueId"]), int(fields["queueOffset"]), physical))
    return placed


def commit_log_file(broker: Node, offset: int) -> tuple[Path, int]:
    size = 1 << 20
    return broker.store / "commitlog" / f"{offset - offset % size:020d}", offset % size


def flip(path: Path, pos: int) -> None:
    with path.open("r+b") as f:
        f.seek(pos)
        byte = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([byte ^ 0x5A]))


def digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}


async def test_a_torn_tail_is_truncated_reported_and_written_over(tmp_path: Path) -> None:
    broker = broker_node(tmp_path, "broker", "", flushDiskType="SYNC_FLUSH")
    await broker.start()
    try:
        placed = await fill(broker)
        await broker.kill()
        # The last record reached the disk only in part.
        queue_id, queue_offset, physical = placed[-1]
        path, pos = commit_log_file(broker, physical)
        with path.open("r+b") as f:
            f.seek(pos + 300)
            f.write(bytes(700))
        await broker.start()
        assert f"torn tail at offset {physical}" in broker.log_text()
        async with RemotingClient() as client:
            assert await max_offset(client, broker.address, TOPIC, queue_id) == queue_offset
            messages = await read_queue(client, broker.address, TOPIC, queue_id)
            assert len(messages) == queue_offset
            assert messages[-1].commit_log_offset == placed[-3][2]
            request = send_request(TOPIC, b"after the tear", queue_id=queue_id)
            answer = await call(client, broker.address, request)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            fields = answer.ext_fields or {}
            assert int(fields["queueOffset"]) == queue_offset
            assert int(fields["msgId"][-16:], 16) == physical  # written over the torn bytes
    finally:
        await broker.stop()


@pytest.mark.parametrize("where", ["body", "header"])
async def test_a_flipped_byte_in_the_middle_stops_the_start_with_its_offset(
    tmp_path: Path, where: str
) -> None:
    broker = broker_node(tmp_path, "broker", "")
    await broker.start()
    try:
        placed = await fill(broker)
        await broker.stop()  # a clean stop: recovery checks the last three files
        _, _, physical = placed[COUNT // 3]
        path, pos = commit_log_file(broker, physical)
        where_in_record = {"body": 400, "header": 1}[where]  # the size field's high byte
        flip(path, pos + where_in_record)
        before = digest(broker.store / "commitlog")
        broker.launch()
        code = await broker.wait_exit(60)
        assert code == 1
        text = broker.log_text()
        [line] = [line for line in text.splitlines() if "CRITICAL" in line]
        assert f"corrupt store file {path} at offset {physical}" in line
        assert "restore the file" in line
        assert "Traceback" not in text
        assert digest(broker.store / "commitlog") == before  # nothing changed on disk
        # The operator restores the file; the broker starts and serves every message.
        flip(path, pos + where_in_record)
        await broker.start()
        async with RemotingClient() as client:
            for queue_id in (0, 1):
                messages = await read_queue(client, broker.address, TOPIC, queue_id)
                assert [m.commit_log_offset for m in messages] == [
                    p for q, _, p in placed if q == queue_id
                ]
            request = send_request(TOPIC, b"after the repair")
            answer = await call(client, broker.address, request)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            answer = await call(client, broker.address, pull_request(TOPIC, COUNT // 2))
            assert decode_records(answer.body or b"")[0].body == b"after the repair"
    finally:
        await broker.stop()
