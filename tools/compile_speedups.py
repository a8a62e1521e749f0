"""Compiles ``protocol/_speedups.pyx`` (Cython, then the C compiler) into an extension module.

Shared by ``./dev build-ext`` (`tools.build_ext`, in place) and the package build's hook
(``hatch_build.py``: the wheel, the sdist's install and the editable install). The hook loads
this file by its path inside an isolated build environment that holds only the build
requirements, so it imports nothing but the standard library and Cython, and never the
package it builds.

Beside the extension goes a stamp, ``<extension>.sha256``: the SHA-256 of the .pyx it was built
from. The package loads the extension only when the stamp matches the .pyx beside it, so an
extension left over from an older source never runs (``protocol.codecs_status`` says so).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path

__all__ = ["compile_extension", "extension_name", "source_digest", "stamp_path"]


def extension_name() -> str:
    """The extension's file name for the running interpreter (``_speedups`` + EXT_SUFFIX)."""
    return "_speedups" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")


def stamp_path(extension: Path) -> Path:
    """Where the source stamp of ``extension`` goes."""
    return extension.with_name(extension.name + ".sha256")


def source_digest(source: Path) -> str:
    """SHA-256 of the .pyx as it is now."""
    return hashlib.sha256(source.read_bytes()).hexdigest()


def compile_extension(source: Path, target: Path) -> None:
    """Compile ``source`` into ``target`` and write its stamp; RuntimeError says why it failed.

    The compiler is ``$CC`` (gcc when unset). ``target`` is replaced atomically, so a failed
    build never leaves half a file where the package would load it.
    """
    if importlib.util.find_spec("Cython") is None:
        raise RuntimeError("Cython is not installed: install the build extra, '.[build]'")
    from Cython.Build import cythonize  # type: ignore[import-not-found,unused-ignore]

    digest = source_digest(source)
    work = Path(tempfile.mkdtemp(prefix="boltmq-ext-"))
    try:
        # Compile a copy so the C file and Cython's caches stay out of the source tree.
        package = work / "protocol"
        package.mkdir()
        (package / "__init__.py").write_text("")
        copy = package / source.name
        shutil.copyfile(source, copy)
        try:
            (c_file,) = cythonize([str(copy)], quiet=True, force=True)[0].sources  # type: ignore[no-untyped-call]
        except Exception as exc:  # Cython reports a bad source as assorted errors
            raise RuntimeError(f"Cython failed: {exc}") from exc
        cc = os.environ.get("CC", "gcc")
        built = work / target.name
        command = [
            cc, "-shared", "-fPIC", "-O2", "-fwrapv", "-fno-strict-aliasing", "-DNDEBUG",
            f"-I{sysconfig.get_paths()['include']}", str(c_file), "-o", str(built),
        ]  # fmt: skip
        try:
            result = subprocess.run(command, capture_output=True, text=True, check=False)
        except OSError as exc:
            raise RuntimeError(f"no C compiler: {cc}: {exc.strerror}") from exc
        if result.returncode != 0:
            output = result.stderr.strip()[-2000:] or "no output"
            raise RuntimeError(f"{cc} exited with status {result.returncode}: {output}")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".tmp")
        shutil.copyfile(built, partial)
        os.replace(partial, target)
        stamp_path(target).write_text(digest + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
