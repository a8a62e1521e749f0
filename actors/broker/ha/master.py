"""The master side of RocketMQ 4.x classic HA (sheet 7): RocketMQ's HAService on haListenPort.

Plain TCP, no framing, no handshake. A slave connects and writes 8-byte big-endian offsets (its
commit-log max offset); the master streams ``[8-byte start offset][4-byte size][bytes]`` frames
of at most ``haTransferBatchSize`` from the first reported offset (from the start of the last
commit-log file when the slave reports 0), never across a file end, and a heartbeat frame (size
0) after ``haSendHeartbeatInterval`` of idleness. A slave silent for ``haHousekeepingInterval``
is dropped. The last offset a slave reported is its acknowledged offset. Each write carries up
to `FRAMES_PER_WRITE` frames as separate buffers of one sendmsg (no copy to join them).

Controller mode adds a hello: a slave's first write on the link is `HELLO` (16 bytes: the
8-byte marker `HELLO_MARKER`, a negative number no offset report can be, then its 8-byte
controller broker id), so the master knows which broker each link is
(`HAConnection.slave_broker_id`). A classic slave's first 8 bytes are an offset >= 0 and are
read as before; a hello reaches any master harmlessly.

SYNC_MASTER: the send path, and through `HighAvailability.put_message` the send-back, the
transaction commit and the delay service, hand every stored put to `HAService.defer`, which
keeps it in a waiter table ordered by end offset and answers it when a slave acknowledges that
far (one acknowledgement answers every put it covers), with FLUSH_SLAVE_TIMEOUT after
``slaveTimeout``, or at once with SLAVE_NOT_AVAILABLE when no slave is connected or the best
one lags more than ``haSlaveFallbehindMax``. ASYNC_MASTER never waits. A restart (by the
broker's supervisor) drops the slave links; slaves reconnect and resume from their own max
offset.

Controller mode: `HAService.in_sync_slave_ids` is the slaves caught up within
``haMaxTimeSlaveNotCatchup`` (what the master proposes as its SyncStateSet), and
`HAService.confirmed_sync_state_set` what the controller accepted. With
``allAckInSyncStateSet`` a SYNC master's put waits until every other member of the
confirmed set has acknowledged it (a member not connected holds it until the set drops that
member or the wait times out), and is refused at once with SLAVE_NOT_AVAILABLE while the set
has fewer than ``minInSyncReplicas`` members. `HAService.fence` answers every waiting put
FLUSH_SLAVE_TIMEOUT and refuses new waits (SLAVE_NOT_AVAILABLE) until `HAService.unfence`:
a fenced or demoted master acknowledges nothing more. None of this costs the classic path
more than one flag test per put.
"""

from __future__ import annotations

import collections
import itertools
import logging
import math
import struct
from collections.abc import Awaitable, Callable, Iterable

import attrs
import trio

from actors.broker.config import BrokerConfig
from protocol.server import ServerConfig
from protocol.tls import accept_tls
from storage import BrokerRole, MessageStore, PutMessageResult, PutMessageStatus

log = logging.getLogger("boltmq.broker.ha")

#: A transfer frame's header: start offset, body size.
FRAME_HEADER = struct.Struct(">qi")
#: A slave's offset report.
OFFSET_REPORT = struct.Struct(">q")
#: Controller mode: a slave's first write, marker then its broker id (see the module doc).
HELLO = struct.Struct(">qq")
#: "BOLTMQHA" negated: never an offset, which is >= 0.
HELLO_MARKER = -0x424F4C544D514841
#: Seconds an idle transfer waits before looking at the commit log again. A SYNC_MASTER's
#: sends wake it at once (RocketMQ: 100 ms); an ASYNC_MASTER's do not, so it sends what 10 ms
#: of puts wrote in one write instead of one frame per group commit (profiled under load:
#: replication took about 7% of the master's cpu at 5 ms, 4% at 10 ms; the lag grows 5 ms).
TRANSFER_POLL = 0.1
ASYNC_TRANSFER_POLL = 0.01
#: Frames (each at most haTransferBatchSize) written with one sendmsg: a wake sends what the
#: puts since the last one wrote in one system call, without joining header and body.
FRAMES_PER_WRITE = 16


