"""What the executors load: importing the pipeline (and unpickling its readers and partitions,
which import the same modules) loads the client, never the store or the servers (checked in
a fresh interpreter)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_pipeline_loads_no_storage_and_no_actors() -> None:
    script = (
        "import sys, pickle\nimport pipeline\n"
        "from pipeline.planning import QueueRange\n"
        "pickle.loads(pickle.dumps(QueueRange('T', 'b', 0, 'h:1', 0, 5)))\n"
        "from pipeline.options import stream_options\n"
        "options = stream_options({'namesrvAddr': 'h:1', 'topic': 'T', 'groupId': 'g'})\n"
        "reader = pickle.loads(pickle.dumps(pipeline.BoltMQStreamReader(options)))\n"
        "assert reader.options == options\n"
        "print('\\n'.join(sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    loaded = set(out.split())
    assert {"pipeline.source", "pipeline.queue_reader", "pipeline.stream_reader", "client"} \
        <= loaded  # fmt: skip
    ours = {name.partition(".")[0] for name in loaded}
    assert not ours & {"storage", "actors", "boltmq", "monitor"}, sorted(
        name for name in loaded if name.partition(".")[0] in {"storage", "actors", "boltmq"}
    )
