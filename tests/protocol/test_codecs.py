"""`protocol.codecs_status`: which codecs run, and why the pure ones when they do.

Each case but the first imports a copy of the protocol package in a subprocess (``python -P``
with the copy first on PYTHONPATH), with the extension beside it present, absent, stale or
broken, or with ``BOLTMQ_PURE=1``; the decoders must then run the path the status names.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from protocol import codecs_status, frame
from tests.compiled import needs_compiled

ROOT = Path(__file__).resolve().parents[2]
EXTENSION = "_speedups" + sysconfig.get_config_var("EXT_SUFFIX")
_REPORT = (
    "import protocol, protocol.frame as f; print(protocol.__file__); "
    "print(protocol.codecs_status()); "
    "print('pure' if f._decode_payload is f._decode_payload_py else 'compiled')"
)


@needs_compiled
def test_a_fresh_build_runs_compiled() -> None:
    assert codecs_status() == "compiled"
    assert frame._decode_payload is not frame._decode_payload_py


@needs_compiled
def test_a_copy_with_its_fresh_build_runs_compiled(tmp_path: Path) -> None:
    package = _copy(tmp_path, with_extension=True)
    assert (package / EXTENSION).exists()
    assert _report(tmp_path) == ["compiled", "compiled"]


def test_without_the_extension_the_pure_codecs_run(tmp_path: Path) -> None:
    _copy(tmp_path, with_extension=False)
    assert _report(tmp_path) == ["pure (protocol/_speedups not built)", "pure"]


def test_the_switch_keeps_the_extension_out(tmp_path: Path) -> None:
    _copy(tmp_path, with_extension=False)
    (tmp_path / "protocol" / EXTENSION).write_bytes(b"never loaded")
    assert _report(tmp_path, BOLTMQ_PURE="1") == ["pure (BOLTMQ_PURE=1)", "pure"]


def test_a_stale_build_is_not_loaded(tmp_path: Path) -> None:
    # Not even opened: a build from another .pyx may not fit the code that binds it.
    package = _copy(tmp_path, with_extension=False)
    (package / EXTENSION).write_bytes(b"built from an older source")
    (package / f"{EXTENSION}.sha256").write_text("0" * 64 + "\n")
    status, running = _report(tmp_path)
    assert status.startswith("pure (stale build: protocol/_speedups.pyx changed since; ")
    assert running == "pure"


def test_an_extension_that_fails_to_load_says_why(tmp_path: Path) -> None:
    package = _copy(tmp_path, with_extension=False)
    (package / EXTENSION).write_bytes(b"not a shared object")
    digest = hashlib.sha256((package / "_speedups.pyx").read_bytes()).hexdigest()
    (package / f"{EXTENSION}.sha256").write_text(digest + "\n")
    status, running = _report(tmp_path)
    assert status.startswith("pure (import failed: ") and EXTENSION in status, status
    assert running == "pure"


# -- helpers ---------------------------------------------------------------------------------


def _copy(tmp_path: Path, *, with_extension: bool) -> Path:
    ignored = ["__pycache__"] if with_extension else ["__pycache__", "*.so", "*.so.sha256"]
    patterns = shutil.ignore_patterns(*ignored)
    return Path(shutil.copytree(ROOT / "protocol", tmp_path / "protocol", ignore=patterns))


def _report(tmp_path: Path, **env: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if k != "BOLTMQ_PURE"}
    result = subprocess.run(
        [sys.executable, "-P", "-c", _REPORT],
        cwd=tmp_path, env={**environ, "PYTHONPATH": str(tmp_path), **env},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    imported, *lines = result.stdout.splitlines()
    assert imported == str(tmp_path / "protocol" / "__init__.py"), "the copy was not the one run"
    return lines
