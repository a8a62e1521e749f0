"""The optional compiled codec module: ``./dev build-ext`` (``python -m tools.build_ext``).

Compiles ``protocol/_speedups.pyx`` with Cython and gcc into an extension beside it. The pure
modules import it when it is there and use its functions (the Java string hash, pull-answer
record decoding); without it they run their own pure-Python code, which stays the reference:
tests compare the two byte for byte. The wheel and ``pip install -e .`` never need a compiler
(the extension is not in git and hatchling does not build it).

A stamp beside the extension holds the SHA-256 of the .pyx it was built from, so a build after
an edit rebuilds and ``--status`` says when the extension is stale.

    python -m tools.build_ext            # build when missing or stale
    python -m tools.build_ext --status   # compiled, stale or pure
    python -m tools.build_ext --clean    # remove it: pure Python again
    python -m tools.build_ext --soft     # on failure say why and exit 0 (used by ./dev test)
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULE = "protocol._speedups"
SOURCE = ROOT / "protocol" / "_speedups.pyx"


def extension_path() -> Path:
    """Where the compiled extension goes."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return SOURCE.with_name("_speedups" + suffix)


def _stamp_path() -> Path:
    path = extension_path()
    return path.with_name(path.name + ".sha256")


def source_digest() -> str:
    """SHA-256 of the .pyx as it is now."""
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()


def status() -> str:
    """ "compiled" (fresh), "stale" (built from an older source) or "pure" (no extension)."""
    if not extension_path().exists():
        return "pure"
    try:
        built = _stamp_path().read_text().strip()
    except OSError:
        return "stale"
    return "compiled" if built == source_digest() else "stale"


def build(force: bool = False) -> bool:
    """Compile the extension when missing or stale (always with ``force``); True if built."""
    if status() == "compiled" and not force:
        return False
    if importlib.util.find_spec("Cython") is None:
        raise RuntimeError("Cython is not installed: install the build extra, '.[build]'")
    from Cython.Build import cythonize  # type: ignore[import-not-found,unused-ignore]

    digest = source_digest()
    work = Path(tempfile.mkdtemp(prefix="boltmq-ext-"))
    try:
        # Compile a copy so the C file and Cython's caches stay out of the source tree.
        package = work / "protocol"
        package.mkdir()
        (package / "__init__.py").write_text("")
        copy = package / SOURCE.name
        shutil.copyfile(SOURCE, copy)
        (c_file,) = cythonize([str(copy)], quiet=True, force=True)[0].sources  # type: ignore[no-untyped-call]
        cc = os.environ.get("CC", "gcc")
        target = extension_path()
        tmp = work / target.name
        command = [
            cc, "-shared", "-fPIC", "-O2", "-fwrapv", "-fno-strict-aliasing", "-DNDEBUG",
            f"-I{sysconfig.get_paths()['include']}", str(c_file), "-o", str(tmp),
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            output = result.stderr.strip()[-2000:] or "no output"
            raise RuntimeError(f"{cc} exited with status {result.returncode}: {output}")
        shutil.copyfile(tmp, target.with_suffix(".tmp"))
        os.replace(target.with_suffix(".tmp"), target)
        _stamp_path().write_text(digest + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return True


def clean() -> bool:
    """Remove the extension and its stamp; True when there was one."""
    path = extension_path()
    existed = path.exists()
    path.unlink(missing_ok=True)
    _stamp_path().unlink(missing_ok=True)
    return existed


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m tools.build_ext``."""
    parser = argparse.ArgumentParser(
        prog="build-ext",
        description="Compile protocol/_speedups.pyx (optional: pure Python is the fallback).",
        epilog="example: ./dev build-ext   (then ./dev build-ext --status)",
    )
    parser.add_argument("--status", action="store_true", help="say whether it runs compiled")
    parser.add_argument("--clean", action="store_true", help="remove the extension")
    parser.add_argument("--force", action="store_true", help="rebuild even a fresh extension")
    parser.add_argument(
        "--soft", action="store_true", help="on failure say why and exit 0 (pure Python runs)"
    )
    args = parser.parse_args(argv)
    if args.status:
        print(f"{MODULE}: {status()}")
        return 0
    if args.clean:
        clean()
        print(f"build-ext: {MODULE} removed; the pure-Python codecs run")
        return 0
    try:
        built = build(force=args.force)
    except (RuntimeError, OSError, ValueError) as exc:
        clean()  # never leave a stale extension behind a failed build
        print(
            f"build-ext: FAILED, the pure-Python codecs run instead: {exc}",
            file=sys.stderr,
        )
        return 0 if args.soft else 1
    print(f"build-ext: {MODULE} {'compiled' if built else 'already up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
