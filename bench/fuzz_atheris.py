"""Coverage-guided fuzzing of one decoder target with atheris (libFuzzer for Python).

atheris is optional (``pip install atheris``; wheels exist for Linux x86-64). The decoders in
``protocol`` and ``supervisors`` are instrumented as they are imported, the target's seeds
(those of ``bench.fuzz``) start the corpus, and any exception other than the target's own
decode error stops the run with libFuzzer's crash report and a ``crash-*`` file.

    python -m bench.fuzz_atheris frame -runs=1000000
    python -m bench.fuzz_atheris body:HeartbeatData -max_total_time=60 corpus/
"""

from __future__ import annotations

import importlib
import sys
import tempfile
from pathlib import Path
from typing import Any

USAGE = "usage: python -m bench.fuzz_atheris TARGET [libFuzzer flags and corpus dirs]"


def _atheris() -> Any:
    try:
        return importlib.import_module("atheris")
    except ImportError:
        raise SystemExit(
            "atheris is not installed: pip install atheris (or use python -m bench fuzz)"
        ) from None


def main(argv: list[str] | None = None) -> None:
    """Fuzz one target until libFuzzer's flags say stop, or until a crash."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        print(USAGE)
        return
    name, flags = args[0], args[1:]
    atheris = _atheris()
    with atheris.instrument_imports(include=["protocol", "supervisors"]):
        fuzz = importlib.import_module("bench.fuzz")
    chosen = fuzz.targets()
    if name not in chosen:
        raise SystemExit(f"unknown fuzz target {name!r}; choose from {', '.join(chosen)}")
    target = chosen[name]
    accepted = target.accepted
    run = target.run

    def one_input(data: bytes) -> None:
        try:
            run(data)
        except accepted:
            pass

    with tempfile.TemporaryDirectory(prefix="fuzz-seeds") as seeds:
        for n, seed in enumerate(target.seeds):
            (Path(seeds) / f"seed-{n}").write_bytes(seed)
        atheris.Setup([sys.argv[0], *flags, seeds], one_input)
        atheris.Fuzz()


if __name__ == "__main__":
    main()
