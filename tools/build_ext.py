"""The optional compiled codec module: ``./dev build-ext`` (``python -m tools.build_ext``).

Compiles ``protocol/_speedups.pyx`` with Cython and gcc into an extension beside it. The pure
modules import it when it is there and use its functions (the Java string hash, pull-answer
record decoding); without it they run their own pure-Python code, which stays the reference:
tests compare the two byte for byte. Installs compile it too (``hatch_build.py``, with the same
`tools.compile_speedups`); this command rebuilds it in place after an edit of the .pyx.

A stamp beside the extension holds the SHA-256 of the .pyx it was built from, so a build after
an edit rebuilds, ``--status`` says when the extension is stale, and the package does not load a
stale one.

It also generates the gRPC proxy's protobuf modules (``proxy/_pb``, from ``proxy/protos``) when
missing or stale (``tools.compile_protos``); those are required, so ``--soft`` does not cover
them.

    python -m tools.build_ext            # build when missing or stale
    python -m tools.build_ext --status   # compiled, stale or pure
    python -m tools.build_ext --clean    # remove it: pure Python again
    python -m tools.build_ext --soft     # on failure say why and exit 0 (used by ./dev test)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools import compile_protos
from tools.compile_speedups import compile_extension, extension_name, source_digest, stamp_path

ROOT = Path(__file__).resolve().parents[1]
MODULE = "protocol._speedups"
SOURCE = ROOT / "protocol" / "_speedups.pyx"


def extension_path() -> Path:
    """Where the compiled extension goes."""
    return SOURCE.with_name(extension_name())


def status() -> str:
    """ "compiled" (fresh), "stale" (built from an older source) or "pure" (no extension)."""
    if not extension_path().exists():
        return "pure"
    try:
        built = stamp_path(extension_path()).read_text().strip()
    except OSError:
        return "stale"
    return "compiled" if built == source_digest(SOURCE) else "stale"


def build(force: bool = False) -> bool:
    """Compile the extension when missing or stale (always with ``force``); True if built."""
    if status() == "compiled" and not force:
        return False
    compile_extension(SOURCE, extension_path())
    return True


def clean() -> bool:
    """Remove the extension and its stamp; True when there was one."""
    path = extension_path()
    existed = path.exists()
    path.unlink(missing_ok=True)
    stamp_path(path).unlink(missing_ok=True)
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
        return protos() if args.soft else 1
    print(f"build-ext: {MODULE} {'compiled' if built else 'already up to date'}")
    return protos()


def protos() -> int:
    """Generate the proxy's protobuf modules when missing or stale; 1 when that fails.

    Not optional as the codecs are (the proxy cannot run without them), so ``--soft`` does not
    cover a failure here.
    """
    if compile_protos.is_fresh(ROOT):
        print("build-ext: proxy protobuf modules already up to date")
        return 0
    try:
        compile_protos.generate(ROOT)
    except (RuntimeError, OSError) as exc:
        print(f"build-ext: FAILED to generate the proxy's protobuf modules: {exc}", file=sys.stderr)
        return 1
    print(f"build-ext: proxy protobuf modules generated into {compile_protos.OUT_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
