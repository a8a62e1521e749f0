"""The official RocketMQ 5.x Python client (PyPI ``rocketmq-python-client==5.1.2``) for the
gRPC proxy's interop tests.

The client ships its own generated protobuf modules under the top-level ``rocketmq`` package,
which the C++ client's wheel in the test extra also claims, so it gets a virtual environment
of its own, built once from ``rmq5-requirements.txt`` (every dependency pinned) under the
tests' cache directory (``$BOLTMQ_TEST_CACHE``, else ``$XDG_CACHE_HOME/boltmq-tests``, else
``~/.cache/boltmq-tests``). A stamp holding the requirements' digest marks a finished build,
so an edit of the pins rebuilds it and a half-built one is never used.

The programs it runs are ``tests/interop/rmq5/*.py``; each prints one JSON object a line,
which `run_rmq5` returns parsed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

__all__ = ["REQUIREMENTS", "SCRIPTS", "build_venv", "cache_root", "rmq5_python", "run_rmq5"]

HERE = Path(__file__).parent
REQUIREMENTS = HERE / "rmq5-requirements.txt"
SCRIPTS = HERE / "rmq5"
#: Seconds a venv build may take (downloads on a slow link included).
BUILD_TIMEOUT = 600
#: Seconds one program run may take.
RUN_TIMEOUT = 90


def cache_root() -> Path:
    """Where the tests keep environments they build once per machine."""
    given = os.environ.get("BOLTMQ_TEST_CACHE")
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "boltmq-tests"


@pytest.fixture(scope="session")
def rmq5_python() -> Path:
    """The python of the official client's venv, built when missing or stale."""
    try:
        return build_venv()
    except RuntimeError as exc:
        pytest.fail(str(exc))


def build_venv() -> Path:
    """Build the official client's venv when missing or stale; its python.

    RuntimeError says which step failed and why (a half-built venv is removed).
    """
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:16]
    venv = cache_root() / f"rmq5-client-{digest}"
    stamp = venv / ".boltmq-ready"
    python = venv / "bin" / "python"
    if stamp.exists() and python.exists():
        return python
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is not None:
        steps = [
            [uv, "venv", "-q", "--python", sys.executable, str(venv)],
            [uv, "pip", "install", "-q", "--python", str(python), "--no-deps",
             "-r", str(REQUIREMENTS)],
        ]  # fmt: skip
    else:
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
             "--no-deps", "-r", str(REQUIREMENTS)],
        ]  # fmt: skip
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
        if done.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            raise RuntimeError(
                f"building the RocketMQ 5 client's venv failed at {' '.join(step)}:\n"
                f"{done.stderr.strip()[-3000:]}"
            )
    check = subprocess.run(
        [str(python), "-c", "from rocketmq import Producer, ClientConfiguration"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if check.returncode != 0:
        shutil.rmtree(venv, ignore_errors=True)
        raise RuntimeError(f"the RocketMQ 5 client does not import:\n{check.stderr[-3000:]}")
    stamp.write_text(digest + "\n")
    return python


async def run_rmq5(
    python: Path, home: Path, script: str, *args: str, env: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Run ``tests/interop/rmq5/<script>`` to completion; its JSON lines, parsed.

    ``home`` is the program's HOME (the client writes its logs under ~/logs); ``env`` adds
    variables. The program must end by printing ``{"done": true}``; anything else fails the
    test with its output.
    """
    with anyio.fail_after(RUN_TIMEOUT):
        done = await anyio.run_process(
            [str(python), str(SCRIPTS / script), *args],
            check=False,
            env={
                **os.environ,
                "HOME": str(home),
                "PYTHONPATH": "",
                "PYTHONUNBUFFERED": "1",
                **(env or {}),
            },
        )
    out = done.stdout.decode(errors="replace")
    lines = []
    for line in out.splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    if done.returncode != 0 or not lines or lines[-1] != {"done": True}:
        pytest.fail(
            f"{script} failed (exit {done.returncode}):\n{out[-4000:]}\n"
            f"{done.stderr.decode(errors='replace')[-4000:]}"
        )
    return lines[:-1]
