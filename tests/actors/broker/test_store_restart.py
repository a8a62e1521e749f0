"""The broker's store restarts after its writer failed, and recovers from its files.

A failed flush (an fdatasync error) ends the store writer on purpose; the broker's supervisor
then restarts the store, which must rebuild its commit log, consume queues and index from the
files (the crashed instance's maps are released), serve every acknowledged message again and
take new sends.

Loopback only, ephemeral ports, a real store in ``tmp_path``, a deadline on every wait; the
fault is one injected EIO from the commit log's flush.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path
from typing import Any

import pytest
import trio

import boltmq
from boltmq import EmbeddedCluster
from protocol import RemotingClient, ResponseCode
from protocol.message import iter_records
from storage import FlushDiskType
from storage import mapped_file as mapped_file_module
from storage.commit_log import CommitLog, FlushPlan
from storage.flush_thread import ChildFlusher, NogilFlusher
from supervisors.supervisor import ChildState
from tests.actors.broker.helpers import SMALL_FILES, call, pull_request, send_request
from tests.compiled import needs_compiled

TOPIC = "RestartTopic"
ACKED = 40


class FlushFault:
    """Makes the commit log's next flush raise EIO once armed (either flusher's path); with
    ``at="fdatasync"``, the fdatasync call itself fails, as a failing disk's would."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, at: str = "flush") -> None:
        self.armed = False
        self.raised = 0
        if at == "fdatasync":
            fdatasync = mapped_file_module._fdatasync

            def failing_fdatasync(fd: int) -> None:
                self._maybe_raise()
                fdatasync(fd)

            monkeypatch.setattr(mapped_file_module, "_fdatasync", failing_fdatasync)
            return
        flush, flush_done = CommitLog.flush, CommitLog.flush_done

        def failing_flush(commit_log: CommitLog) -> int:
            self._maybe_raise()
            return flush(commit_log)

        def failing_flush_done(commit_log: CommitLog, plan: FlushPlan, errors: list[int]) -> int:
            self._maybe_raise()
            return flush_done(commit_log, plan, errors)

        monkeypatch.setattr(CommitLog, "flush", failing_flush)
        monkeypatch.setattr(CommitLog, "flush_done", failing_flush_done)

    def _maybe_raise(self) -> None:
        if self.armed:
            self.armed = False
            self.raised += 1
            raise OSError(errno.EIO, "Input/output error (injected)")


async def wait_store_restarted(cluster: EmbeddedCluster) -> None:
    """Until the broker's store child has restarted once and takes puts again."""
    broker = cluster.broker
    assert broker.supervisor is not None
    while True:
        (child,) = [c for c in broker.supervisor.statistics().children if c.name == "store"]
        if (
            child.restarts >= 1
            and child.state is ChildState.RUNNING
            and broker.store.statistics().running
        ):
            return
        await trio.sleep(0.02)


def store_lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "boltmq.storage" and r.levelno == level
    ]


@pytest.mark.parametrize(
    ("flush_disk_type", "flusher", "fault_at"),
    [
        (FlushDiskType.SYNC_FLUSH, "thread", "flush"),
        (FlushDiskType.SYNC_FLUSH, "child", "flush"),
        # The disk's own EIO: once taken for a flush (the send answered OK), now the writer's.
        (FlushDiskType.SYNC_FLUSH, "thread", "fdatasync"),
        pytest.param(FlushDiskType.SYNC_FLUSH, "nogil", "flush", marks=needs_compiled),
        (FlushDiskType.ASYNC_FLUSH, "thread", "flush"),
    ],
)
async def test_store_restarted_after_a_failed_flush_serves_every_acknowledged_message(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    flush_disk_type: FlushDiskType,
    flusher: str,
    fault_at: str,
) -> None:
    if flusher != "nogil":
        monkeypatch.setattr(NogilFlusher, "available", staticmethod(lambda: False))
    if flusher == "thread":
        monkeypatch.setattr(ChildFlusher, "unavailable", staticmethod(lambda: "chosen by the test"))
    fault = FlushFault(monkeypatch, fault_at)
    caplog.set_level(logging.INFO, logger="boltmq")
    settings: dict[str, Any] = {
        **SMALL_FILES,
        "flush_disk_type": flush_disk_type,
        # ASYNC_FLUSH: the periodic flush meets the fault soon after it is armed.
        "flush_interval_commit_log": 50,
    }
    async with boltmq.embedded(tmp_path, **settings) as cluster, RemotingClient() as client:
        address = cluster.broker_address
        acked: list[bytes] = []
        with trio.fail_after(60):
            for n in range(ACKED):
                body = f"acked-{n:03d}-".encode() * 30
                request = send_request(TOPIC, body, properties={"KEYS": f"key-{n}"})
                answer = await call(client, address, request)
                assert answer.code == ResponseCode.SUCCESS, answer.remark
                acked.append(body)

            fault.armed = True
            # SYNC_FLUSH: this send's group commit flush meets the fault (its answer is not
            # acknowledged: FLUSH_DISK_TIMEOUT or, once the store is down, refused).
            # ASYNC_FLUSH: the periodic flush does.
            answer = await call(client, address, send_request(TOPIC, b"during the fault"))
            assert (
                answer.code != ResponseCode.SUCCESS or flush_disk_type is FlushDiskType.ASYNC_FLUSH
            )
            await wait_store_restarted(cluster)
            assert fault.raised == 1

            pulled: list[bytes] = []
            while True:
                answer = await call(client, address, pull_request(TOPIC, len(pulled)))
                if answer.code != ResponseCode.SUCCESS:
                    break
                assert answer.body is not None
                pulled.extend(r.body for r in iter_records(answer.body))
            # Every acknowledged message, in order; the one sent into the fault may follow
            # (it was appended; only its flush failed).
            assert pulled[:ACKED] == acked
            assert len(pulled) <= ACKED + 1
            # The index too is the files' (a lookup by key reads the reloaded index files).
            for n in (0, ACKED - 1):
                found = cluster.broker.store.query_message(TOPIC, f"key-{n}", 4, 0, 1 << 62)
                assert [r.body for r in iter_records(b"".join(found.buffers))] == [acked[n]]

            answer = await call(client, address, send_request(TOPIC, b"after the restart"))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            answer = await call(client, address, pull_request(TOPIC, len(pulled)))
            assert answer.code == ResponseCode.SUCCESS
            assert answer.body is not None
            assert [r.body for r in iter_records(answer.body)] == [b"after the restart"]

    # One line for the stop, one for the recovery, each naming the store and the error.
    root = str(tmp_path)
    (stopped,) = store_lines(caplog, logging.ERROR)
    assert "stopped: OSError: [Errno 5]" in stopped and root in stopped
    recovered = [line for line in store_lines(caplog, logging.WARNING) if "recovered" in line]
    assert len(recovered) == 1 and root in recovered[0] and "sends are stored again" in recovered[0]