@attrs.frozen
class SlaveLag:
    """How far one connected slave is behind its master."""

    address: str
    acked_offset: int
    behind_bytes: int
    behind_seconds: float


@attrs.frozen
class HAStatistics:
    """The HA service at one moment: slaves, acknowledged offset, waiting sends."""

    listen_port: int
    slaves: tuple[SlaveLag, ...]
    push_to_slave_max_offset: int
    waiting_sends: int
    transferred_bytes: int
    slave_timeouts: int
    slave_not_available: int
    #: Controller mode: the broker ids of the linked slaves, those in sync, and the set
    #: the controller confirmed (empty outside controller mode).
    slave_broker_ids: tuple[int, ...] = ()
    in_sync_slave_ids: tuple[int, ...] = ()
    confirmed_sync_state_set: tuple[int, ...] = ()
    fenced: str = ""


def hello(broker_id: int) -> bytes:
    """The hello a controller-mode slave writes first on its link (see the module doc)."""
    return HELLO.pack(HELLO_MARKER, broker_id)


class HAConnection:
    """One slave's link: its reported offset and the transfer position."""

    def __init__(self, service: HAService, stream: trio.abc.Stream, peer: str) -> None:
        self.service = service
        self.stream = stream
        self.address = peer
        self.acked_offset = -1  # -1 until the first report
        #: The slave's controller broker id, from its hello (None: a classic slave).
        self.slave_broker_id: int | None = None
        self.next_transfer_offset = -1
        self.last_read = trio.current_time()
        self.caught_up_at = trio.current_time()
        self._first_report = trio.Event()
        # (time, master max offset) at recent reports: the lag in seconds.
        self._samples: collections.deque[tuple[float, int]] = collections.deque(maxlen=256)

    def lag(self, max_offset: int) -> SlaveLag:
        """This slave's lag against the master's max offset."""
        acked = max(self.acked_offset, 0)
        behind = max(max_offset - acked, 0)
        seconds = trio.current_time() - self.caught_up_at if behind else 0.0
        return SlaveLag(self.address, self.acked_offset, behind, seconds)

    async def serve(self) -> None:
        """Read reports and transfer data until the slave goes away or falls silent."""
        async with self.stream, trio.open_nursery() as nursery:
            nursery.start_soon(self._until_broken, self._transfer, nursery.cancel_scope)
            await self._until_broken(self._read_reports, nursery.cancel_scope)

    async def _until_broken(
        self, work: Callable[[], Awaitable[None]], link: trio.CancelScope
    ) -> None:
        # Either half ending (or the socket breaking) ends the link.
        try:
            await work()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            log.info("HA slave %s: link broken (%s)", self.address, exc)
        finally:
            link.cancel()

    async def _read_reports(self) -> None:
        housekeeping = self.service.config.ha_housekeeping_interval / 1000
        pending = b""
        first = True
        while True:
            with trio.move_on_after(housekeeping) as idle:
                data = await self.stream.receive_some(4096)
            if idle.cancelled_caught:
                log.warning("HA slave %s silent for %.0f s: dropped", self.address, housekeeping)
                return
            if not data:
                return
            pending += data
            if first:
                if len(pending) < OFFSET_REPORT.size:
                    continue
                if OFFSET_REPORT.unpack_from(pending)[0] == HELLO_MARKER:
                    if len(pending) < HELLO.size:
                        continue
                    self.slave_broker_id = HELLO.unpack_from(pending)[1]
                    pending = pending[HELLO.size :]
                    log.info("HA slave %s is broker id %d", self.address, self.slave_broker_id)
                first = False
            whole = len(pending) - len(pending) % 8
            if not whole:
                continue
            # Only the last complete report counts.
            (offset,) = OFFSET_REPORT.unpack_from(pending, whole - 8)
            pending = pending[whole:]
            self.last_read = trio.current_time()
            self._on_report(offset)

    def _on_report(self, offset: int) -> None:
        service = self.service
        if self.next_transfer_offset < 0:
            if offset == 0:
                max_offset = service.store.get_max_phy_offset()
                offset_start = max_offset - max_offset % service.file_size
            else:
                offset_start = offset
            self.next_transfer_offset = offset_start
            self._first_report.set()
            log.info("HA slave %s connected; transferring from %d", self.address, offset_start)
        self.acked_offset = offset
        # When was the master's max offset last at or below what the slave now has?
        now = trio.current_time()
        samples = self._samples
        samples.append((now, service.store.get_max_phy_offset()))
        while len(samples) > 1 and samples[1][1] <= offset:
            samples.popleft()
        if samples[0][1] <= offset:
            self.caught_up_at = samples[0][0]
        service.on_ack(offset, self)

    async def _transfer(self) -> None:
        await self._first_report.wait()
        service = self.service
        store = service.store
        config = service.config
        batch = config.ha_transfer_batch_size
        heartbeat = config.ha_send_heartbeat_interval / 1000
        stream = self.stream
        poll = TRANSFER_POLL if service.sync_master else ASYNC_TRANSFER_POLL
        last_sent = trio.current_time()
        limit = batch * FRAMES_PER_WRITE
        while True:
            wake = service.data_event_for_wait()
            data = store.get_commit_log_data(self.next_transfer_offset)
            if not data:
                # Woken by a send (SYNC_MASTER); other puts are seen within the poll.
                with trio.move_on_after(poll):
                    await wake.wait()
                if trio.current_time() - last_sent >= heartbeat:
                    await stream.send_all(FRAME_HEADER.pack(self.next_transfer_offset, 0))
                    last_sent = trio.current_time()
                continue
            # Up to FRAMES_PER_WRITE frames of at most ``batch`` bytes, none across a file end
            # (``data`` stops there), as header/body buffers of one write.
            start = self.next_transfer_offset
            parts: list[bytes | memoryview] = []
            for pos in range(0, min(len(data), limit), batch):
                chunk = data[pos : pos + batch]
                parts.append(FRAME_HEADER.pack(start + pos, len(chunk)))
                parts.append(chunk)
            size = min(len(data), limit)
            del data  # the views in ``parts`` are all the write needs
            await _send_buffers(stream, parts)
            last_sent = trio.current_time()
            self.next_transfer_offset = start + size
            service.transferred_bytes += size


