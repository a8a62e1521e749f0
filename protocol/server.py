"""The remoting server: the same `Dispatcher` served over TCP and over websocket.

Limits (a documented contract, see docs/remoting.md): frames above ``frame_limit`` close the
connection; at most ``max_in_flight`` asynchronous requests per connection run at once, after
which the server stops reading that connection until one finishes; a connection with no
traffic for ``idle_timeout`` seconds is closed.
"""

from __future__ import annotations

import errno
import logging
import resource
import ssl
import time
from collections.abc import Awaitable, Callable

import attrs
import trio
import trio_websocket

from protocol.connection import CloseListener, Connection, Dispatcher
from protocol.frame import DEFAULT_FRAME_LIMIT
from protocol.tls import accept_tls
from protocol.transport import FrameTransport, TrioSocketTransport, TrioStreamTransport
from protocol.websocket import WebSocketTransport

log = logging.getLogger("boltmq.remoting")

#: Seconds between two lines about the same accept failure (see `AcceptFailureLog`).
ACCEPT_FAILURE_LOG_INTERVAL = 30.0


class AcceptFailureLog(logging.Filter):
    """Turns trio's accept-failure records into one actionable line every 30 seconds.

    When accept(2) fails for want of resources (EMFILE at the open-file limit, ENFILE,
    ENOMEM, ENOBUFS) trio's listener loop logs an error with a traceback and retries every
    0.1 s: ten tracebacks a second for as long as it lasts, none saying what to do. Installed
    on trio's ``trio.serve_listeners`` logger (which both the TCP and the websocket listeners
    use), this drops those records and logs on ``boltmq.remoting`` instead: what failed, the
    descriptor limit, that waiting clients are accepted once a descriptor is free, and how many
    retries the last interval suppressed. Other records pass unchanged.
    """

    def __init__(self, interval: float = ACCEPT_FAILURE_LOG_INTERVAL) -> None:
        super().__init__("trio.serve_listeners")
        self.interval = interval
        self._last: dict[int, float] = {}
        self._suppressed: dict[int, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, OSError) or exc.errno is None:
            return True
        code = exc.errno
        now = time.monotonic()
        if now - self._last.get(code, -self.interval) < self.interval:
            self._suppressed[code] = self._suppressed.get(code, 0) + 1
            return False
        self._last[code] = now
        suppressed = self._suppressed.pop(code, 0)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        log.error(
            "remoting: cannot accept new connections: %s (%s); open-file limit %s (hard %s); "
            "connecting clients wait and are accepted once a descriptor is free (retried every "
            "0.1 s%s); raise the limit (ulimit -n, systemd LimitNOFILE=) or close idle clients",
            errno.errorcode.get(code, str(code)),
            exc.strerror or exc,
            _limit(soft),
            _limit(hard),
            f", {suppressed} retries since the last line" if suppressed else "",
        )
        return False


