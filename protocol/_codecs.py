"""Which codecs run: the compiled ``protocol._speedups`` or the pure-Python code, and why.

Every module with a compiled twin (the frame, record, batch and send-header decoders, the Java
string hash, the store's batch writer, index writer and flush loop) tries
``import protocol._speedups`` and keeps its pure code when that fails. The package imports this
module first, so before any of them it can hold the extension back, which makes that import
fail for all of them alike:

- ``BOLTMQ_PURE=1`` in the environment: the pure code runs (to compare, or to rule the
  extension out when hunting a bug);
- a stale build: the stamp beside the extension (the SHA-256 of the .pyx it was built from) does
  not match the .pyx beside it, so the extension may not fit the code that binds it.

`codecs_status` names the path for the broker's start line, ``boltmq --version``, the broker's
runtime info (key ``codecs``) and its metrics (``boltmq_codecs_info``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

__all__ = ["PURE_SWITCH", "codecs_status"]

#: The environment variable that, set to 1, keeps the compiled codecs out of this process.
PURE_SWITCH = "BOLTMQ_PURE"

_MODULE = "protocol._speedups"
_HERE = Path(__file__).resolve().parent
_SOURCE = _HERE / "_speedups.pyx"


def codecs_status() -> str:
    """``"compiled"``, or ``"pure (<why>)"``: the codec path this process runs."""
    return _status()


def _built_extensions() -> list[Path]:
    return [path for s in EXTENSION_SUFFIXES if (path := _HERE / f"_speedups{s}").exists()]


def _stale(extension: Path) -> bool:
    # Without the .pyx (an install that left it out) there is nothing to be stale against.
    if not _SOURCE.exists():
        return False
    try:
        built = extension.with_name(extension.name + ".sha256").read_text().strip()
    except OSError:
        return True
    return built != hashlib.sha256(_SOURCE.read_bytes()).hexdigest()


def _hold_back() -> str | None:
    if os.environ.get(PURE_SWITCH) == "1":
        return f"{PURE_SWITCH}=1"
    built = _built_extensions()
    if built and _stale(built[0]):
        return "stale build: protocol/_speedups.pyx changed since; ./dev build-ext rebuilds it"
    return None


# A None entry in sys.modules makes every later import of the module raise ImportError.
_HELD_BACK = _hold_back()
if _HELD_BACK is not None:
    sys.modules.setdefault(_MODULE, None)  # type: ignore[arg-type]


@functools.cache
def _status() -> str:
    if _HELD_BACK is not None:
        return f"pure ({_HELD_BACK})"
    try:
        import protocol._speedups  # noqa: F401
    except ImportError as exc:
        if not _built_extensions():
            return "pure (protocol/_speedups not built)"
        return f"pure (import failed: {exc})"
    return "compiled"
