"""The remoting client: one connection per address, calls by opaque, reconnect with backoff.

Runs on trio or asyncio (anyio), over TCP (``host:port``, TLS with ``tls=True`` or a
``tls_ca_file``) or websocket (``ws://host:port/``, ``wss://`` verified against
``tls_ca_file``). Requests the peer sends us (a broker asking a
consumer for its running info, say) go to the client's own `Dispatcher`.

    async with RemotingClient() as client:
        response = await client.invoke("127.0.0.1:9876", request, timeout=3)
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from types import TracebackType

import anyio
import anyio.abc

from protocol.command import ConnectionClosedError, RemotingCommand
from protocol.connection import Connection, Dispatcher
from protocol.frame import DEFAULT_FRAME_LIMIT
from protocol.tls import client_ssl_context
from protocol.transport import FrameTransport, connect_tcp, parse_address
from protocol.websocket_client import connect_websocket

log = logging.getLogger("boltmq.remoting")


class RemotingClient:
    """Pooled connections to any number of peers, addressed as ``host:port`` or ``ws://...``."""

    def __init__(
        self,
        dispatcher: Dispatcher | None = None,
        *,
        connect_timeout: float = 3.0,
        frame_limit: int = DEFAULT_FRAME_LIMIT,
        backoff_initial: float = 0.1,
        backoff_max: float = 5.0,
        tls_ca_file: str | None = None,
        tls: bool | None = None,
        tls_cert_file: str = "",
        tls_key_file: str = "",
        rpc_hook: Callable[[RemotingCommand], None] | None = None,
    ) -> None:
        self.dispatcher = dispatcher or Dispatcher()
        #: PEM file of the CAs that ``wss://`` peers are verified against (system CAs if None).
        self.tls_ca_file = tls_ca_file
        #: Whether ``host:port`` peers are dialed with TLS (default: when a CA file or a client
        #: certificate is given).
        self.tls = (tls_ca_file is not None or bool(tls_cert_file)) if tls is None else tls
        self._tls_cert_file, self._tls_key_file = tls_cert_file, tls_key_file
        # A CA or certificate file that cannot be read fails here, not at the first connection.
        self._ssl_context: ssl.SSLContext | None = (
            client_ssl_context(tls_ca_file, tls_cert_file, tls_key_file)
            if tls_ca_file is not None or self.tls or tls_cert_file
            else None
        )
        self.connect_timeout = connect_timeout
        self.frame_limit = frame_limit
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        #: Applied to every request sent (e.g. `protocol.acl.SessionCredentials.sign`).
        self.rpc_hook = rpc_hook
        self._connections: dict[str, Connection] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._failures: dict[str, tuple[int, float]] = {}  # address -> (count, retry-not-before)
        self._task_group: anyio.abc.TaskGroup | None = None
        self._close_listeners: list[object] = []

    async def __aenter__(self) -> RemotingClient:
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._task_group is not None
        self.close_all()
        self._task_group.cancel_scope.cancel()
        return await self._task_group.__aexit__(exc_type, exc, tb)

    async def connection(self, address: str) -> Connection:
        """The live connection to ``address``, opening one (with backoff after failures)."""
        conn = self._connections.get(address)
        if conn is not None and not conn.closed:
            return conn
        lock = self._locks.setdefault(address, anyio.Lock())
        async with lock:
            conn = self._connections.get(address)
            if conn is not None and not conn.closed:
                return conn
            count, not_before = self._failures.get(address, (0, 0.0))
            now = anyio.current_time()
            if now < not_before:
                raise ConnectionClosedError(
                    f"cannot connect to {address}: last {count} attempt(s) failed; "
                    f"next attempt in {not_before - now:.1f}s"
                )
            try:
                with anyio.fail_after(self.connect_timeout):
                    transport = await self._open(address)
            except (OSError, TimeoutError, ValueError, anyio.BrokenResourceError) as exc:
                if isinstance(exc, anyio.BrokenResourceError):
                    exc = OSError("the peer closed the connection during the TLS handshake")
                if isinstance(exc, TimeoutError) and not str(exc):
                    what = "websocket upgrade" if "://" in address else "connection"
                    exc = TimeoutError(f"no {what} within {self.connect_timeout:g}s")
                count += 1
                delay = min(self.backoff_max, self.backoff_initial * 2 ** (count - 1))
                self._failures[address] = (count, anyio.current_time() + delay)
                log.warning(
                    "cannot connect to %s (%s); retry allowed in %.1fs", address, exc, delay
                )
                raise ConnectionClosedError(f"cannot connect to {address}: {exc}") from exc
            self._failures.pop(address, None)
            conn = Connection(
                transport,
                self.dispatcher,
                frame_limit=self.frame_limit,
                idle_timeout=None,
            )
            conn.request_hook = self.rpc_hook
            if self._task_group is None:
                raise RuntimeError("RemotingClient must be used as 'async with RemotingClient()'")
            await self._task_group.start(conn.run)
            self._connections[address] = conn
            return conn

    async def _open(self, address: str) -> FrameTransport:
        if address.startswith(("ws://", "wss://")):
            if address.startswith("wss://") and self._ssl_context is None:
                self._ssl_context = client_ssl_context(
                    self.tls_ca_file, self._tls_cert_file, self._tls_key_file
                )
            # The message limit counts the frame's own 4-byte length field and some slack.
            return await connect_websocket(
                address, self.frame_limit + 8, ssl_context=self._ssl_context
            )
        host, port = parse_address(address)
        return await connect_tcp(host, port, self._ssl_context if self.tls else None)

    async def invoke(
        self, address: str, request: RemotingCommand, timeout: float = 3.0
    ) -> RemotingCommand:
        """Send ``request`` to ``address`` and return its response (raises on timeout/close)."""
        conn = self._connections.get(address)
        if conn is None or conn.closed:
            conn = await self.connection(address)
        return await conn.invoke(request, timeout)

    async def invoke_oneway(self, address: str, request: RemotingCommand) -> None:
        """Send a oneway ``request`` to ``address``."""
        conn = await self.connection(address)
        conn.send_oneway(request)

    def close(self, address: str) -> None:
        """Drop the connection to ``address`` (pending calls fail)."""
        conn = self._connections.pop(address, None)
        if conn is not None:
            conn.close("closed by the client")

    def close_all(self) -> None:
        """Drop every connection."""
        for address in list(self._connections):
            self.close(address)

    def addresses(self) -> list[str]:
        """Addresses with a live connection."""
        return [a for a, c in self._connections.items() if not c.closed]
