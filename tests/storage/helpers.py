"""Shared helpers for store tests: small-file configs under tmp_path, files, the writer, and
the `open_store` fixture that runs a test of the `MessageStore` protocol on either store."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from storage import (
    FileMessageStore,
    MessageStoreConfig,
    open_memory_store,
    open_message_store,
)
from storage.store_writer import StoreWriter

#: ``open_store(config, **kwargs)``: run a store for the block (either implementation).
StoreOpener = Callable[..., contextlib.AbstractAsyncContextManager[Any]]

SMALL_COMMIT_LOG = 64 * 1024


def small_config(root: Path, **overrides: Any) -> MessageStoreConfig:
    """A store with 64 KiB commit-log files, 64-entry consume-queue files, a tiny index."""
    settings: dict[str, Any] = {
        "store_path_root_dir": root,
        "mapped_file_size_commit_log": SMALL_COMMIT_LOG,
        "mapped_file_size_consume_queue_entries": 64,
        "max_hash_slot_num": 64,
        "max_index_num": 256,
    }
    settings.update(overrides)
    return MessageStoreConfig(**settings)


def store_files(directory: Path) -> dict[str, bytes]:
    """Every file below ``directory`` (relative path -> bytes), in path order."""
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def writer_of(store: FileMessageStore) -> StoreWriter:
    """The running store writer of ``store`` (its statistics count inline puts)."""
    writer = store._writer
    assert writer is not None
    return writer


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def make_config(store_root: Path) -> Any:
    """Factory: ``make_config(**overrides)`` -> a small-file config under ``store_root``."""

    def factory(**overrides: Any) -> MessageStoreConfig:
        return small_config(store_root, **overrides)

    return factory


@pytest.fixture(params=["file", "memory"])
def open_store(request: pytest.FixtureRequest) -> StoreOpener:
    """`open_message_store` or `open_memory_store`: a protocol test runs on both stores."""
    opener: StoreOpener = open_message_store if request.param == "file" else open_memory_store
    return opener
