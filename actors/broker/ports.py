"""The broker's TCP ports, bound at the start and listened on only once it can serve.

The broker binds its remoting ports first: a port that is taken fails the start before the
store opens, and an ephemeral port (``listenPort=0``) is known before the store does, whose
MsgIds carry the broker's address. It calls ``listen()`` only when the ``server`` child starts,
after the store has recovered and the tables are loaded. Until then a bound socket that does
not listen refuses connections, so a readiness check that dials the port is told the truth
(a listening socket would have the kernel accept connections nobody serves yet).
"""

from __future__ import annotations

import socket as stdlib_socket

import trio

#: Pending connections the kernel holds per listener (trio's default for open_tcp_listeners).
LISTEN_BACKLOG = 0xFFFF


async def bind_tcp(port: int, host: str | None = None) -> list[trio.socket.SocketType]:
    """Sockets bound to ``port`` on ``host`` (every local address when None), not listening
    yet; as `trio.open_tcp_listeners` binds them. Raises OSError when the port is taken."""
    addresses = await trio.socket.getaddrinfo(
        host, port, type=stdlib_socket.SOCK_STREAM, flags=stdlib_socket.AI_PASSIVE
    )
    sockets: list[trio.socket.SocketType] = []
    try:
        for family, kind, proto, _, address in addresses:
            try:
                sock = trio.socket.socket(family, kind, proto)
            except OSError as exc:
                if exc.errno == getattr(stdlib_socket, "EAFNOSUPPORT", None):
                    continue  # an address family this host lacks (no IPv6, say)
                raise
            sockets.append(sock)
            sock.setsockopt(stdlib_socket.SOL_SOCKET, stdlib_socket.SO_REUSEADDR, 1)
            if family == stdlib_socket.AF_INET6:
                sock.setsockopt(stdlib_socket.IPPROTO_IPV6, stdlib_socket.IPV6_V6ONLY, 1)
            await sock.bind(address)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    if not sockets:
        raise OSError(f"no address to bind port {port} on host {host or 'any'}")
    return sockets


def listen(sockets: list[trio.socket.SocketType]) -> list[trio.SocketListener]:
    """Start listening on sockets from `bind_tcp`; the listeners to serve."""
    for sock in sockets:
        try:
            sock.listen(LISTEN_BACKLOG)
        except OSError as exc:
            # SO_REUSEADDR lets two sockets bind a port while neither listens: the second
            # to listen learns only now that the port is taken.
            raise OSError(
                exc.errno,
                f"cannot listen on {sock.getsockname()}: {exc.strerror}; another process "
                "started listening on the port after this broker bound it: stop it or change "
                "listenPort",
            ) from None
    return [trio.SocketListener(sock) for sock in sockets]
