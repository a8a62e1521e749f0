"""A failed fdatasync is the disk's failure, never a flush: the flushed offset stays, the
error reaches the store writer. Only a file that retention closed while its sync ran (EBADF,
or closed since) is skipped, as before.

Real files in a temp dir; the disk's EIO is injected at the one fdatasync call the pure flush
path makes (no disk here fails on demand), and fed to `CommitLog.flush_done` as the compiled
and process flushers report it (an errno per file).
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable

import pytest

from storage import FlushDiskType, MessageExtBrokerInner, PutMessageStatus, open_message_store
from storage import mapped_file as mapped_file_module
from storage.store_config import MessageStoreConfig

MakeConfig = Callable[..., MessageStoreConfig]


def message(n: int) -> MessageExtBrokerInner:
    return MessageExtBrokerInner(topic="FlushErrors", queue_id=0, body=b"m%04d" % n * 50)


def failing_fdatasync(error: int) -> Callable[[int], None]:
    def fdatasync(fd: int) -> None:
        raise OSError(error, "injected")

    return fdatasync


async def test_an_fdatasync_error_is_raised_and_moves_no_flushed_offset(
    make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = make_config(flush_disk_type=FlushDiskType.ASYNC_FLUSH)
    async with open_message_store(config) as store:
        result = await store.put_message(message(0))
        assert result.status is PutMessageStatus.PUT_OK
        commit_log = store.commit_log
        before = commit_log.flushed_offset
        assert before < commit_log.max_offset
        monkeypatch.setattr(mapped_file_module, "_fdatasync", failing_fdatasync(errno.EIO))
        with pytest.raises(OSError) as raised:
            commit_log.flush()
        assert raised.value.errno == errno.EIO
        assert commit_log.flushed_offset == before
        mapped = commit_log.files.files[-1]
        assert mapped.flushed_position < mapped.wrote_position
        # A descriptor retention closed meanwhile answers EBADF: skipped, as before.
        monkeypatch.setattr(mapped_file_module, "_fdatasync", failing_fdatasync(errno.EBADF))
        assert mapped.flush() == mapped.flushed_position
        monkeypatch.undo()
        assert commit_log.flush() == commit_log.max_offset


async def test_flush_done_raises_a_disk_error_and_skips_a_closed_file(
    make_config: MakeConfig,
) -> None:
    config = make_config(flush_disk_type=FlushDiskType.ASYNC_FLUSH)
    async with open_message_store(config) as store:
        await store.put_message(message(1))
        commit_log = store.commit_log
        before = commit_log.flushed_offset
        plan = commit_log.flush_plan()
        assert plan is not None and len(plan.files) == 1
        with pytest.raises(OSError) as raised:
            commit_log.flush_done(plan, [errno.EIO])
        assert raised.value.errno == errno.EIO
        assert commit_log.flushed_offset == before
        # EBADF: the file was closed after the plan (destroyed by retention): no error.
        assert commit_log.flush_done(plan, [errno.EBADF]) == plan.target


async def test_the_checkpoint_waits_out_the_open_file_limit_and_a_disk_error_is_raised(
    make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The periodic checkpoint write opens its file each time: at the open-file limit it is
    put off (one warning per spell) instead of stopping the store; any other error stops it."""
    config = make_config(flush_disk_type=FlushDiskType.ASYNC_FLUSH)
    async with open_message_store(config) as store:
        store.flush_logics()  # the checkpoint file as the first periodic write leaves it
        await store.put_message(message(2))
        path = str(store.checkpoint.path)
        before = store.checkpoint.path.read_bytes()
        store.checkpoint.physic_msg_timestamp = 1_700_000_000_000  # what the next write holds
        real_open = os.open
        error = errno.EMFILE

        def limited_open(name: object, *args: object, **kwargs: object) -> int:
            if str(name) == path:
                raise OSError(error, os.strerror(error), path)
            return real_open(name, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "open", limited_open)
        with caplog.at_level(logging.WARNING, logger="boltmq.storage"):
            store.flush_logics()
            store.flush_logics()
        assert store.checkpoint.path.read_bytes() == before
        warnings = [
            r.getMessage() for r in caplog.records if "checkpoint not written" in r.getMessage()
        ]
        assert len(warnings) == 1 and "Too many open files" in warnings[0]
        error = errno.EIO
        with pytest.raises(OSError):
            store.flush_logics()
        monkeypatch.setattr(os, "open", real_open)
        store.flush_logics()
        assert (1_700_000_000_000).to_bytes(8, "big") in store.checkpoint.path.read_bytes()
