"""The official RocketMQ 5.x Node.js client (npm ``rocketmq-client-nodejs@1.0.8``) for the
gRPC proxy's interop tests.

Installed once per machine with the machine's npm into the tests' cache directory (the same
root as the Python 5.x client's venv: `cache_root`), from ``node5/package.json`` (the version
pinned exactly); a stamp holding that file's digest marks a finished install. The programs it
runs are ``node5/*.js``; each prints one JSON object a line, which `run_node5` returns parsed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.interop.rmq5_client import cache_root

__all__ = ["node5_dir", "run_node5"]

SCRIPTS = Path(__file__).parent / "node5"
#: Seconds ``npm install`` may take.
INSTALL_TIMEOUT = 600
#: Seconds one program run may take.
RUN_TIMEOUT = 90


@pytest.fixture(scope="session")
def node5_dir() -> Path:
    """A directory holding the pinned client's node_modules and our scripts, installed when
    missing or stale."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("the RocketMQ 5 Node client's tests need node and npm on PATH")
    manifest = (SCRIPTS / "package.json").read_bytes()
    target = cache_root() / f"node5-client-{hashlib.sha256(manifest).hexdigest()[:16]}"
    stamp = target / ".boltmq-ready"
    if not stamp.exists():
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        (target / "package.json").write_bytes(manifest)
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--save-exact", "--loglevel=error"],
            cwd=target, capture_output=True, text=True, timeout=INSTALL_TIMEOUT,
        )  # fmt: skip
        if done.returncode != 0:
            shutil.rmtree(target, ignore_errors=True)
            pytest.fail(f"npm install of the RocketMQ 5 Node client failed:\n{done.stderr[-3000:]}")
        stamp.write_text("ok\n")
    for script in SCRIPTS.glob("*.js"):
        shutil.copyfile(script, target / script.name)
    return target


async def run_node5(directory: Path, script: str, *args: object) -> list[dict[str, Any]]:
    """Run ``node5/<script>`` with ``args``; its JSON lines, or a failure naming its output."""
    with trio.fail_after(RUN_TIMEOUT):
        done = await trio.run_process(
            ["node", str(directory / script), *map(str, args)],
            cwd=directory, capture_stdout=True, capture_stderr=True, check=False,
        )  # fmt: skip
    lines = [json.loads(line) for line in done.stdout.decode().splitlines() if line.startswith("{")]
    errors = [line["error"] for line in lines if "error" in line]
    if done.returncode != 0 or errors:
        pytest.fail(
            f"node {script} exited {done.returncode}: {'; '.join(errors)}\n"
            f"{done.stderr.decode()[-3000:]}"
        )
    return lines
