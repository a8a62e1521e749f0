"""Generates the proxy's protobuf modules from ``proxy/protos`` (RocketMQ 5's gRPC protocol).

Shared by ``python -m tools.build_ext`` (in place, what ``./dev test`` runs) and the package
build's hook (``hatch_build.py``). The hook loads this file by its path inside an isolated build
environment holding only the build requirements, so it imports nothing but the standard
library and ``grpc_tools`` (grpcio-tools, a build requirement only: the generated modules need
protobuf at run time, never the compiler).

``protoc`` writes ``service_pb2.py`` importing ``apache.rocketmq.v2.definition_pb2``, a
top-level package name this project must not claim (other RocketMQ clients ship modules
there), so the generated imports are rewritten to ``proxy._pb.apache.rocketmq.v2``. A stamp
(``proxy/_pb/.sha256``) holds the digest of the .proto files and the compiler's version, so an
unchanged tree is not regenerated.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import tempfile
from pathlib import Path

__all__ = ["PACKAGE", "generate", "is_fresh", "proto_digest"]

# Where the generated modules live, as an import path; the .proto tree sits under it.
PACKAGE = "proxy._pb"
PROTO_DIR = Path("proxy", "protos")
OUT_DIR = Path("proxy", "_pb")
STAMP = ".sha256"


def _sources(root: Path) -> list[Path]:
    return sorted((root / PROTO_DIR).rglob("*.proto"))


def proto_digest(root: Path) -> str:
    """SHA-256 over the .proto files (names and contents) and the compiler's version."""
    digest = hashlib.sha256(_tools_version().encode())
    for path in _sources(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def is_fresh(root: Path, out: Path | None = None) -> bool:
    """True when ``out`` (default: the in-place ``proxy/_pb``) was generated from these protos."""
    out = out if out is not None else root / OUT_DIR
    try:
        return (out / STAMP).read_text().strip() == proto_digest(root)
    except (OSError, RuntimeError):
        return False


def generate(root: Path, out: Path | None = None) -> list[Path]:
    """Generate ``*_pb2.py`` and ``*_pb2.pyi`` into ``out``; RuntimeError says why it failed.

    ``out`` defaults to ``proxy/_pb`` in the tree at ``root``. The whole directory is written
    beside the target and renamed over it, so a failed run never leaves half a package where
    the proxy would import it. Returns the generated files.
    """
    out = out if out is not None else root / OUT_DIR
    if importlib.util.find_spec("grpc_tools") is None:
        raise RuntimeError("grpcio-tools is not installed: install the build extra, '.[build]'")
    from grpc_tools import protoc  # type: ignore[import-untyped,unused-ignore]

    sources = _sources(root)
    if not sources:
        raise RuntimeError(f"no .proto files under {root / PROTO_DIR}")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".pb-", dir=out.parent))
    try:
        include = Path(protoc.__file__).parent / "_proto"  # google/protobuf/*.proto
        args = [
            "protoc",
            f"-I{root / PROTO_DIR}",
            f"-I{include}",
            f"--python_out={work}",
            f"--pyi_out={work}",
            *(str(path.relative_to(root / PROTO_DIR)) for path in sources),
        ]
        # protoc resolves the sources against -I, so it runs from the proto tree.
        cwd = os.getcwd()
        os.chdir(root / PROTO_DIR)
        try:
            status = protoc.main(args)
        finally:
            os.chdir(cwd)
        if status != 0:
            raise RuntimeError(f"protoc failed with status {status} (see its message above)")
        generated = _finish(work)
        (work / STAMP).write_text(proto_digest(root) + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(work, out)
        return [out / path.relative_to(work) for path in generated]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _finish(work: Path) -> list[Path]:
    # Every directory becomes a regular package (mypy and importlib then agree on the names),
    # and the generated imports point into our own package.
    generated = sorted(work.rglob("*_pb2.py*"))
    for directory in {work, *(p.parent for p in generated)}:
        while True:
            init = directory / "__init__.py"
            if not init.exists():
                init.write_text('"""Generated from proxy/protos at build time; do not edit."""\n')
            if directory == work:
                break
            directory = directory.parent
    for path in generated:
        text = path.read_text()
        text = _IMPORT.sub(rf"\1{PACKAGE}.\2", text)
        path.write_text(text)
    return generated


# `from apache.rocketmq.v2 import definition_pb2 as ...` and `import apache.rocketmq...`
_IMPORT = re.compile(r"^(from |import )(apache\.rocketmq\.)", re.MULTILINE)


def _tools_version() -> str:
    try:
        from grpc_tools import grpc_version  # type: ignore[import-untyped,unused-ignore]
    except ImportError as exc:
        raise RuntimeError("grpcio-tools is not installed") from exc
    return str(grpc_version.VERSION)
