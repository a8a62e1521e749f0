"""SYNC_FLUSH with the flush in a thread of its own, overlapping the next appends.

The durable offset is taken around the commit log's flush itself (what the commit log held
just before each flush began, noted once it returned), not from the store's own bookkeeping:
a put answered before a flush that started after its append shows up as an answer beyond it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import trio

from storage import (
    FlushDiskType,
    MessageExtBrokerInner,
    MessageStoreConfig,
    PutMessageResult,
    PutMessageStatus,
    open_message_store,
)
from storage.commit_log import CommitLog
from storage.flush_thread import FlushThread
from storage.results import MessageBatch

MakeConfig = Callable[..., MessageStoreConfig]


def message(sender: int, n: int) -> MessageExtBrokerInner:
    return MessageExtBrokerInner(
        topic="FlushTopic",
        body=f"{sender}-{n}".encode() * 40,
        queue_id=sender % 4,
        properties={"TAGS": "T", "UNIQ_KEY": f"U{sender:04d}{n:06d}"},
    )


def batch(sender: int, n: int) -> MessageBatch:
    body = f"b{sender}-{n}".encode() * 40
    return MessageBatch(topic="FlushTopic", queue_id=sender % 4, elements=[(0, body, "")] * 8)


async def test_puts_appended_while_a_flush_runs_are_answered_only_after_a_later_flush(
    make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = make_config(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    real_flush = CommitLog.flush
    lock = threading.Lock()
    durable = [0]  # commit-log offset every byte below which a finished flush covered
    grew_during_flush = [0]  # flushes during which more was appended

    def slow_flush(commit_log: CommitLog) -> int:
        at_call = commit_log.max_offset  # read before the flush reads its own target
        time.sleep(0.002)  # a slow disk: the next puts are appended meanwhile
        flushed = real_flush(commit_log)
        with lock:
            durable[0] = max(durable[0], at_call)
            if commit_log.max_offset > at_call:
                grew_during_flush[0] += 1
        return flushed

    monkeypatch.setattr(CommitLog, "flush", slow_flush)
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

        async def streaming_sender(sender: int) -> None:
            # Sends without waiting for answers, so puts arrive while a flush runs.
            answered = trio.Semaphore(0)

            def callback(result: PutMessageResult) -> None:
                note(result)
                answered.release()

            for n in range(40):
                store.put_message_nowait(message(sender, n), callback)
                await trio.sleep(0.0005)
            for _ in range(40):
                await answered.acquire()

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for sender in range(8):
                    nursery.start_soon(awaited_sender, sender)
                for sender in range(8, 12):
                    nursery.start_soon(batch_sender, sender)
                for sender in range(12, 20):
                    nursery.start_soon(streaming_sender, sender)
        flushes = store.statistics().flushes

    assert len(answers) == 8 * 40 + 4 * 20 + 8 * 40
    assert all(result.status is PutMessageStatus.PUT_OK for result, _ in answers)
    late = [result.wrote_offset for result, covered in answers if not covered]
    assert not late, f"{len(late)} puts answered before an fdatasync covered them"
    assert grew_during_flush[0] > 0, "no put was appended while a flush ran"
    assert flushes < len(answers)


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

