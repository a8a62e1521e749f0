"""Free loopback ports for tests that must name their ports before a server starts.

A port the kernel hands out for a bind to port 0 is free once that socket closes, and the next
bind to port 0 may be handed the same one; a test that picks several ports one after another
could then give two listeners one port. Every port handed out here is remembered for the rest
of the test process and never handed out again.
"""

from __future__ import annotations

import socket

_handed_out: set[int] = set()


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port nothing listens on, never one this process was given before."""
    for _ in range(1000):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no loopback port left that this test process has not used")


def free_port_pair(other: int = 1) -> int:
    """A free loopback port P with P + ``other`` free too (a broker's listen port and its HA
    port one above, or its fast port two below with ``other=-2``); both are remembered."""
    for _ in range(1000):
        port = free_port()
        partner = port + other
        if 1024 < partner < 65536 and partner not in _handed_out and _bindable(partner):
            _handed_out.add(partner)
            return port
    raise RuntimeError("no two free loopback ports at the distance asked for")
