"""Prometheus text over a minimal HTTP/1.1 responder on trio: ``GET /metrics``.

Broker and registry both serve their metrics with it, so it lives below both. The owner
passes a prometheus_client collector. A scrape takes its snapshot (`Snapshot.take`: the
collector's ``collect()``) in the trio thread between two checkpoints, so the collector reads
the owner's tables as any inline handler does, with no lock and nothing running beside it;
prometheus_client then formats that snapshot (plain values, touched by nothing else) into text
in a worker thread, so a large exposition does not stall the event loop while it is written.

One request per connection (the answer says ``Connection: close``), as Prometheus scrapes:
the request head is read up to ``MAX_HEAD`` bytes within ``READ_TIMEOUT`` seconds, then
``GET``/``HEAD /metrics`` (any query string) gets 200 with the text, ``/`` a one-line pointer,
another path 404, another method 405, and a collector that raises 500. A connection that
misbehaves is closed and logged; it never stops the responder.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Sequence

import trio
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

log = logging.getLogger("boltmq.metrics")

__all__ = [
    "MAX_HEAD",
    "READ_TIMEOUT",
    "MetricsExporterType",
    "Snapshot",
    "hold_listeners",
    "open_metrics_listeners",
    "serve_metrics",
]


class MetricsExporterType(enum.StrEnum):
    """``metricsExporterType``: RocketMQ 5's switch; PROM serves Prometheus text over HTTP."""

    DISABLE = "DISABLE"
    PROM = "PROM"


#: Bytes of request line and headers accepted before the connection is refused.
MAX_HEAD = 8192
#: Seconds a client has to send its request head.
READ_TIMEOUT = 10.0



class Snapshot(Collector):
    """The metric families one ``collect()`` returned, to format away from the trio thread."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    @classmethod
    def take(cls, collector: Collector) -> Snapshot:
        """Run ``collector.collect()`` now (in the trio thread: it reads live state)."""
        return cls(collector.collect())

    def collect(self) -> Iterable[Metric]:
        """The families taken."""
        return self.families

    def text(self) -> bytes:
        """The Prometheus text format of the families (safe in any thread)."""
        return generate_latest(self)


async def open_metrics_listeners(port: int, host: str) -> list[trio.SocketListener]:
    """Bind the metrics port (0 = any free port); ``host`` empty means every address."""
    try:
        return await trio.open_tcp_listeners(port, host=host or None)
    except OSError as exc:
        raise OSError(
            exc.errno,
            f"cannot listen for metrics on {host or '0.0.0.0'}:{port} ({exc.strerror}); "
            "choose another metricsPromExporterPort or stop what holds it",
        ) from None


async def hold_listeners(
    listeners: Sequence[trio.SocketListener],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Keep ``listeners`` open until cancelled, then close them.

    The supervisor child started just before `serve_metrics`: the port outlives a crashed and
    restarted responder, and is released when the supervisor stops its children.
    """
    task_status.started()
    try:
        await trio.sleep_forever()
    finally:
        for listener in listeners:
            listener.socket.close()


async def serve_metrics(
    listeners: Sequence[trio.SocketListener],
    collector: Collector,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Answer scrapes of ``collector`` on ``listeners`` until cancelled (the listeners stay
    open for a restart)."""

    async def handle(stream: trio.SocketStream) -> None:
        try:
            await _answer(stream, collector)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the scraper went away; nothing to tell it
        except Exception:
            log.exception("metrics request failed; the responder keeps serving")
        finally:
            with trio.move_on_after(1) as cleanup:
                cleanup.shield = True
                await stream.aclose()

    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(_accept_loop, listener, handle)
        task_status.started()


async def _accept_loop(
    listener: trio.SocketListener,
    handle: Callable[[trio.SocketStream], object],
) -> None:
    # Not trio.serve_listeners: that closes the listener when cancelled, and a restarted
    # responder must keep the port it was given.
    async with trio.open_nursery() as nursery:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:  # EMFILE and friends: wait a little, keep serving
                log.warning("metrics listener could not accept a connection: %s", exc)
                await trio.sleep(0.1)
                continue
            nursery.start_soon(handle, stream)  # type: ignore[arg-type]


async def _answer(stream: trio.SocketStream, collector: Collector) -> None:
    head = b""
    with trio.move_on_after(READ_TIMEOUT):
        while b"\r\n\r\n" not in head and b"\n\n" not in head and len(head) <= MAX_HEAD:
            data = await stream.receive_some(4096)
            if not data:
                break
            head += data
    line = head.split(b"\n", 1)[0].strip()
    parts = line.split()
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
        await _send(stream, 400, b"bad request: send GET /metrics\n")
        return
    method, target = parts[0], parts[1].split(b"?", 1)[0]
    if method not in (b"GET", b"HEAD"):
        await _send(stream, 405, b"only GET and HEAD are served\n", extra=b"Allow: GET, HEAD\r\n")
        return
    if target == b"/metrics":
        try:
            snapshot = Snapshot.take(collector)
            body = await trio.to_thread.run_sync(snapshot.text)
        except Exception:
            log.exception("collecting the metrics failed; this scrape gets 500, the next retries")
            await _send(stream, 500, b"the metrics could not be collected; see the server log\n")
            return
        head_only = method == b"HEAD"
        await _send(stream, 200, body, content_type=CONTENT_TYPE_LATEST, head_only=head_only)
    elif target == b"/":
        await _send(stream, 200, b"Prometheus metrics are at /metrics\n")
    else:
        await _send(stream, 404, b"not found: the metrics are at /metrics\n")


_REASONS = {
    200: b"OK",
    400: b"Bad Request",
    404: b"Not Found",
    405: b"Method Not Allowed",
    500: b"Internal Server Error",
}


async def _send(
    stream: trio.SocketStream,
    status: int,
    body: bytes,
    *,
    content_type: str = "text/plain; charset=utf-8",
    extra: bytes = b"",
    head_only: bool = False,
) -> None:
    head = (
        b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n"
        % (status, _REASONS[status], content_type.encode(), len(body))
    )
    await stream.send_all(head + extra + b"\r\n" + (b"" if head_only else body))
