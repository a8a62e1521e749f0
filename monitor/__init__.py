"""BoltMQ's terminal monitor (`boltmq monitor`): a live view of a cluster, read-only.

Layers, bottom up, each importing only the ones before it (and `client`, `protocol` types):

- `Collector` (collector.py): one refresh as a `Sample`, in a bounded number of batched
  admin requests (whole tables per broker, a budget of per-topic and per-group requests).
- `rows` (rows.py): pure figures of one sample: lags, offsets, a broker's row.
- `Model` (model.py): successive samples to a `Snapshot`: rates, stalled / growing / slow
  groups, alerts with their start times; no I/O, no clock.
- `Snapshot` and its rows (snapshot.py): what is shown, and its JSON form (``--json``).
- views.py: the rich tables; screen.py: the live screen's state and keys; app.py: the
  terminal, and one snapshot for ``--once`` and ``--json``.
"""

from monitor.app import Settings, print_snapshot, run_screen, take_snapshot
from monitor.collector import Collector, Sample
from monitor.model import Model, Thresholds
from monitor.snapshot import Alert, Snapshot

__all__ = [
    "Alert",
    "Collector",
    "Model",
    "Sample",
    "Settings",
    "Snapshot",
    "Thresholds",
    "print_snapshot",
    "run_screen",
    "take_snapshot",
]
