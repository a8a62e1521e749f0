"""The client is a layer of its own: importing it loads neither the store nor the servers, and
`import boltmq` does not load the command line (checked in a fresh interpreter each)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _loaded_after(statement: str) -> set[str]:
    script = f"import sys\n{statement}\nprint('\\n'.join(sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return set(out.split())


def test_import_client_loads_no_storage_and_no_actors() -> None:
    loaded = _loaded_after("import client")
    assert "client" in loaded and "client.push_consumer" in loaded
    ours = {name.partition(".")[0] for name in loaded}
    assert not ours & {"storage", "actors", "boltmq", "monitor", "pipeline"}, sorted(
        name for name in loaded if name.partition(".")[0] in {"storage", "actors", "boltmq"}
    )


def test_import_boltmq_does_not_load_the_command_line() -> None:
    loaded = _loaded_after("import boltmq")
    assert "boltmq.launcher" in loaded
    assert not {name for name in loaded if name.startswith("boltmq.cli")}
