"""The slave side of RocketMQ 4.x classic HA (sheet 7): RocketMQ's HAClient.

The client connects to the master's HA address (``haMasterAddress`` when configured, else the
one the registry answered the slave's registration with), reports its commit-log max offset at
once, every ``haSendHeartbeatInterval`` and after every append, and appends each received frame
at exactly its own max offset; the store writer dispatches consume-queue and index entries from
the appended bytes. A frame that does not start at the slave's max offset, a refused append or
a master silent for ``haHousekeepingInterval`` drops the link; the client reconnects with
backoff and resumes from its own max offset, so the replicated log has no gap and no duplicate.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Protocol

import attrs
import trio

from actors.broker.config import BrokerConfig
from actors.broker.ha.master import FRAME_HEADER, OFFSET_REPORT, hello
from protocol.transport import parse_address
from storage import MessageStore


class MasterAddresses(Protocol):
    """What a slave learns of its master from registering (the registrar's answers)."""

    @property
    def master_addr(self) -> str | None:
        """The master's remoting address (the config sync asks it for the tables)."""

    @property
    def master_ha_addr(self) -> str | None:
        """The master's HA address."""


log = logging.getLogger("boltmq.broker.ha")

#: Reconnect backoff bounds, seconds.
BACKOFF_MIN = 0.1
BACKOFF_MAX = 5.0
#: Seconds between looks for a master address while none is known.
ADDRESS_POLL = 0.2
#: Seconds a TLS handshake with the master may take.
CONNECT_TIMEOUT = 10.0


@attrs.frozen
class HAClientStatistics:
    """The slave's link at one moment."""

    master_address: str | None
    connected: bool
    max_offset: int
    master_offset: int
    behind_bytes: int
    connects: int
    received_bytes: int
    dropped_links: int


class LinkDropped(Exception):
    """The link is unusable (mismatch, refused append, silent master): reconnect."""


class HAClient:
    """A slave broker's replication link to its master; see the module docstring."""

    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        registration: MasterAddresses,
        tls_context: Callable[[], ssl.SSLContext | None],
    ) -> None:
        self.config = config
        self.store = store
        self.registration = registration
        # tlsEnable's client context, set up when the broker starts.
        self.tls_context = tls_context
        self.connected = False
        self.connects = 0
        self.received_bytes = 0
        self.dropped_links = 0
        # The offset just past the master's last frame (its transfer position).
        self.master_offset = 0
        self._report_now = trio.Event()
        #: Controller mode: this broker's id, said first on every link (`master.hello`).
        self.hello_broker_id: int | None = None

    @property
    def master_address(self) -> str | None:
        """The master's HA address: configured, or learned at registration."""
        if self.config.ha_master_address:
            return self.config.ha_master_address
        return self.registration.master_ha_addr

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep a link to the master up until cancelled; reconnect with backoff."""
        task_status.started()
        backoff = BACKOFF_MIN
        while True:
            address = self.master_address
            if address is None:
                await trio.sleep(ADDRESS_POLL)
                continue
            host, port = parse_address(address)
            received = self.received_bytes
            try:
                stream = await self._connect(host, port)
            except (OSError, trio.BrokenResourceError, trio.TooSlowError) as exc:
                log.info("HA master %s not reachable: %s", address, exc.__cause__ or exc)
            else:
                self.connects += 1
                try:
                    reason = await self._replicate(stream, address)
                finally:
                    self.connected = False
                self.dropped_links += 1
                log.info("HA link to %s dropped: %s", address, reason)
            if self.received_bytes > received:
                backoff = BACKOFF_MIN  # the link worked: retry at once-ish
            await trio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)

    async def _connect(self, host: str, port: int) -> trio.abc.Stream:
        # tlsEnable: the link is TLS, the master checked against tlsClientTrustCertPath.
        stream = await trio.open_tcp_stream(host, port)
        context = self.tls_context()
        if context is None:
            return stream
        secure = trio.SSLStream(stream, context, server_hostname=host)
        try:
            with trio.fail_after(CONNECT_TIMEOUT):
                await secure.do_handshake()
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        return secure

    async def _replicate(self, stream: trio.abc.Stream, address: str) -> str:
        """Run one link until it breaks; returns why it ended."""
        reasons: list[str] = []

        async def until_broken(work: Callable[[], Awaitable[None]]) -> None:
            try:
                await work()
            except (LinkDropped, trio.BrokenResourceError, trio.ClosedResourceError,
                    OSError) as exc:  # fmt: skip
                reasons.append(str(exc) or type(exc).__name__)
            finally:
                nursery.cancel_scope.cancel()

        async with stream:
            self.connected = True
            log.info("HA link to master %s open; resuming at %d", address, self._max_offset())
            async with trio.open_nursery() as nursery:
                nursery.start_soon(until_broken, lambda: self._report(stream))
                await until_broken(lambda: self._receive(stream))
        return reasons[0] if reasons else "closed"

    def _max_offset(self) -> int:
        return self.store.get_max_phy_offset()

    async def _report(self, stream: trio.abc.Stream) -> None:
        # The only task that writes to the stream: at once, then per interval or when asked.
        interval = self.config.ha_send_heartbeat_interval / 1000
        if self.hello_broker_id is not None:
            await stream.send_all(hello(self.hello_broker_id))
        while True:
            self._report_now = trio.Event()
            await stream.send_all(OFFSET_REPORT.pack(self._max_offset()))
            with trio.move_on_after(interval):
                await self._report_now.wait()

    async def _receive(self, stream: trio.abc.Stream) -> None:
        store = self.store
        silent = self.config.ha_housekeeping_interval / 1000
        header_size = FRAME_HEADER.size
        buffer = bytearray()
        while True:
            with trio.move_on_after(silent) as idle:
                data = await stream.receive_some(256 * 1024)
            if idle.cancelled_caught:
                raise LinkDropped(f"master silent for {silent:.0f} s")
            if not data:
                raise LinkDropped("master closed the link")
            buffer += data
            # Every whole frame of this receive, appended as one contiguous run: the bodies are
            # gathered from the receive buffer with a single copy.
            pos = 0
            run_start = -1
            bodies: list[tuple[int, int]] = []
            expected = store.get_max_phy_offset()
            while len(buffer) - pos >= header_size:
                start, size = FRAME_HEADER.unpack_from(buffer, pos)
                if len(buffer) - pos - header_size < size:
                    break
                pos += header_size + size
                self.master_offset = start + size
                if not size:
                    continue  # heartbeat
                if expected and start != expected:
                    raise LinkDropped(f"frame at {start}, the slave's max offset is {expected}")
                if run_start < 0:
                    run_start = start
                bodies.append((pos - size, pos))
                expected = start + size
            if bodies:
                with memoryview(buffer) as view:
                    run = b"".join([view[a:b] for a, b in bodies])
                if not await store.append_to_commit_log(run_start, run):
                    raise LinkDropped(f"the store refused replicated data at {run_start}")
                self.received_bytes += len(run)
                self._report_now.set()
            del buffer[:pos]

    def statistics(self) -> HAClientStatistics:
        """The link's state and how far behind the master's transfer position it is."""
        max_offset = self._max_offset()
        return HAClientStatistics(
            master_address=self.master_address,
            connected=self.connected,
            max_offset=max_offset,
            master_offset=self.master_offset,
            behind_bytes=max(self.master_offset - max_offset, 0),
            connects=self.connects,
            received_bytes=self.received_bytes,
            dropped_links=self.dropped_links,
        )