def _limit(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


def install_accept_failure_log() -> None:
    """Put `AcceptFailureLog` on trio's listener logger (once per process)."""
    trio_log = logging.getLogger("trio.serve_listeners")
    if not any(isinstance(f, AcceptFailureLog) for f in trio_log.filters):
        trio_log.addFilter(AcceptFailureLog())


@attrs.define
class ServerConfig:
    """Limits of a remoting server (RocketMQ names in comments)."""

    frame_limit: int = DEFAULT_FRAME_LIMIT  # com.rocketmq.remoting.frameMaxLength
    max_in_flight: int = 1024
    idle_timeout: float | None = 120.0  # serverChannelMaxIdleTimeSeconds
    #: TCP listeners' TLS (tls.server.mode): disabled, permissive or enforcing; see protocol.tls.
    tls_mode: str = "disabled"
    #: The server context for permissive and enforcing (`protocol.tls.tcp_server_ssl_context`).
    tls_context: ssl.SSLContext | None = None


@attrs.frozen
class ServerStatistics:
    """Counters of a server at one moment."""

    connections: int
    accepted_total: int
    closed_total: int
    requests_handled_closed: int


class RemotingServer:
    """Serves a dispatcher over any number of TCP and websocket listeners."""

    def __init__(self, dispatcher: Dispatcher, config: ServerConfig | None = None) -> None:
        install_accept_failure_log()
        self.dispatcher = dispatcher
        self.config = config or ServerConfig()
        self.connections: set[Connection] = set()
        self._close_listeners: list[CloseListener] = [self._forget]
        self._accepted = 0
        self._closed = 0
        self._handled_closed = 0

    def add_close_listener(self, listener: Callable[[Connection], None]) -> None:
        """Call ``listener(connection)`` whenever a connection closes (it must not block)."""
        self._close_listeners.append(listener)

    async def serve_tcp(
        self,
        port: int,
        host: str | None = "127.0.0.1",
        *,
        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on ``host:port`` (port 0 picks one); reports the bound port when ready."""
        listeners = await trio.open_tcp_listeners(port, host=host)
        bound = listeners[0].socket.getsockname()[1]
        log.info("remoting: listening on tcp %s:%d%s", host or "*", bound, self._tls_note())
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._tcp_handler(), listeners)
            task_status.started(bound)

    async def serve_listeners(
        self,
        listeners: list[trio.SocketListener],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve listeners bound beforehand (a broker binds first to learn its port)."""
        if self.config.tls_mode != "disabled":
            ports = sorted({listener.socket.getsockname()[1] for listener in listeners})
            log.info("remoting: tcp port %s%s", ", ".join(map(str, ports)), self._tls_note())
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._tcp_handler(), listeners)
            task_status.started()

    async def serve_websocket(
        self,
        port: int,
        host: str = "127.0.0.1",
        *,
        ssl_context: ssl.SSLContext | None = None,
        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen for websocket clients on any request path (TLS with ``ssl_context``);
        reports the bound port."""
        async with trio.open_nursery() as nursery:
            server = await nursery.start(
                _serve_websocket,
                self._serve_websocket_request,
                host,
                port,
                self.config.frame_limit + 8,
                ssl_context,
            )
            bound = server.port
            log.info(
                "remoting: listening on websocket%s %s:%d",
                " (TLS)" if ssl_context is not None else "",
                host,
                bound,
            )
            task_status.started(bound)

    def _tcp_handler(self) -> Callable[[trio.SocketStream], Awaitable[None]]:
        # Chosen once per listener: with TLS disabled a connection takes the plain path with no
        # wrapper and no first-byte peek.
        if self.config.tls_mode == "disabled" or self.config.tls_context is None:
            return self._serve_tcp_stream
        return self._serve_tcp_stream_tls

    def _tls_note(self) -> str:
        mode = self.config.tls_mode
        return "" if mode == "disabled" else f" (TLS {mode})"

    async def _serve_tcp_stream(self, stream: trio.SocketStream) -> None:
        await self.serve_transport(TrioSocketTransport(stream))

    async def _serve_tcp_stream_tls(self, stream: trio.SocketStream) -> None:
        assert self.config.tls_context is not None
        peer = TrioStreamTransport(stream).peer
        served = await accept_tls(stream, self.config.tls_mode, self.config.tls_context)
        if served is not None:
            await self.serve_transport(TrioStreamTransport(served, peer=peer))

    async def _serve_websocket_request(self, request: trio_websocket.WebSocketRequest) -> None:
        try:
            ws = await request.accept()
        except (trio_websocket.ConnectionClosed, trio.BrokenResourceError) as exc:
            log.info("remoting: websocket handshake failed: %s", exc)
            return
        await self.serve_transport(WebSocketTransport(ws))

    async def serve_transport(self, transport: FrameTransport) -> None:
        """Serve one accepted transport until it closes."""
        connection = Connection(
            transport,
            self.dispatcher,
            frame_limit=self.config.frame_limit,
            max_in_flight=self.config.max_in_flight,
            idle_timeout=self.config.idle_timeout,
            close_listeners=self._close_listeners,
        )
        self.connections.add(connection)
        self._accepted += 1
        log.debug("remoting: connection from %s", connection.peer)
        await connection.run()

    def _forget(self, connection: Connection) -> None:
        self.connections.discard(connection)
        self._closed += 1
        self._handled_closed += connection.requests_handled
        log.debug("remoting: %s closed: %s", connection.peer, connection.close_reason)

    def statistics(self) -> ServerStatistics:
        """Connection counters."""
        return ServerStatistics(
            connections=len(self.connections),
            accepted_total=self._accepted,
            closed_total=self._closed,
            requests_handled_closed=self._handled_closed,
        )


async def _serve_websocket(
    handler: Callable[[trio_websocket.WebSocketRequest], object],
    host: str,
    port: int,
    max_message_size: int,
    ssl_context: ssl.SSLContext | None,
    *,
    task_status: trio.TaskStatus[trio_websocket.WebSocketServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    await trio_websocket.serve_websocket(
        handler,  # type: ignore[arg-type]
        host,
        port,
        ssl_context=ssl_context,
        max_message_size=max_message_size,
        task_status=task_status,
    )
