"""SYNC_FLUSH with the flush in a thread of its own, overlapping the next appends.

The durable offset is taken around the commit log's flush itself (what the commit log held
just before each flush began, noted once it returned), not from the store's own bookkeeping:
a put answered before a flush that started after its append shows up as an answer beyond it.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import re
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest
import trio
import trio.testing

from storage import (
    FlushDiskType,
    MessageExtBrokerInner,
    MessageStoreConfig,
    PutMessageResult,
    PutMessageStatus,
    open_message_store,
    store_writer,
)
from storage.commit_log import CommitLog, FlushPlan
from storage.flush_thread import (
    ChildFlusher,
    Flusher,
    FlushThread,
    NogilFlusher,
    flush_loop_py,
    make_flusher,
)
from storage.mapped_file import MappedFile
from storage.results import MessageBatch
from tests.compiled import needs_compiled

MakeConfig = Callable[..., MessageStoreConfig]
Answer = Callable[[PutMessageResult], None]


def message(sender: int, n: int) -> MessageExtBrokerInner:
    return MessageExtBrokerInner(
        topic="FlushTopic",
        body=f"{sender}-{n}".encode() * 40,
        queue_id=sender % 4,
        properties={"TAGS": "T", "UNIQ_KEY": f"U{sender:04d}{n:06d}"},
    )


def batch(sender: int, n: int, size: int = 8) -> MessageBatch:
    body = f"b{sender}-{n}".encode() * 40
    return MessageBatch(topic="FlushTopic", queue_id=sender % 4, elements=[(0, body, "")] * size)


FLUSHERS = ["thread", "child", pytest.param("nogil", marks=needs_compiled)]


def thread_flusher(commit_log: CommitLog) -> FlushThread:
    return FlushThread(commit_log.flush)


#: Each flusher `store_writer.make_flusher` may choose, by the name of a FLUSHERS param.
MAKERS: dict[str, Callable[[CommitLog], Flusher]] = {
    "thread": thread_flusher,
    "child": ChildFlusher,
    "nogil": NogilFlusher,
}


@pytest.mark.parametrize("flusher", FLUSHERS)
async def test_puts_appended_while_a_flush_runs_are_answered_only_after_a_later_flush(
    make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch, flusher: str
) -> None:
    config = make_config(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    real_flush = CommitLog.flush
    real_plan = CommitLog.flush_plan
    real_done = CommitLog.flush_done
    lock = threading.Lock()
    durable = [0]  # commit-log offset every byte below which a finished flush covered
    grew_during_flush = [0]  # flushes during which more was appended
    completed = [0]  # plans completed (the compiled flusher's flushes)
    planned: dict[int, int] = {}  # id of a plan -> the commit log's end when it was made

    def slow_flush(commit_log: CommitLog) -> int:
        at_call = commit_log.max_offset  # read before the flush reads its own target
        time.sleep(0.002)  # a slow disk: the next puts are appended meanwhile
        flushed = real_flush(commit_log)
        with lock:
            durable[0] = max(durable[0], at_call)
            if commit_log.max_offset > at_call:
                grew_during_flush[0] += 1
        return flushed

    def noted_plan(commit_log: CommitLog) -> FlushPlan | None:
        at_call = commit_log.max_offset  # the descriptors are sent only after this
        plan = real_plan(commit_log)
        if plan is not None:
            planned[id(plan)] = at_call
        return plan

    def noted_done(commit_log: CommitLog, plan: FlushPlan, errors: list[int]) -> int:
        at_call = planned.pop(id(plan))
        with lock:
            completed[0] += 1
            durable[0] = max(durable[0], at_call)
            if commit_log.max_offset > at_call:
                grew_during_flush[0] += 1
        return real_done(commit_log, plan, errors)

    def slow_nogil(commit_log: CommitLog) -> NogilFlusher:
        return NogilFlusher(commit_log, delay_ns=2_000_000)  # a slow disk, in the C loop

    def slow_child(commit_log: CommitLog) -> ChildFlusher:
        return ChildFlusher(commit_log, delay_ns=2_000_000)  # a slow disk, in the process

    real_appended = store_writer.StoreWriter.appended_batch
    early = [0]  # flushes a batch put started itself

    def noted_appended(writer: store_writer.StoreWriter) -> None:
        idle = writer._flushing is None
        real_appended(writer)
        early[0] += idle and writer._flushing is not None

    monkeypatch.setattr(store_writer.StoreWriter, "appended_batch", noted_appended)
    monkeypatch.setattr(CommitLog, "flush", slow_flush)
    if flusher == "thread":
        monkeypatch.setattr(store_writer, "make_flusher", thread_flusher)
    else:
        monkeypatch.setattr(CommitLog, "flush_plan", noted_plan)
        monkeypatch.setattr(CommitLog, "flush_done", noted_done)
        make = slow_nogil if flusher == "nogil" else slow_child
        monkeypatch.setattr(store_writer, "make_flusher", make)
    async with open_message_store(config) as store:
        answers: list[tuple[PutMessageResult, bool]] = []

        def note(result: PutMessageResult) -> None:
            end = result.wrote_offset + result.wrote_bytes
            with lock:
                answers.append((result, end <= durable[0]))

        async def awaited_sender(sender: int) -> None:
            for n in range(40):
                note(await store.put_message(message(sender, n)))

        async def batch_sender(sender: int) -> None:
            for n in range(20):
                note(await store.put_messages(batch(sender, n)))

        async def streaming(puts: list[Callable[[Answer], None]]) -> None:
            # Sends without waiting for answers, so puts arrive while a flush runs.
            answered = trio.Semaphore(0)

            def callback(result: PutMessageResult) -> None:
                note(result)
                answered.release()

            for put in puts:
                put(callback)
                await trio.sleep(0.0005)
            for _ in puts:
                await answered.acquire()

        async def streaming_sender(sender: int) -> None:
            await streaming([
                functools.partial(store.put_message_nowait, message(sender, n))
                for n in range(40)
            ])  # fmt: skip

        async def streaming_batch_sender(sender: int) -> None:
            # The broker's batch path: big enough for the put to start a flush itself.
            await streaming([
                functools.partial(store.put_messages_nowait, batch(sender, n, size=24))
                for n in range(10)
            ])  # fmt: skip

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for sender in range(8):
                    nursery.start_soon(awaited_sender, sender)
                for sender in range(8, 12):
                    nursery.start_soon(batch_sender, sender)
                for sender in range(12, 20):
                    nursery.start_soon(streaming_sender, sender)
                for sender in range(20, 24):
                    nursery.start_soon(streaming_batch_sender, sender)
        flushes = store.statistics().flushes

    assert len(answers) == 8 * 40 + 4 * 20 + 8 * 40 + 4 * 10
    assert early[0] > 0, "no batch put started a flush itself"
    assert all(result.status is PutMessageStatus.PUT_OK for result, _ in answers)
    late = [result.wrote_offset for result, covered in answers if not covered]
    assert not late, f"{len(late)} puts answered before an fdatasync covered them"
    assert grew_during_flush[0] > 0, "no put was appended while a flush ran"
    assert flushes < len(answers)
    assert (completed[0] > 0) == (flusher != "thread")


@pytest.mark.parametrize("flusher", FLUSHERS)
async def test_a_lone_batch_that_starts_its_own_flush_is_answered(
    make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch, flusher: str
) -> None:
    # Nothing else arrives to wake the group commit service: it must still see the flush the
    # batch put started and answer it.
    monkeypatch.setattr(store_writer, "make_flusher", MAKERS[flusher])
    config = make_config(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    big = MessageBatch(topic="FlushTopic", queue_id=0, elements=[(0, b"x" * 1024, "")] * 24)
    assert store_writer.EARLY_FLUSH_BYTES <= 24 * 1024
    results: list[PutMessageResult] = []
    async with open_message_store(config) as store:
        for round_ in range(3):
            await trio.testing.wait_all_tasks_blocked()  # the service waits for work
            store.put_messages_nowait(big, results.append)
            with trio.fail_after(10):
                while len(results) <= round_:
                    await trio.sleep(0.005)
            assert results[round_].status is PutMessageStatus.PUT_OK
            assert results[round_].queue_offset == round_ * 24
        assert store.commit_log.flushed_offset == store.commit_log.max_offset


async def test_the_flush_thread_hands_back_a_flush_error_and_keeps_serving() -> None:
    calls: list[int] = []

    def flush() -> None:
        calls.append(threading.get_ident())
        if len(calls) == 1:
            raise OSError(5, "Input/output error")

    flusher = FlushThread(flush)
    flusher.start()
    try:
        with trio.fail_after(10):
            with pytest.raises(OSError, match="Input/output error"):
                await flusher.flush_once()
            await flusher.flush_once()
    finally:
        flusher.stop()
    assert len(calls) == 2
    assert calls[0] == calls[1] != threading.get_ident()  # one thread, not the trio thread
    with pytest.raises(RuntimeError, match="not running"):
        flusher.request()


async def test_a_request_made_while_a_flush_runs_waits_for_the_next_flush() -> None:
    started = threading.Event()
    release = threading.Event()
    flushes = [0]

    def flush() -> None:
        flushes[0] += 1
        if flushes[0] == 1:
            started.set()
            release.wait(10)

    flusher = FlushThread(flush)
    flusher.start()
    try:
        with trio.fail_after(10):
            first = flusher.request()
            await trio.to_thread.run_sync(started.wait, 10)
            second = flusher.request()  # the first flush has begun: it cannot cover this one
            release.set()
            await FlushThread.wait(first)
            assert flushes[0] >= 1
            await FlushThread.wait(second)
            assert flushes[0] == 2
    finally:
        flusher.stop()


def run_loop(loop: Callable[[int, int, int], int], fds: list[int]) -> tuple[int, list[int]]:
    """Feed ``fds`` and a stop request to ``loop`` in a thread; its count and answers."""
    request_read, request_write = os.pipe()
    done_read, done_write = os.pipe()
    served: list[int] = []
    thread = threading.Thread(target=lambda: served.append(loop(request_read, done_write, 0)))
    thread.start()
    try:
        os.write(request_write, b"".join(struct.pack("=q", fd) for fd in [*fds, -1]))
        thread.join(30)
        assert not thread.is_alive()
        answers = os.read(done_read, 8 * (len(fds) + 1))
    finally:
        for fd in (request_read, request_write, done_read, done_write):
            os.close(fd)
    return served[0], [answer for (answer,) in struct.iter_unpack("=q", answers)]


@needs_compiled
def test_the_compiled_flush_loop_answers_as_its_pure_twin(tmp_path: Path) -> None:
    from protocol._speedups import flush_loop

    fd = os.open(tmp_path / "file", os.O_RDWR | os.O_CREAT, 0o644)
    closed = 1_000_000  # no such descriptor (a closed one's number may be reused below)
    read_end, write_end = os.pipe()  # fdatasync of a pipe: EINVAL
    try:
        os.write(fd, b"x" * 5000)
        fds = [fd, closed, read_end, fd]
        pure = run_loop(flush_loop_py, fds)
        compiled = run_loop(flush_loop, fds)
    finally:
        for each in (fd, read_end, write_end):
            os.close(each)
    assert compiled == pure == (4, [0, errno.EBADF, errno.EINVAL, 0])


@pytest.mark.parametrize("loop", [pytest.param("compiled", marks=needs_compiled), "pure", "child"])
async def test_the_nogil_flusher_syncs_both_files_of_a_roll_over_and_skips_a_destroyed_one(
    make_config: MakeConfig, loop: str
) -> None:
    config = make_config(flush_disk_type=FlushDiskType.SYNC_FLUSH, mapped_file_size_commit_log=4096)
    async with open_message_store(config) as store:
        commit_log = store.commit_log
        flusher = ChildFlusher(commit_log) if loop == "child" else NogilFlusher(commit_log)
        flusher.start(flush_loop_py if loop == "pure" else None)
        try:
            with trio.fail_after(30):
                while len(commit_log.files.files) < 3:
                    result = await store.put_message(message(1, len(commit_log.files.files)))
                    assert result.status is PutMessageStatus.PUT_OK
                # Unflushed bytes in the last two files (a roll-over between flushes).
                commit_log.flushed_offset = commit_log.files.files[-2].file_from_offset
                for mapped in commit_log.files.files[-2:]:
                    mapped.flushed_position = 0
                plan = commit_log.flush_plan()
                assert plan is not None
                assert [mapped for mapped, _fd, _t in plan.files] == commit_log.files.files[-2:]
                await flusher.request().wait()
                assert commit_log.flushed_offset == commit_log.max_offset
                last = commit_log.files.files[-1]
                assert last.flushed_position == last.wrote_position
                # A file closed after the plan (destroyed by retention): skipped, no error.
                closed = os.dup(last.sync_fd or 0)
                os.close(closed)
                last.flushed_position = 0
                stale = FlushPlan(commit_log.max_offset, 0, [(last, closed, last.wrote_position)])
                commit_log.flush_plan = lambda: stale  # type: ignore[method-assign]
                await flusher.request().wait()
                assert last.flushed_position == 0
                assert commit_log.flushed_offset == commit_log.max_offset
        finally:
            flusher.stop()
        with pytest.raises(RuntimeError, match="not running"):
            flusher.request()


@pytest.mark.parametrize("flusher", FLUSHERS[1:])
async def test_a_flush_slower_than_the_timeout_answers_flush_disk_timeout_and_closes(
    make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch, flusher: str
) -> None:
    config = make_config(flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=20)

    def slow(commit_log: CommitLog) -> NogilFlusher:
        return (ChildFlusher if flusher == "child" else NogilFlusher)(commit_log, 150_000_000)

    monkeypatch.setattr(store_writer, "make_flusher", slow)
    with trio.fail_after(60):
        async with open_message_store(config) as store:
            commit_log = store.commit_log
            statuses = [(await store.put_message(message(1, n))).status for n in range(3)]
            assert store._writer is not None
            timeouts = store._writer.statistics().flush_timeouts
        # Closing does not wait for the fdatasyncs still queued; shutdown flushes the rest.
        assert commit_log.flushed_offset == commit_log.max_offset
    assert statuses == [PutMessageStatus.FLUSH_DISK_TIMEOUT] * 3
    assert timeouts == 3


# -- the flush process (the pure path's flusher) -------------------------------------------


class PlannedLog:
    """A commit log's flush side only: each plan syncs ``fds``; the answers are noted."""

    def __init__(self, fds: list[int]) -> None:
        self.fds = fds
        self.done: list[list[int]] = []
        self.flushes = 0

    def flush_plan(self) -> FlushPlan:
        return FlushPlan(0, 0, [(cast(MappedFile, None), fd, 1) for fd in self.fds])

    def flush_done(self, plan: FlushPlan, errors: list[int]) -> int:
        self.done.append(errors)
        return 0

    def flush(self) -> int:
        self.flushes += 1
        return 0


def gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (reaped, or a zombie no one has reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def wait_reaped(pid: int, timeout: float = 30) -> None:
    """Until ``pid`` (a child of this process) is reaped: no zombie is left behind."""
    with trio.fail_after(timeout):
        while os.path.exists(f"/proc/{pid}"):
            await trio.sleep(0.01)


async def test_the_flush_process_answers_as_the_flush_loop_and_is_reaped(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "file", os.O_RDWR | os.O_CREAT, 0o644)
    closed = 1_000_000  # no such descriptor: it cannot be passed, answered EBADF
    read_end, write_end = os.pipe()  # fdatasync of a pipe: EINVAL
    try:
        os.write(fd, b"x" * 5000)
        fds = [fd, closed, read_end, fd]
        _served, pure = run_loop(flush_loop_py, fds)
        commit_log = PlannedLog(fds)
        flusher = ChildFlusher(cast(CommitLog, commit_log))
        flusher.start()
        pid = flusher.pid
        assert pid is not None and pid != os.getpid()
        try:
            with trio.fail_after(30):
                await flusher.request().wait()
                commit_log.fds = [fd] * 70  # more than one message's worth of descriptors
                await flusher.request().wait()
        finally:
            flusher.stop()
    finally:
        for each in (fd, read_end, write_end):
            os.close(each)
    assert pure == [0, errno.EBADF, errno.EINVAL, 0]
    assert commit_log.done == [pure, [0] * 70]
    assert commit_log.flushes == 0  # every flush went to the process
    await wait_reaped(pid)
    with pytest.raises(RuntimeError, match="not running"):
        flusher.request()


async def test_a_killed_flush_process_fails_its_flushes_and_is_replaced_once(
    make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=60_000)
    flushers: list[ChildFlusher] = []

    def child(commit_log: CommitLog) -> ChildFlusher:
        flushers.append(ChildFlusher(commit_log))
        return flushers[-1]

    monkeypatch.setattr(store_writer, "make_flusher", child)
    answers: list[PutMessageResult] = []
    with trio.fail_after(60):
        async with open_message_store(config) as store:
            [flusher] = flushers

            async def put(n: int) -> None:
                answers.append(await store.put_message(message(1, n)))
                durable.append(store.commit_log.flushed_offset)

            durable: list[int] = []  # the commit log's flushed offset as each put is answered
            for n in range(5):
                await put(n)
            first = flusher.pid
            assert first is not None
            os.kill(first, signal.SIGSTOP)  # a stuck disk: the next flush waits
            async with trio.open_nursery() as nursery:
                for n in range(5, 9):
                    nursery.start_soon(put, n)
                await trio.testing.wait_all_tasks_blocked()
                os.kill(first, signal.SIGKILL)
            await wait_reaped(first)
            for n in range(9, 12):  # a new process serves
                await put(n)
            second = flusher.pid
            assert second is not None and second != first
            os.kill(second, signal.SIGKILL)
            with trio.fail_after(30):
                while not gone(second):
                    await trio.sleep(0.01)
            for n in range(12, 15):  # the first fails; then the thread serves
                await put(n)
            assert flusher.pid is None
            assert store.statistics().put_messages == 15
        statuses = [answer.status for answer in answers]
        ok, timeout = PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT
        assert statuses == [ok] * 5 + [timeout] * 4 + [ok] * 3 + [timeout] + [ok] * 2
        for answer, flushed in zip(answers, durable, strict=True):
            end = answer.wrote_offset + answer.wrote_bytes
            assert (end <= flushed) == (answer.status is ok)  # none acknowledged unflushed
        # Every put is stored (the shutdown flushed them); the acknowledged ones for sure.
        async with open_message_store(config) as store:
            for answer in answers:
                assert store.look_message_by_offset(answer.wrote_offset) is not None
    logged = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(logged) == 4, logged
    assert re.fullmatch(
        rf"store writer: the commit log's flush process \(pid {first}\) has ended "
        r"\((killed by SIGKILL|still exiting)\); its puts are answered FLUSH_DISK_TIMEOUT "
        r"\(stored, not confirmed on disk\)",
        logged[0],
    ), logged[0]
    assert re.match(rf"commit log: flush process \d+ started in place of {first}", logged[1])
    assert f"flush process (pid {second}) has ended" in logged[2]
    assert logged[3].endswith(f"the flush process died again (pid {second})")


#: Runs a SYNC_FLUSH store on the pure path in the directory argv[1], prints its flush
#: process's pid once a put was flushed, then waits to be killed.
STORE_OWNER = """
import sys, trio
from storage import FlushDiskType, MessageStoreConfig, open_message_store
from tests.storage.test_flush_thread import message

async def main() -> None:
    config = MessageStoreConfig(
        store_path_root_dir=sys.argv[1], flush_disk_type=FlushDiskType.SYNC_FLUSH
    )
    async with open_message_store(config) as store:
        await store.put_message(message(1, 0))
        print(store._writer._flusher.pid, flush=True)
        await trio.sleep_forever()

trio.run(main)
"""


async def test_the_flush_process_ends_when_its_broker_is_killed(tmp_path: Path) -> None:
    environment = {**os.environ, "BOLTMQ_PURE": "1"}
    root = Path(__file__).resolve().parents[2]
    owner = subprocess.Popen(
        [sys.executable, "-c", STORE_OWNER, str(tmp_path / "store")],
        cwd=root, env=environment, stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert owner.stdout is not None
        with trio.fail_after(60):
            line = await trio.to_thread.run_sync(owner.stdout.readline)
        pid = int(line)
        assert not gone(pid)
        owner.kill()
        await trio.to_thread.run_sync(owner.wait, 30)
        with trio.fail_after(30):
            while not gone(pid):  # EOF on its socket: it exits (init reaps it)
                await trio.sleep(0.01)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(30)
        if owner.stdout is not None:
            owner.stdout.close()


def test_make_flusher_takes_the_compiled_loop_else_the_process_else_the_thread(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    commit_log = cast(CommitLog, PlannedLog([]))
    compiled = type(make_flusher(commit_log))
    assert compiled is (NogilFlusher if NogilFlusher.available() else ChildFlusher)
    monkeypatch.setattr(NogilFlusher, "available", staticmethod(lambda: False))
    assert type(make_flusher(commit_log)) is ChildFlusher
    missing = "socket.send_fds (passing descriptors) is missing"
    monkeypatch.setattr(ChildFlusher, "unavailable", staticmethod(lambda: missing))
    with caplog.at_level(logging.INFO, "boltmq.storage"):
        assert type(make_flusher(commit_log)) is FlushThread
    assert [record.getMessage() for record in caplog.records] == [
        "commit log: SYNC_FLUSH flushes in a Python thread (slower: it waits for the "
        f"interpreter lock after each fdatasync): no flush process, {missing}"
    ]


async def test_a_flush_process_that_cannot_start_leaves_the_flushes_to_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "no-python"
    monkeypatch.setattr(sys, "executable", str(missing))
    commit_log = PlannedLog([])
    flusher = ChildFlusher(cast(CommitLog, commit_log))
    with caplog.at_level(logging.WARNING, "boltmq.storage"):
        flusher.start()
    try:
        assert flusher.pid is None
        with trio.fail_after(30):
            await flusher.request().wait()
    finally:
        flusher.stop()
    assert commit_log.flushes == 1 and commit_log.done == []
    [record] = caplog.records
    assert f"no flush process, starting {missing} failed" in record.getMessage()
