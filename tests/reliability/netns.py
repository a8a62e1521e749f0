"""A network namespace joined to the host by a veth pair, for the fault tests (root only).

The tests that cut links (test_network_faults.py, test_controller_partition.py) build one the
same way: the namespace, the pair with one end moved inside, the host end's addresses, the
inner end's address, both ends and the namespace's loopback up. Where the machine does not
allow it the test is skipped, saying which step failed and why.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


def run(*command: str) -> subprocess.CompletedProcess[str]:
    """Run ``command``; its output and exit code are the caller's to check."""
    return subprocess.run(command, capture_output=True, text=True, check=False)


@contextmanager
def veth_namespace(
    namespace: str, host_end: str, inner_end: str, host_cidrs: list[str], inner_cidr: str
) -> Iterator[None]:
    """Build the namespace and its veth pair for the block; removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip(f"network namespaces need root; this test runs as uid {os.geteuid()}")
    inside = ("ip", "netns", "exec", namespace)
    steps = [
        ("ip", "netns", "add", namespace),
        ("ip", "link", "add", host_end, "type", "veth", "peer", "name", inner_end),
        ("ip", "link", "set", inner_end, "netns", namespace),
        *(("ip", "addr", "add", cidr, "dev", host_end) for cidr in host_cidrs),
        ("ip", "link", "set", host_end, "up"),
        (*inside, "ip", "addr", "add", inner_cidr, "dev", inner_end),
        (*inside, "ip", "link", "set", inner_end, "up"),
        (*inside, "ip", "link", "set", "lo", "up"),
    ]
    try:
        for step in steps:
            done = run(*step)
            if done.returncode != 0:
                pytest.skip(f"cannot build the test network ({' '.join(step)}): "
                            f"{done.stderr.strip()}")  # fmt: skip
        yield
    finally:
        run("ip", "netns", "del", namespace)
        run("ip", "link", "del", host_end)
