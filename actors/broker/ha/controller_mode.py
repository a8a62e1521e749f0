"""Controller mode (RocketMQ 5's RIP-44): the broker's link to the controllers.

With ``enableControllerMode=true`` the controllers at ``controllerAddr`` decide who is the
master of a broker group, not ``brokerId``/``brokerRole`` (RocketMQ's ReplicasManager is the
model). `ControllerLink`, the broker's ``controller`` child:

1. Identity. The broker's controller id is read from ``brokerIdentity``
   (``clusterName#brokerName#brokerId``); a file naming another cluster or broker name stops
   the start with the key named. Without a file the broker asks CONTROLLER_GET_NEXT_BROKER_ID,
   claims it with CONTROLLER_APPLY_BROKER_ID (``<address>;<epoch ms>``) and writes the file
   atomically: the id is kept for ever.
2. Role. It registers (CONTROLLER_REGISTER_BROKER) and takes the master the answer names; a
   group without a master asks CONTROLLER_ELECT_MASTER. Afterwards NOTIFY_BROKER_ROLE_CHANGED
   (the controller's notice after an election) and CONTROLLER_GET_REPLICA_INFO (asked every
   ``syncBrokerMetadataPeriod``, in case a notice was lost) move it to a higher master epoch.
3. Liveness. BROKER_HEARTBEAT goes to every controller every ``brokerHeartbeatInterval``.
4. Fencing. A master whose last heartbeat answered by the controller leader is older than
   ``controllerHeartBeatTimeoutMills``/2 stops taking writes at once: it becomes a broker that
   waits for the controller (SLAVE to every check, its own id with the registries), and every
   send stored but not yet answered is answered as failed. The controller waits the whole
   timeout before it elects another master, so two masters never take writes together: writes
   stop within timeout/2 + one heartbeat interval of the last answer.
5. Role changes happen in place. To master: an epoch entry (epoch, commit-log end) is
   appended, the HA client stops, the HA service starts, the store takes writes, and the
   broker registers with the registries as id 0 at once. To slave: writes stop, the commit
   log is truncated to the last offset both logs agree on (the master's GET_BROKER_EPOCH_CACHE
   against ours), the master's epoch entries are copied, then the HA client follows it.
6. The master reports its SyncStateSet to the controller (CONTROLLER_ALTER_SYNC_STATE_SET)
   when the HA service's view of who is caught up changes (every ``checkSyncStateSetPeriod``).

Writes (register, apply id, elect, alter) go to the Raft leader among the controllers: a
follower answers CONTROLLER_NOT_LEADER (naming the leader when it knows it) and the link tries
the next address, remembering who answered. Reads may be answered by any controller, but a
broker becomes master only on the leader's word.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

import attrs
import trio

from actors.broker.config import BrokerConfig, ConfigError
from actors.broker.ha import HARole, HighAvailability
from actors.broker.ha.epoch import EpochFile, EpochFileError, consistent_offset
from protocol.bodies import ElectMasterResponseBody, EpochEntryCache, SyncStateSet
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.headers import (
    AlterSyncStateSetRequestHeader,
    AlterSyncStateSetResponseHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseHeader,
    GetMetaDataResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    NotifyBrokerRoleChangedRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
    decode_header,
    encode_header,
    leader_named,
)
from storage import BrokerRole, MessageStore, StoreError
from supervisors.config_file import load_json_config, save_json_config

__all__ = [
    "ControlledMasterAddresses",
    "ControllerLink",
    "ControllerLinkStatistics",
    "ControllerRole",
    "ControllerUnavailable",
    "NoCommonHistory",
    "Registration",
    "epoch_cache",
    "read_broker_identity",
    "write_broker_identity",
]

log = logging.getLogger("boltmq.broker.controller")

Invoke = Callable[[str, RemotingCommand, float], Awaitable[RemotingCommand]]

#: Seconds one controller request may take.
CONTROLLER_TIMEOUT = 3.0
#: Seconds between attempts while no controller answers (identity, registration, truncation).
RETRY_INTERVAL = 0.5
#: The first broker id a controller gives (0 is the registries' "master").
FIRST_BROKER_ID = 1


class ControllerUnavailable(Exception):
    """No controller answered a request (all down, or none is the leader)."""


class NoCommonHistory(Exception):
    """This broker's epoch history shares no epoch with its new master's: it cannot follow."""


class Registration(Protocol):
    """What the link needs of the registrar: re-register in full at once after a change."""

    master_addr: str | None
    master_ha_addr: str | None

    def role_changed(self) -> None:
        """The broker id or role changed: register with every registry now, in full."""


class ControllerRole(enum.Enum):
    """The role the controller gave (none: not known yet, no master, or fenced)."""

    MASTER = "master"
    SLAVE = "slave"
    NONE = "none"


@attrs.frozen
class ControllerLinkStatistics:
    """The controller link at one moment (BrokerStatistics.controller)."""

    controller_leader: str | None
    role: str
    broker_controller_id: int | None
    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set: tuple[int, ...]
    sync_state_set_epoch: int
    #: Seconds since the controller leader last answered a heartbeat (None: never).
    last_heartbeat_age: float | None
    fenced: bool
    role_changes: int
    truncations: int


def read_broker_identity(path: Path, cluster: str, broker_name: str) -> int | None:
    """The controller id in ``path`` (None without one); refuses a file of another group."""

    def parse(data: bytes) -> tuple[str, str, int]:
        parts = data.decode().strip().split("#")
        if len(parts) != 3:
            raise ValueError(f"not clusterName#brokerName#brokerId: {data[:80]!r}")
        return parts[0], parts[1], int(parts[2])

    try:
        found = load_json_config(path, parse)
    except Exception as exc:
        raise ConfigError(f"storePathBrokerIdentity: {path} cannot be read ({exc})") from exc
    if found is None:
        return None
    file_cluster, file_name, broker_id = found
    if (file_cluster, file_name) != (cluster, broker_name):
        key = "brokerClusterName" if file_cluster != cluster else "brokerName"
        raise ConfigError(
            f"{key}: the broker identity file {path} belongs to broker {file_name} of cluster "
            f"{file_cluster}, not {broker_name} of cluster {cluster}; start it with that "
            "cluster and broker name, or give this broker a store of its own "
            "(storePathRootDir or storePathBrokerIdentity)"
        )
    return broker_id


def write_broker_identity(path: Path, cluster: str, broker_name: str, broker_id: int) -> None:
    """Write ``clusterName#brokerName#brokerId`` atomically (tmp, fsync, rename)."""
    save_json_config(path, f"{cluster}#{broker_name}#{broker_id}".encode())