async def _send_buffers(stream: trio.abc.Stream, parts: list[bytes | memoryview]) -> None:
    """Write ``parts`` in order with as few sendmsg calls as the socket buffer allows."""
    if not isinstance(stream, trio.SocketStream):
        # TLS encrypts a copy anyway: one joined write.
        await stream.send_all(b"".join(parts))
        return
    sock = stream.socket
    while parts:
        sent = await sock.sendmsg(parts)
        # Drop what went out; a partly sent buffer keeps its unsent tail.
        done = 0
        while done < len(parts) and sent >= len(parts[done]):
            sent -= len(parts[done])
            done += 1
        del parts[:done]
        if sent:
            parts[0] = memoryview(parts[0])[sent:]


@attrs.define(slots=True)
class _Waiter:
    end_offset: int
    deadline: float
    result: PutMessageResult
    callback: Callable[[PutMessageResult], object]


class HAService:
    """The master's HA listener, slave links and SYNC_MASTER waiter table."""

    def __init__(
        self, config: BrokerConfig, store: MessageStore, server_config: ServerConfig
    ) -> None:
        self.config = config
        self.store = store
        # The HA port follows the remoting port's TLS settings, set up when the broker starts.
        self.server_config = server_config
        self.sync_master = self.config.broker_role == BrokerRole.SYNC_MASTER
        self.file_size = self.config.mapped_file_size_commit_log
        self.connections: dict[int, HAConnection] = {}
        self.push_to_slave_max_offset = 0
        self.listen_port = 0
        self.transferred_bytes = 0
        self.slave_timeouts = 0
        self.slave_not_available = 0
        self._ids = itertools.count()
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self._waiter_added = trio.Event()
        self._data_event = trio.Event()
        self._answering = False
        # Controller mode (see the module doc): set once this broker has a controller id, a
        # confirmed SyncStateSet or a fence. The one test the classic path pays per put.
        self._special = False
        self._local_broker_id: int | None = None
        self._confirmed: frozenset[int] = frozenset()
        self._fenced = ""

    # -- the send path ---------------------------------------------------------------------

    def defer(
        self, result: PutMessageResult, callback: Callable[[PutMessageResult], object]
    ) -> bool:
        """Called with every put's result: True when ``callback`` will get it later.

        On a SYNC_MASTER a stored put waits for a slave's acknowledgement of its last byte; a
        put is answered SLAVE_NOT_AVAILABLE at once when no slave could acknowledge it soon.
        """
        if not self.sync_master:
            return False
        self._data_event.set()  # new bytes for the slave links
        if self._answering or result.status is not PutMessageStatus.PUT_OK:
            return False
        if self._special:
            return self._defer_controller_mode(result, callback)
        return self._defer_any_slave(result, callback)

    def _defer_any_slave(
        self, result: PutMessageResult, callback: Callable[[PutMessageResult], object]
    ) -> bool:
        """Wait for any one slave's acknowledgement (the classic SYNC_MASTER)."""
        end = result.wrote_offset + result.wrote_bytes
        if end <= self.push_to_slave_max_offset:
            return False
        if not self.connections or end - self.push_to_slave_max_offset > (
            self.config.ha_slave_fallbehind_max
        ):
            self.slave_not_available += 1
            result.status = PutMessageStatus.SLAVE_NOT_AVAILABLE
            return False
        self._add_waiter(end, result, callback)
        return True

    def on_ack(self, offset: int, connection: HAConnection | None = None) -> None:
        """A slave acknowledged ``offset``: answer every put it covers."""
        if (
            self._special
            and connection is not None
            and connection.slave_broker_id is not None
            and self._per_member()
        ):
            self._recompute_all_acked()
        if offset <= self.push_to_slave_max_offset:
            return
        self.push_to_slave_max_offset = offset
        if self._special and self._per_member():
            return  # answered by `_recompute_all_acked`
        waiters = self._waiters
        if waiters and waiters[0].end_offset <= offset:
            self._answer(offset, -math.inf, None)

    # -- controller mode -----------------------------------------------------------------------

    @property
    def all_ack_in_sync_state_set(self) -> bool:
        """allAckInSyncStateSet, read from the config at each use (it may be updated live)."""
        return self.config.all_ack_in_sync_state_set

    @property
    def local_broker_id(self) -> int | None:
        """This broker's controller id (the master is always in its own SyncStateSet)."""
        return self._local_broker_id

    @local_broker_id.setter
    def local_broker_id(self, broker_id: int | None) -> None:
        self._local_broker_id = broker_id
        self._special = self._special or broker_id is not None

    @property
    def confirmed_sync_state_set(self) -> frozenset[int]:
        """The SyncStateSet the controller accepted (broker ids, this master included)."""
        return self._confirmed

    @confirmed_sync_state_set.setter
    def confirmed_sync_state_set(self, members: Iterable[int]) -> None:
        self._confirmed = frozenset(members)
        # Tracking acknowledgements by id from now on (a set is only confirmed in
        # controller mode, whose slaves say their ids).
        self._special = True
        if self._per_member():
            self._recompute_all_acked()

    def in_sync_slave_ids(self) -> set[int]:
        """Broker ids of the linked slaves that have acknowledged everything this master had
        ``haMaxTimeSlaveNotCatchup`` ms ago, or all it has now (an idle master's slaves
        report only every haSendHeartbeatInterval); the master itself is not among them."""
        now = trio.current_time()
        window = self.config.ha_max_time_slave_not_catchup / 1000
        max_offset = self.store.get_max_phy_offset()
        return {
            connection.slave_broker_id
            for connection in self.connections.values()
            if connection.slave_broker_id is not None
            and connection.acked_offset >= 0
            and (connection.acked_offset >= max_offset or now - connection.caught_up_at <= window)
        }

    def sync_state_set(self) -> set[int]:
        """What this master would propose as its SyncStateSet: itself and the in-sync slaves."""
        members = self.in_sync_slave_ids()
        if self.local_broker_id is not None:
            members.add(self.local_broker_id)
        return members

    def slave_acked_offset(self, broker_id: int) -> int:
        """What slave ``broker_id`` acknowledged on its current link (-1 when not linked).

        Only live links count: a slave that comes back (perhaps truncated, perhaps after
        this broker was a slave itself) says what it has in its first report."""
        return max(
            (c.acked_offset for c in self.connections.values() if c.slave_broker_id == broker_id),
            default=-1,
        )

    @property
    def fenced(self) -> str:
        """Why this master acknowledges nothing now ("" when it does)."""
        return self._fenced

    def fence(self, reason: str) -> None:
        """Acknowledge nothing more: every waiting put is answered FLUSH_SLAVE_TIMEOUT (with
        ``reason`` as its remark) and new waits are refused, until `unfence`."""
        if not self._fenced:
            log.warning("HA: fenced (%s): %d waiting sends answered FLUSH_SLAVE_TIMEOUT",
                        reason, len(self._waiters))  # fmt: skip
        self._fenced = reason or "fenced"
        self._special = True
        for waiter in self._waiters:
            waiter.result.remark = f"not acknowledged: {self._fenced}"
        self._answer(math.inf, math.inf, PutMessageStatus.FLUSH_SLAVE_TIMEOUT)

    def unfence(self) -> None:
        """Take waits again (this broker is master of a new epoch)."""
        if self._fenced:
            log.info("HA: no longer fenced (was: %s)", self._fenced)
        self._fenced = ""
        self._special = bool(self._confirmed) or self._local_broker_id is not None

    def _defer_controller_mode(
        self, result: PutMessageResult, callback: Callable[[PutMessageResult], object]
    ) -> bool:
        """`defer` when fenced, with allAckInSyncStateSet, or in controller mode."""
        if self._fenced:
            result.status = PutMessageStatus.SLAVE_NOT_AVAILABLE
            result.remark = f"not acknowledged: {self._fenced}"
            return False
        if not self._per_member():
            return self._defer_any_slave(result, callback)
        members = self._confirmed | (
            {self.local_broker_id} if self.local_broker_id is not None else set()
        )
        minimum = self.config.min_in_sync_replicas
        if len(members) < minimum:
            self.slave_not_available += 1
            result.status = PutMessageStatus.SLAVE_NOT_AVAILABLE
            result.remark = (
                f"the SyncStateSet has {len(members)} member(s), fewer than "
                f"minInSyncReplicas={minimum}: not acknowledged"
            )
            return False
        end = result.wrote_offset + result.wrote_bytes
        if end <= self._members_acked():
            return False
        self._add_waiter(end, result, callback)
        return True

    def _per_member(self) -> bool:
        """Whether puts wait for every confirmed member: allAckInSyncStateSet, and a
        SyncStateSet known (outside controller mode there is none: any one slave acks)."""
        return self.all_ack_in_sync_state_set and (
            bool(self._confirmed) or self.local_broker_id is not None
        )

    def _others(self) -> frozenset[int]:
        """The confirmed members whose acknowledgement a put waits for (all but this one)."""
        return self._confirmed - {self.local_broker_id}

    def _members_acked(self) -> float:
        """The offset every other confirmed member acknowledged on its live link (infinite
        when this master is the only member); read live, since a link that ends takes its
        acknowledgement with it."""
        return min((self.slave_acked_offset(m) for m in self._others()), default=math.inf)

    def _recompute_all_acked(self) -> None:
        """Answer the waiting puts every other confirmed member has acknowledged."""
        acked = self._members_acked()
        waiters = self._waiters
        if waiters and waiters[0].end_offset <= acked:
            self._answer(acked, -math.inf, None)

    def _add_waiter(
        self, end: int, result: PutMessageResult, callback: Callable[[PutMessageResult], object]
    ) -> None:
        deadline = trio.current_time() + self.config.slave_timeout / 1000
        self._waiters.append(_Waiter(end, deadline, result, callback))
        self._waiter_added.set()

    def data_event_for_wait(self) -> trio.Event:
        """A fresh event the next put sets (take it before checking for data)."""
        if self._data_event.is_set():
            self._data_event = trio.Event()
        return self._data_event

    def _answer(self, acked: float, expired: float, status: PutMessageStatus | None) -> None:
        """Answer the waiters covered by ``acked`` or with a deadline not after ``expired``."""
        waiters = self._waiters
        self._answering = True
        try:
            while waiters and (waiters[0].end_offset <= acked or waiters[0].deadline <= expired):
                waiter = waiters.popleft()
                if status is not None:
                    waiter.result.status = status
                try:
                    waiter.callback(waiter.result)
                except Exception:
                    log.exception("HA: a send answer failed")
        finally:
            self._answering = False

    # -- the service -----------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on haListenPort, serve slave links and expire waits; ready when bound."""
        config = self.config
        host = config.bind_address or None
        try:
            listeners = await trio.open_tcp_listeners(
                config.ha_listen_port or config.listen_port + 1, host=host
            )
        except OSError as exc:
            if config.ha_listen_port:
                raise  # a configured port is a promise to the slaves
            # listenPort + 1 is only a default: take a free port and register that one.
            log.warning("HA port %d not available (%s); using a free port",
                        config.listen_port + 1, exc)  # fmt: skip
            listeners = await trio.open_tcp_listeners(0, host=host)
        self.listen_port = config.ha_listen_port = listeners[0].socket.getsockname()[1]
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._expire_waits)
                await nursery.start(trio.serve_listeners, self._serve_slave, listeners)
                log.info("HA service listening on %d", self.listen_port)
                task_status.started(self.listen_port)
        finally:
            self.connections.clear()
            # Nobody can acknowledge the waiting sends any more.
            self._answer(math.inf, math.inf, PutMessageStatus.FLUSH_SLAVE_TIMEOUT)

    async def _serve_slave(self, stream: trio.SocketStream) -> None:
        host, port = stream.socket.getpeername()[:2]
        served: trio.abc.Stream = stream
        tls = self.server_config
        if tls.tls_mode != "disabled" and tls.tls_context is not None:
            # The HA port follows tlsServerMode like the remoting port.
            secured = await accept_tls(stream, tls.tls_mode, tls.tls_context, "HA")
            if secured is None:
                return
            served = secured
        connection = HAConnection(self, served, f"{host}:{port}")
        key = next(self._ids)
        self.connections[key] = connection
        try:
            await connection.serve()
        finally:
            self.connections.pop(key, None)
            log.info("HA slave %s disconnected", connection.address)

    async def _expire_waits(self) -> None:
        waiters = self._waiters
        while True:
            if not waiters:
                self._waiter_added = trio.Event()
                await self._waiter_added.wait()
                continue
            # Deadlines grow with the table, so the first waiter's comes first.
            await trio.sleep_until(waiters[0].deadline)
            now = trio.current_time()
            before = len(waiters)
            self._answer(-math.inf, now, PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
            self.slave_timeouts += before - len(waiters)

    def statistics(self) -> HAStatistics:
        """Slaves with their lag, the acknowledged offset and the waiting sends."""
        max_offset = self.store.get_max_phy_offset()
        return HAStatistics(
            listen_port=self.listen_port,
            slaves=tuple(c.lag(max_offset) for c in self.connections.values()),
            push_to_slave_max_offset=self.push_to_slave_max_offset,
            waiting_sends=len(self._waiters),
            transferred_bytes=self.transferred_bytes,
            slave_timeouts=self.slave_timeouts,
            slave_not_available=self.slave_not_available,
            slave_broker_ids=tuple(
                sorted(
                    c.slave_broker_id
                    for c in self.connections.values()
                    if c.slave_broker_id is not None
                )
            ),
            in_sync_slave_ids=tuple(sorted(self.in_sync_slave_ids())),
            confirmed_sync_state_set=tuple(sorted(self._confirmed)),
            fenced=self._fenced,
        )
