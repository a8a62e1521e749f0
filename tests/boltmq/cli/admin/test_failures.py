"""A registry that is down, a broker that is down, bad flags: one line, exit 1 (2 for usage).

These run the real command in a subprocess, as a script would, to see its exit code and
streams whole.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.client.helpers import free_port

ROOT = Path(__file__).resolve().parents[4]


def boltmq_admin(*argv: str) -> subprocess.CompletedProcess[str]:
    """``boltmq admin ...`` as a process (60 s at most)."""
    return subprocess.run(
        [sys.executable, "-m", "boltmq.cli", "admin", *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_registry_down() -> None:
    address = f"127.0.0.1:{free_port()}"
    done = boltmq_admin("clusterList", "-n", address, "--timeout", "3")
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"boltmq admin clusterList: no registry answered: {address}")
    assert lines[0].endswith(f"check that a registry runs at {address} (-n or $NAMESRV_ADDR)")


def test_registry_down_with_debug_shows_the_traceback() -> None:
    address = f"127.0.0.1:{free_port()}"
    done = boltmq_admin("topicList", "-n", address, "--timeout", "3", "--debug")
    assert done.returncode == 1
    assert "Traceback" in done.stderr
    assert done.stderr.rstrip().splitlines()[-1].startswith("boltmq admin topicList: no registry")


def test_broker_down(cluster: Any) -> None:
    address = f"127.0.0.1:{free_port()}"
    done = boltmq_admin("brokerStatus", "-n", cluster.namesrv, "-b", address, "--timeout", "3")
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(
        f"boltmq admin brokerStatus: a broker did not answer (cannot connect to {address}"
    )
    assert "check that it runs" in lines[0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["topicStatus"], "the following arguments are required: -t/--topic"),
        (["noSuchVerb"], "invalid choice: 'noSuchVerb'"),
        (["brokerStatus", "-n", "127.0.0.1:1"], "give either -b BROKER_ADDR or -c CLUSTER"),
    ],
)
def test_usage_errors_exit_2(argv: list[str], message: str) -> None:
    done = boltmq_admin(*argv)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_verb_help_shows_its_example() -> None:
    done = boltmq_admin("topicStatus", "--help")
    assert done.returncode == 0
    assert "example:\n  boltmq admin topicStatus -n 127.0.0.1:9876 -t Orders" in done.stdout
    assert "--namesrvAddr" in done.stdout and "--json" in done.stdout
