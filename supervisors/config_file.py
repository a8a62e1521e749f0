"""Atomic JSON config files with a ``.bak`` kept beside them (topics.json, kvConfig.json, ...).

Write: the new content goes to ``<file>.tmp`` and is fsynced; the current file becomes
``<file>.bak``; the tmp file is renamed over ``<file>``; the directory is fsynced. A crash at
any point leaves either the old or the new content under one of the two names.

Load: parse ``<file>``; when it is missing, empty or does not parse, parse ``<file>.bak``
(with a log line). A bad file is never turned into silently empty state: when both copies
exist and neither parses, `ConfigFileError` names both.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

log = logging.getLogger("boltmq.storage.config")

T = TypeVar("T")


class ConfigFileError(Exception):
    """Neither a config file nor its ``.bak`` could be read."""


def save_json_config(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically, keeping the previous content as ``.bak``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    if target.exists():
        # A hard link keeps `target` in place until the rename, so there is no moment
        # without the file; fall back to a copy where links are not supported.
        bak = target.with_name(target.name + ".bak")
        try:
            bak.unlink(missing_ok=True)
            os.link(target, bak)
        except OSError:
            bak.write_bytes(target.read_bytes())
    os.replace(tmp, target)
    _fsync_dir(target.parent)


def load_json_config(path: str | os.PathLike[str], parse: Callable[[bytes], T]) -> T | None:
    """Parse ``path`` (falling back to ``<path>.bak``); None when neither file has content.

    ``parse`` gets the raw bytes and raises on bad content. Raises `ConfigFileError` when a
    copy exists but no copy parses.
    """
    target = Path(path)
    bak = target.with_name(target.name + ".bak")
    error: Exception | None = None
    data = _read(target)
    if data is not None:
        try:
            return parse(data)
        except Exception as exc:
            error = exc
    bak_data = _read(bak)
    if bak_data is None:
        if error is not None:
            raise ConfigFileError(
                f"{target} is corrupt ({error!r}) and there is no {bak.name} to fall back to"
            ) from error
        return None
    try:
        value = parse(bak_data)
    except Exception as bak_error:
        what = f"corrupt ({error!r})" if error is not None else "missing or empty"
        raise ConfigFileError(
            f"{target} is {what} and its backup {bak} is corrupt too ({bak_error!r})"
        ) from bak_error
    why = f"corrupt ({error!r})" if error is not None else "missing or empty"
    log.warning("config file %s is %s; loaded the backup %s instead", target, why, bak)
    return value


def _read(path: Path) -> bytes | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return data if data.strip() else None


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
