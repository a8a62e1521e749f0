"""``python -m boltmq.cli``: the `boltmq` command."""

import sys

from boltmq.cli import main

sys.exit(main())
