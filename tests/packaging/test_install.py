"""What a user's install runs: the wheel carries the compiled codecs, and without a C compiler
the install still succeeds on the pure-Python codecs and says why.

Each case builds a wheel from a copy of the tree with ``python -m build --wheel`` (an isolated
build environment, as a user's build has: hatchling and Cython from the package index),
installs it into a fresh venv and runs ``check_installed.py`` there. The venv holds only the
wheel; the dependencies (trio, attrs, orjson...) come from this interpreter's site-packages
on PYTHONPATH, which holds no copy of the package itself. The two builds run side by side.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = ROOT / "tests" / "protocol" / "data" / "client-captures.jsonl"
CHECK = Path(__file__).with_name("check_installed.py")
# Left out of the copy: what is not source, and an in-place extension (the build makes its own).
_NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", ".*_cache", ".hypothesis", "dist", "build", "*.so",
    "*.so.sha256", "*.egg-info",
)  # fmt: skip


async def test_the_wheel_carries_the_compiled_codecs_and_installs_pure_without_a_compiler(
    tmp_path: Path,
) -> None:
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=_NOT_SOURCE)
    results: dict[str, tuple[Path, str]] = {}

    async def build(name: str, env: dict[str, str]) -> None:
        results[name] = await build_wheel(source, tmp_path / name, env)

    with trio.fail_after(240):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(build, "compiled", {})
            nursery.start_soon(build, "pure", {"CC": "/nonexistent/cc"})

    wheel, _ = results["compiled"]
    names = zipfile.ZipFile(wheel).namelist()
    extension = "protocol/_speedups" + sysconfig.get_config_var("EXT_SUFFIX")
    assert extension in names and extension + ".sha256" in names, names
    # A wheel holding an extension is a platform wheel (cp311-cp311-linux_x86_64, say).
    assert not wheel.name.endswith("-py3-none-any.whl"), wheel.name
    out = await install_and_check(wheel, tmp_path / "venv-compiled", "compiled")
    assert f"extension {tmp_path / 'venv-compiled'}" in out, out
    assert "agree: 39 client frames, 64 records" in out, out

    wheel, log = results["pure"]
    assert "the compiled codecs were not built" in log and "/nonexistent/cc" in log, log
    assert wheel.name.endswith("-py3-none-any.whl")
    assert not [name for name in zipfile.ZipFile(wheel).namelist() if name.endswith(".so")]
    out = await install_and_check(
        wheel, tmp_path / "venv-pure", "pure (protocol/_speedups not built)"
    )
    assert "agree: 39 client frames" in out, out


async def build_wheel(source: Path, out: Path, env: dict[str, str]) -> tuple[Path, str]:
    """``python -m build --wheel`` of ``source`` into ``out``: the wheel and the build's log."""
    result = await trio.run_process(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(source)],
        env={**os.environ, **env}, capture_stdout=True, stderr=subprocess.STDOUT, check=False,
    )  # fmt: skip
    log = result.stdout.decode(errors="replace")
    assert result.returncode == 0, log
    (wheel,) = out.glob("boltmq-*.whl")
    return wheel, log


async def install_and_check(wheel: Path, venv: Path, expected: str) -> str:
    """Install ``wheel`` alone into a new venv, run the check there; its output."""
    await trio.run_process([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    await trio.run_process(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "--disable-pip-version-check", "-q", str(wheel)],
        capture_stdout=True,
    )  # fmt: skip
    env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    env.pop("BOLTMQ_PURE", None)
    result = await trio.run_process(
        [str(python), "-P", str(CHECK), str(CAPTURES), expected],
        cwd=venv, env=env, capture_stdout=True, stderr=subprocess.STDOUT, check=False,
    )  # fmt: skip
    out = result.stdout.decode(errors="replace")
    assert result.returncode == 0, out
    assert f"package {venv}" in out, out
    return out