class ControlledMasterAddresses:
    """The master a controller-mode slave follows: the controller names it, the registries'
    answer to the slave's registration gives its HA address (taken only when that answer
    names the same master, so a registry's stale route is never followed)."""

    def __init__(self, registration: Registration) -> None:
        self.registration = registration
        #: Set once the link is built (it needs the HA parts, which need this).
        self.link: ControllerLink | None = None

    @property
    def master_addr(self) -> str | None:
        """The master's remoting address, while this broker is a slave."""
        link = self.link
        if link is None or link.role is not ControllerRole.SLAVE:
            return None
        return link.master_address

    @property
    def master_ha_addr(self) -> str | None:
        """The master's HA address, once a registry's answer named the same master."""
        master = self.master_addr
        if master is None or self.registration.master_addr != master:
            return None
        return self.registration.master_ha_addr


class ControllerLink:
    """A controller-mode broker's link to its controllers; see the module docstring."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        store: MessageStore,
        ha: HighAvailability,
        registration: Registration,
        epochs: EpochFile,
        invoke: Invoke,
        on_master: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.config = config
        #: Awaited before a newly elected master takes writes (the dedup index's rebuild).
        self.on_master = on_master
        self.store = store
        self.ha = ha
        self.registration = registration
        self.epochs = epochs
        #: Requests to controllers (and to the master, for its epoch cache).
        self.invoke = invoke
        #: SYNC (SYNC_MASTER or SLAVE in broker.conf) or ASYNC replication, fixed at start.
        self.sync_replication = config.broker_role is not BrokerRole.ASYNC_MASTER
        self.addresses = config.controller_list
        self.leader: str | None = None
        self.broker_controller_id: int | None = None
        self.role = ControllerRole.NONE
        self.fenced = False
        self.master_broker_id: int | None = None
        self.master_address: str | None = None
        self.master_epoch = 0
        self.sync_state_set: frozenset[int] = frozenset()
        self.sync_state_set_epoch = 0
        self.role_changes = 0
        self.truncations = 0
        #: trio time of the leader's last heartbeat answer (None: never).
        self.last_heartbeat_ok: float | None = None
        #: Called after every role change (services that act only on a master, say).
        self.on_role_change: list[Callable[[], object]] = []
        self._lock = trio.Lock()
        # When this broker last became master, and when each member was last seen in sync.
        self._master_since = 0.0
        self._last_in_sync: dict[int, float] = {}
        self._no_master_reason = ""
        self._fence_reason = ""
        self._heartbeat_answered = trio.Event()
        # Read now, so a broker whose files name another group (or do not parse) refuses
        # to start with the key named, before anything runs.
        self._identity = read_broker_identity(
            config.broker_identity_path, config.broker_cluster_name, config.broker_name
        )
        self.broker_controller_id = self._identity
        try:
            epochs.load()
        except EpochFileError as exc:
            raise ConfigError(str(exc)) from exc
        self._notices_in, self._notices = trio.open_memory_channel[
            tuple[NotifyBrokerRoleChangedRequestHeader, SyncStateSet]
        ](16)
        self.follow()

    # -- what the broker's parts read ------------------------------------------------------

    @property
    def is_master(self) -> bool:
        """Whether this broker takes writes now."""
        return self.role is ControllerRole.MASTER and not self.fenced

    def write_refusal(self) -> str:
        """Why a send is refused here (the send handler's remark)."""
        c = self.config
        if self.fenced:
            return (
                f"broker {c.broker_name} is fenced ({self._fence_reason}); it takes no writes "
                "until the controller names a master; send to the group's master"
            )
        if self.role is ControllerRole.SLAVE:
            return (
                f"broker {c.broker_name} is a slave (controller mode, master "
                f"{self.master_address} at epoch {self.master_epoch}); send to its master"
            )
        return (
            f"broker {c.broker_name} waits for the controller to name a master "
            f"(controllerAddr {c.controller_addr}); send to the group's master"
        )

    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's controller-mode keys."""
        info = {
            "enableControllerMode": "true",
            "brokerControllerId": str(self.broker_controller_id or ""),
            "controllerLeaderAddress": self.leader or "",
            "controllerRole": self.role.value,
            "masterEpoch": str(self.master_epoch),
            "masterBrokerId": "" if self.master_broker_id is None else str(self.master_broker_id),
            "masterAddress": self.master_address or "",
            "syncStateSet": ",".join(str(i) for i in sorted(self.sync_state_set)),
            "syncStateSetEpoch": str(self.sync_state_set_epoch),
            "fenced": str(self.fenced).lower(),
        }
        age = self._heartbeat_age()
        info["controllerHeartbeatAgeMillis"] = "" if age is None else str(int(age * 1000))
        return info

    def statistics(self) -> ControllerLinkStatistics:
        """The link's state: leader, role, epoch, SyncStateSet, heartbeat age, fencing."""
        return ControllerLinkStatistics(
            controller_leader=self.leader,
            role=self.role.value,
            broker_controller_id=self.broker_controller_id,
            master_broker_id=self.master_broker_id,
            master_address=self.master_address,
            master_epoch=self.master_epoch,
            sync_state_set=tuple(sorted(self.sync_state_set)),
            sync_state_set_epoch=self.sync_state_set_epoch,
            last_heartbeat_age=self._heartbeat_age(),
            fenced=self.fenced,
            role_changes=self.role_changes,
            truncations=self.truncations,
        )

    def _heartbeat_age(self) -> float | None:
        if self.last_heartbeat_ok is None:
            return None
        return trio.current_time() - self.last_heartbeat_ok

    # -- the controller's notice (NOTIFY_BROKER_ROLE_CHANGED, a oneway request) ------------

    def notify_role_changed(self, request: RemotingCommand) -> None:
        """Queue the controller's role notice for the link's task (never blocks the reader)."""
        header = decode_header(NotifyBrokerRoleChangedRequestHeader, request.ext_fields)
        body = SyncStateSet.from_json(request.body) if request.body else SyncStateSet()
        try:
            self._notices_in.send_nowait((header, body))
        except trio.WouldBlock:
            log.warning("controller notices queue full; the next replica-info poll catches up")

    # -- life ------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Identity, registration, then heartbeats, polls and notices until cancelled.

        Ready once the broker id is known and the first registration was tried, so the broker
        reports ready as master or slave when a controller answers.
        """
        c = self.config
        await self._ensure_identity()
        try:
            with trio.move_on_after(c.controller_heart_beat_timeout_mills / 1000):
                # Alive to the controller first: it elects only brokers it hears from.
                await self._heartbeat_round()
                await self._register()
        except ControllerUnavailable as exc:
            log.warning("controller registration: %s; retrying every %d ms", exc,
                        c.sync_broker_metadata_period)  # fmt: skip
        task_status.started()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._heartbeat_loop)
            nursery.start_soon(self._fence_watch)
            nursery.start_soon(self._notice_loop)
            nursery.start_soon(self._metadata_loop)
            nursery.start_soon(self._sync_state_set_loop)
            nursery.start_soon(self._learn_master_loop)

    def follow(self) -> None:
        """Take no writes (SLAVE to every check) with the broker's own controller id."""
        c = self.config
        c.broker_role = BrokerRole.SLAVE
        self.store.config.broker_role = BrokerRole.SLAVE  # before the store runs: no put yet
        if self.broker_controller_id is not None:
            c.broker_id = self.broker_controller_id
        elif c.broker_id == 0:
            # Never the registries' master before the controller says so.
            c.broker_id = FIRST_BROKER_ID

    # -- identity --------------------------------------------------------------------------

    async def _ensure_identity(self) -> None:
        c = self.config
        path = c.broker_identity_path
        broker_id = self._identity
        while broker_id is None:
            try:
                broker_id = await self._apply_broker_id()
            except ControllerUnavailable as exc:
                log.warning("no broker id yet (%s); asking again in %.1f s", exc, RETRY_INTERVAL)
                await trio.sleep(RETRY_INTERVAL)
                continue
            if broker_id is not None:
                await trio.to_thread.run_sync(
                    write_broker_identity, path, c.broker_cluster_name, c.broker_name, broker_id
                )
                self._identity = broker_id
                log.info("broker id %d given by the controller, kept in %s", broker_id, path)
        self.broker_controller_id = broker_id
        c.broker_id = broker_id
        # Said on every HA link (the master counts acknowledgements per broker id).
        if self.ha.client is not None:
            self.ha.client.hello_broker_id = broker_id
        if self.ha.service is not None:
            self.ha.service.local_broker_id = broker_id

    async def _apply_broker_id(self) -> int | None:
        c = self.config
        request = RemotingCommand.request(
            RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
            encode_header(
                GetNextBrokerIdRequestHeader(
                    cluster_name=c.broker_cluster_name, broker_name=c.broker_name
                )
            ),
        )
        response, _ = await self._invoke(request, write=True)
        if response.code != ResponseCode.SUCCESS:
            log.warning("CONTROLLER_GET_NEXT_BROKER_ID refused: %s", response.remark)
            await trio.sleep(RETRY_INTERVAL)
            return None
        answer = decode_header(GetNextBrokerIdResponseHeader, response.ext_fields)
        if answer.next_broker_id is None:
            return None
        return answer.next_broker_id if await self._claim(answer.next_broker_id) else None

    async def _claim(self, broker_id: int) -> bool:
        """CONTROLLER_APPLY_BROKER_ID for ``broker_id``; False when another broker holds it."""
        c = self.config
        check_code = f"{c.broker_addr};{int(time.time() * 1000)}"
        request = RemotingCommand.request(
            RequestCode.CONTROLLER_APPLY_BROKER_ID,
            encode_header(
                ApplyBrokerIdRequestHeader(
                    cluster_name=c.broker_cluster_name,
                    broker_name=c.broker_name,
                    applied_broker_id=broker_id,
                    register_check_code=check_code,
                )
            ),
        )
        response, _ = await self._invoke(request, write=True)
        if response.code != ResponseCode.SUCCESS:
            # Another broker took that id first: a new broker asks for the next one.
            log.info("broker id %d not applied: %s", broker_id, response.remark)
            return False
        return True

    # -- registration and elections --------------------------------------------------------

    async def _register(self, *, again: bool = True) -> None:
        c = self.config
        assert self.broker_controller_id is not None
        request = RemotingCommand.request(
            RequestCode.CONTROLLER_REGISTER_BROKER,
            encode_header(
                RegisterBrokerToControllerRequestHeader(
                    cluster_name=c.broker_cluster_name,
                    broker_name=c.broker_name,
                    broker_id=self.broker_controller_id,
                    broker_address=c.broker_addr,
                    invoke_time=int(time.time() * 1000),
                )
            ),
        )
        response, address = await self._invoke(request, write=True)
        if response.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED and again:
            # A controller that lost its state (a single one restarted): claim our id again.
            if await self._claim(self.broker_controller_id):
                await self._register(again=False)
            return
        if response.code != ResponseCode.SUCCESS:
            log.warning("controller %s refused the registration: %s", address, response.remark)
            return
        answer = decode_header(RegisterBrokerToControllerResponseHeader, response.ext_fields)
        sync_state_set = _sync_state_set(response.body)
        if answer.master_broker_id is None or not answer.master_address:
            await self._elect()
            return
        await self._change_role(
            answer.master_broker_id,
            answer.master_address,
            answer.master_epoch or 0,
            sync_state_set,
            from_leader=True,
        )

    async def _elect(self) -> None:
        c = self.config
        request = RemotingCommand.request(
            RequestCode.CONTROLLER_ELECT_MASTER,
            encode_header(
                ElectMasterRequestHeader(
                    cluster_name=c.broker_cluster_name,
                    broker_name=c.broker_name,
                    broker_id=self.broker_controller_id or -1,
                    designate_elect=False,
                    invoke_time=int(time.time() * 1000),
                )
            ),
        )
        response, _ = await self._invoke(request, write=True)
        answer = decode_header(ElectMasterResponseHeader, response.ext_fields)
        if answer.master_broker_id is None or not answer.master_address:
            why = response.remark or ResponseCode(response.code).name
            if why != self._no_master_reason:  # said once, not at every poll
                self._no_master_reason = why
                log.info("no master for %s yet (%s); the controller elects once one can be",
                         c.broker_name, why)  # fmt: skip
            return
        self._no_master_reason = ""
        members = SyncStateSet(
            sync_state_set=_elect_body_members(response.body),
            sync_state_set_epoch=answer.sync_state_set_epoch or 0,
        )
        await self._change_role(
            answer.master_broker_id,
            answer.master_address,
            answer.master_epoch or 0,
            members,
            from_leader=True,
        )

    async def _change_role(
        self,
        master_id: int,
        master_address: str,
        epoch: int,
        sync_state_set: SyncStateSet,
        *,
        from_leader: bool,
    ) -> None:
        """Act on the controller's word: a higher epoch, or the same one while we wait."""
        async with self._lock:
            me = master_id == self.broker_controller_id
            same_epoch = epoch == self.master_epoch
            if epoch < self.master_epoch:
                return
            if same_epoch:
                if me and self.is_master:
                    self._take_sync_state_set(sync_state_set)
                    return
                if (
                    not me
                    and self.role is ControllerRole.SLAVE
                    and self.master_broker_id == master_id
                ):
                    return
            if me:
                if not from_leader:
                    return  # a follower controller's copy may be stale: wait for the leader
                if not self._heartbeat_fresh():
                    return  # we would fence ourselves at once
                await self._to_master(epoch, sync_state_set)
            else:
                await self._to_slave(master_id, master_address, epoch)

    def _take_sync_state_set(self, sync_state_set: SyncStateSet) -> None:
        if sync_state_set.sync_state_set_epoch > self.sync_state_set_epoch:
            self.sync_state_set = frozenset(sync_state_set.sync_state_set)
            self.sync_state_set_epoch = sync_state_set.sync_state_set_epoch
            if self.ha.service is not None:
                self.ha.service.confirmed_sync_state_set = self.sync_state_set
            log.info("SyncStateSet of %s is now %s (epoch %d)", self.config.broker_name,
                     sorted(self.sync_state_set), self.sync_state_set_epoch)  # fmt: skip

    async def _to_master(self, epoch: int, sync_state_set: SyncStateSet) -> None:
        c = self.config
        me = self.broker_controller_id
        assert me is not None
        # A fenced master's HA service still runs, its slave links up: it is kept.
        serving = self.ha.role is HARole.MASTER
        if not serving:
            # The HA client stops first: nothing is appended behind the epoch entry's offset.
            await self.ha.switch(HARole.NONE)
        start = self.store.get_max_phy_offset()
        if epoch > self.epochs.last_epoch():
            await trio.to_thread.run_sync(self.epochs.append, epoch, start)
        members = frozenset(sync_state_set.sync_state_set) | {me}
        service = self.ha.service
        if service is not None:
            service.sync_master = self.sync_replication
            service.local_broker_id = me
            if not serving:
                # Acknowledgements of an earlier mastership say nothing of this log any more.
                service.push_to_slave_max_offset = 0
            service.confirmed_sync_state_set = members
            service.unfence()
        await self.ha.switch(HARole.MASTER)
        # Members not seen in sync yet get haMaxTimeSlaveNotCatchup from now to show up.
        self._master_since = trio.current_time()
        self._last_in_sync.clear()
        self.sync_state_set = members
        self.sync_state_set_epoch = sync_state_set.sync_state_set_epoch
        self.master_epoch = epoch
        self.master_broker_id = me
        self.master_address = c.broker_addr
        role = BrokerRole.SYNC_MASTER if self.sync_replication else BrokerRole.ASYNC_MASTER
        # The store takes puts again once its queues' next offsets are rebuilt.
        await self.store.change_role(role)
        if not serving and self.on_master is not None:
            await self.on_master()
        c.broker_role = role
        c.broker_id = 0
        self.role = ControllerRole.MASTER
        self.fenced = False
        self.role_changes += 1
        self.registration.role_changed()
        self._tell_role_change()
        log.info(
            "broker %s (controller id %d) is master at epoch %d from commit-log offset %d; "
            "SyncStateSet %s", c.broker_name, me, epoch, start, sorted(members),
        )  # fmt: skip

    async def _to_slave(self, master_id: int, master_address: str, epoch: int) -> None:
        c = self.config
        was_master = self.role is ControllerRole.MASTER
        await self._stop_writes(f"master epoch {epoch} belongs to broker {master_id}")
        self.role = ControllerRole.NONE
        await self.ha.switch(HARole.NONE)
        if was_master:
            self.registration.role_changed()
            self._tell_role_change()
        try:
            # The last point both logs agree on; nothing is replicated before it is reached.
            with trio.fail_after(c.controller_heart_beat_timeout_mills / 1000):
                await self._truncate_to(master_address)
        except (NoCommonHistory, trio.TooSlowError, EpochFileError, StoreError) as exc:
            # Not following beats a crash loop: the broker keeps serving reads, the poll
            # tries again, and the line says what an operator must look at.
            reason = str(exc) or f"master {master_address} did not answer its epoch cache"
            log.error("broker %s does not follow %s yet: %s", c.broker_name, master_address,
                      reason)  # fmt: skip
            return  # the next replica-info poll tries again
        self.master_broker_id = master_id
        self.master_address = master_address
        self.master_epoch = epoch
        self.fenced = False
        self.sync_state_set = frozenset()
        self.role = ControllerRole.SLAVE
        self.role_changes += 1
        if self.ha.client is not None:
            self.ha.client.hello_broker_id = self.broker_controller_id
        await self.ha.switch(HARole.SLAVE)
        self.registration.role_changed()
        self._tell_role_change()
        log.info("broker %s (controller id %s) follows master %s (id %d) at epoch %d",
                 c.broker_name, self.broker_controller_id, master_address, master_id,
                 epoch)  # fmt: skip

    async def _stop_writes(self, reason: str) -> None:
        """Refuse writes from now on: checks at once, waiting sends as failed, then the store."""
        self._refuse_writes(reason)
        # Puts already taken complete (and are answered as failed by the send handler).
        await self.store.change_role(BrokerRole.SLAVE)

    def _refuse_writes(self, reason: str) -> None:
        # No await: from the next request on every write check refuses.
        c = self.config
        c.broker_role = BrokerRole.SLAVE
        if self.broker_controller_id is not None:
            c.broker_id = self.broker_controller_id
        service = self.ha.service
        if service is not None and self.role is ControllerRole.MASTER:
            service.fence(reason)

    async def fence(self, reason: str) -> None:
        """Stop taking writes at once and wait for the controller's word."""
        if self.role is not ControllerRole.MASTER or self.fenced:
            return
        c = self.config
        # Flipped before anything awaits: every check from here on refuses writes, and every
        # send waiting for a slave is answered as failed.
        self.fenced = True
        self._fence_reason = reason
        self._refuse_writes(f"fenced: {reason}")
        log.warning(
            "broker %s fenced at epoch %d: %s; writes stopped (bound: controllerHeartBeatTimeout"
            "Mills/2 = %d ms + one brokerHeartbeatInterval = %d ms after the last answer); "
            "waiting for the controller", c.broker_name, self.master_epoch, reason,
            c.controller_heart_beat_timeout_mills // 2, c.broker_heartbeat_interval,
        )  # fmt: skip
        async with self._lock:
            # The HA service keeps running (fenced: it acknowledges nothing), so the slave
            # links stay up for a return to mastership at this epoch.
            await self._stop_writes(f"fenced: {reason}")
            self.registration.role_changed()
            self._tell_role_change()

    def _tell_role_change(self) -> None:
        for callback in self.on_role_change:
            callback()

    # -- loops -----------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        interval = self.config.broker_heartbeat_interval / 1000
        while True:
            await self._heartbeat_round()
            await trio.sleep(interval)

    async def _heartbeat_round(self) -> None:
        c = self.config
        header = encode_header(
            BrokerHeartbeatRequestHeader(
                cluster_name=c.broker_cluster_name,
                broker_addr=c.broker_addr,
                broker_name=c.broker_name,
                broker_id=self.broker_controller_id,
                epoch=self.epochs.last_epoch(),
                max_offset=self.store.get_max_phy_offset(),
                confirm_offset=self.store.get_max_phy_offset(),
                heartbeat_timeout_mills=c.controller_heart_beat_timeout_mills,
                election_priority=c.broker_election_priority,
            )
        )
        answered: set[str] = set()
        # A late answer still counts, from the time its request went out.
        timeout = c.controller_heart_beat_timeout_mills / 2000

        async def beat(address: str) -> None:
            request = RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, dict(header))
            try:
                response = await self.invoke(address, request, timeout)
            except (RemotingError, OSError):
                return
            if response.code == ResponseCode.SUCCESS:
                answered.add(address)

        sent_at = trio.current_time()
        async with trio.open_nursery() as nursery:
            for address in self.addresses:
                nursery.start_soon(beat, address)
        if self.leader not in answered and answered:
            await self._find_leader()
        if self.leader in answered or (len(self.addresses) == 1 and answered):
            if len(self.addresses) == 1:
                self.leader = self.addresses[0]
            self.last_heartbeat_ok = sent_at
            self._heartbeat_answered.set()
            self._heartbeat_answered = trio.Event()

    async def _find_leader(self) -> None:
        """Ask the controllers who leads (CONTROLLER_GET_METADATA_INFO)."""
        for address in self.addresses:
            request = RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO)
            try:
                response = await self.invoke(address, request, CONTROLLER_TIMEOUT)
            except (RemotingError, OSError):
                continue
            if response.code != ResponseCode.SUCCESS:
                continue
            answer = decode_header(GetMetaDataResponseHeader, response.ext_fields)
            if answer.controller_leader_address:
                if answer.controller_leader_address != self.leader:
                    log.info("controller leader is %s", answer.controller_leader_address)
                self.leader = answer.controller_leader_address
                return

    def _heartbeat_fresh(self) -> bool:
        age = self._heartbeat_age()
        half = self.config.controller_heart_beat_timeout_mills / 2000
        return age is not None and age < half

    async def _fence_watch(self) -> None:
        half = self.config.controller_heart_beat_timeout_mills / 2000
        while True:
            if self.role is not ControllerRole.MASTER or self.fenced:
                with trio.move_on_after(half / 2):
                    await self._heartbeat_answered.wait()
                continue
            last = self.last_heartbeat_ok
            if last is None or trio.current_time() >= last + half:
                age = "never" if last is None else f"{(trio.current_time() - last) * 1000:.0f} ms"
                await self.fence(f"the controller leader last answered a heartbeat {age} ago")
                continue
            with trio.move_on_after(last + half - trio.current_time()):
                await self._heartbeat_answered.wait()

    async def _notice_loop(self) -> None:
        async for header, body in self._notices:
            if header.master_broker_id is None or not header.master_address:
                continue
            await self._change_role(
                header.master_broker_id,
                header.master_address,
                header.master_epoch or 0,
                attrs.evolve(body, sync_state_set_epoch=header.sync_state_set_epoch or 0),
                from_leader=True,
            )

    async def _metadata_loop(self) -> None:
        period = self.config.sync_broker_metadata_period / 1000
        controller_period = self.config.sync_controller_metadata_period / 1000
        next_leader_check = trio.current_time()
        while True:
            await trio.sleep(period)
            if trio.current_time() >= next_leader_check:
                next_leader_check = trio.current_time() + controller_period
                await self._find_leader()
            try:
                await self._sync_replica_info()
            except ControllerUnavailable as exc:
                log.debug("replica info not refreshed: %s", exc)

    async def _sync_replica_info(self) -> None:
        c = self.config
        request = RemotingCommand.request(
            RequestCode.CONTROLLER_GET_REPLICA_INFO,
            encode_header(GetReplicaInfoRequestHeader(broker_name=c.broker_name)),
        )
        response, address = await self._invoke(request, write=False)
        if response.code in (
            ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST,
            ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
        ):
            await self._register()  # the controller lost us (restarted without its state)
            return
        if response.code != ResponseCode.SUCCESS:
            return
        answer = decode_header(GetReplicaInfoResponseHeader, response.ext_fields)
        sync_state_set = _sync_state_set(response.body)
        if answer.master_broker_id is None or not answer.master_address:
            if self.role is not ControllerRole.MASTER or self.fenced:
                await self._elect()
            return
        await self._change_role(
            answer.master_broker_id,
            answer.master_address,
            answer.master_epoch or 0,
            sync_state_set,
            from_leader=address == self.leader,
        )

    async def _sync_state_set_loop(self) -> None:
        period = self.config.check_sync_state_set_period / 1000
        while True:
            await trio.sleep(period)
            service = self.ha.service
            if not self.is_master or service is None:
                continue
            wanted = self._wanted_sync_state_set(service.sync_state_set())
            if wanted == self.sync_state_set:
                continue
            try:
                await self._alter_sync_state_set(wanted)
            except ControllerUnavailable as exc:
                log.info("SyncStateSet %s not reported: %s", sorted(wanted), exc)

    def _wanted_sync_state_set(self, in_sync: set[int]) -> frozenset[int]:
        """The members caught up now, plus those out of sync for less than
        haMaxTimeSlaveNotCatchup (a slave whose link just broke, or not relinked yet after
        this broker became master, keeps its place that long)."""
        now = trio.current_time()
        for member in in_sync:
            self._last_in_sync[member] = now
        window = self.config.ha_max_time_slave_not_catchup / 1000
        keep = {
            member
            for member in self.sync_state_set
            if now - self._last_in_sync.get(member, self._master_since) <= window
        }
        return frozenset(in_sync | keep)

    async def _alter_sync_state_set(self, wanted: frozenset[int]) -> None:
        c = self.config
        assert self.broker_controller_id is not None
        body = SyncStateSet(
            sync_state_set=sorted(wanted), sync_state_set_epoch=self.sync_state_set_epoch
        )
        request = RemotingCommand.request(
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
            encode_header(
                AlterSyncStateSetRequestHeader(
                    broker_name=c.broker_name,
                    master_broker_id=self.broker_controller_id,
                    master_epoch=self.master_epoch,
                    invoke_time=int(time.time() * 1000),
                )
            ),
            body.to_json(),
        )
        response, _ = await self._invoke(request, write=True)
        if response.code == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH:
            await self.fence(f"the controller knows a newer master epoch ({response.remark})")
            return
        if response.code != ResponseCode.SUCCESS:
            log.info("SyncStateSet %s refused by the controller: %s", sorted(wanted),
                     response.remark)  # fmt: skip
            return
        answer = decode_header(AlterSyncStateSetResponseHeader, response.ext_fields)
        before = sorted(self.sync_state_set)
        self.sync_state_set = wanted
        self.sync_state_set_epoch = answer.new_sync_state_set_epoch
        if self.ha.service is not None:
            self.ha.service.confirmed_sync_state_set = wanted
        log.info("SyncStateSet of %s: %s -> %s (epoch %d)", c.broker_name, before,
                 sorted(wanted), self.sync_state_set_epoch)  # fmt: skip

    async def _learn_master_loop(self) -> None:
        # A slave learns its master's HA address from a registry; until a registry's answer
        # names the master the controller named, it asks again.
        while True:
            await trio.sleep(RETRY_INTERVAL * 2)
            if self.role is not ControllerRole.SLAVE:
                continue
            if self.registration.master_addr != self.master_address:
                self.registration.role_changed()

    # -- truncation ------------------------------------------------------------------------

    async def _truncate_to(self, master_address: str) -> None:
        """Cut this broker's log back to the last offset it shares with the master's."""
        while True:
            request = RemotingCommand.request(RequestCode.GET_BROKER_EPOCH_CACHE)
            try:
                response = await self.invoke(master_address, request, CONTROLLER_TIMEOUT)
            except (RemotingError, OSError) as exc:
                log.info("epoch cache of master %s not read (%s); again in %.1f s",
                         master_address, exc, RETRY_INTERVAL)  # fmt: skip
                await trio.sleep(RETRY_INTERVAL)
                continue
            if response.code != ResponseCode.SUCCESS or not response.body:
                log.info("master %s has no epoch cache yet (%s); again in %.1f s",
                         master_address, response.remark, RETRY_INTERVAL)  # fmt: skip
                await trio.sleep(RETRY_INTERVAL)
                continue
            break
        master = EpochEntryCache.from_json(bytes(response.body))
        await self._truncate_against(master)

    async def _truncate_against(self, master: EpochEntryCache) -> None:
        store, epochs = self.store, self.epochs
        ours = store.get_max_phy_offset()
        point = consistent_offset(epochs.entries(ours), ours, master.epoch_list, master.max_offset)
        if point < 0:
            raise NoCommonHistory(
                f"broker {self.config.broker_name} (controller id {self.broker_controller_id}) "
                f"shares no epoch with master {master.broker_id}: ours "
                f"{[(e.epoch, e.start_offset) for e in epochs.entries(ours)]}, the master's "
                f"{[(e.epoch, e.start_offset) for e in master.epoch_list]}; it will not "
                "follow. Move its store aside to make it a new replica"
            )
        if ours > point:
            epoch = epochs.last_epoch()
            cut = await store.truncate_commit_log(point)
            await trio.to_thread.run_sync(epochs.truncate_suffix_from, point)
            self.truncations += 1
            log.warning("truncated commit log from %d to %d (epoch %d): the bytes after it "
                        "were never on master %d", ours, cut, epoch, master.broker_id)  # fmt: skip
        await trio.to_thread.run_sync(epochs.replace_all, master.epoch_list)

    # -- requests to the controllers -------------------------------------------------------

    async def _invoke(
        self, request: RemotingCommand, *, write: bool
    ) -> tuple[RemotingCommand, str]:
        """Ask the leader first, then the others; (answer, who answered).

        A follower's CONTROLLER_NOT_LEADER moves on to the leader it names (or the next)."""
        order = list(self.addresses)
        if self.leader in order:
            order.remove(self.leader)
            order.insert(0, self.leader)
        tried: set[str] = set()
        problems: list[str] = []
        while order:
            address = order.pop(0)
            if address in tried:
                continue
            tried.add(address)
            try:
                response = await self.invoke(address, request, CONTROLLER_TIMEOUT)
            except (RemotingError, OSError) as exc:
                problems.append(f"{address}: {exc}")
                if address == self.leader:
                    self.leader = None
                continue
            if response.code == ResponseCode.CONTROLLER_NOT_LEADER:
                problems.append(f"{address}: not the leader")
                if address == self.leader:
                    self.leader = None
                hint = leader_named(response.remark)
                if hint is not None and hint not in tried:
                    order.insert(0, hint)
                continue
            if write:
                self.leader = address
            return response, address
        raise ControllerUnavailable("; ".join(problems) or "no controller address")


def _sync_state_set(body: bytes | bytearray | memoryview | None) -> SyncStateSet:
    if not body:
        return SyncStateSet()
    return SyncStateSet.from_json(bytes(body))


def _elect_body_members(body: bytes | bytearray | memoryview | None) -> list[int]:
    if not body:
        return []
    return list(ElectMasterResponseBody.from_json(bytes(body)).sync_state_set)


def epoch_cache(link: ControllerLink) -> EpochEntryCache:
    """This broker's epoch entries and commit-log end (GET_BROKER_EPOCH_CACHE's body)."""
    c = link.config
    return link.epochs.to_cache(
        c.broker_cluster_name,
        c.broker_name,
        link.broker_controller_id or 0,
        link.store.get_max_phy_offset(),
    )
