"""Several controllers agree on the replicas state through Raft (pysyncobj).

Each controller runs a `pysyncobj.SyncObj` on its Raft port (its controllerDLegerPeers
entry); the replicated method `_Replicas.apply_events` carries a write's events, and every
controller applies them to its own `ReplicaTable` in log order once a majority holds them.
pysyncobj keeps its journal and dumps under controllerStorePath, so a restarted controller
replays its log (and what the leader sends it) and rejoins with the same state.

Threads: pysyncobj ticks in a thread of its own, and applies committed events there (under
the journal's ``lock``, which the service takes to read). A write's callback hops back to
trio through the run's token. Only the leader writes; a follower's write never gets here
(the service answers CONTROLLER_NOT_LEADER first).

Leader's remoting address: a follower names the leader's remoting address to brokers. Each
controller commits its own (`ControllerAddressEvent`, forwarded to the leader by pysyncobj
from a follower) once at start, so the map travels in the replicated state and needs no key.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import trio
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjConsumer, replicated

from actors.controller.config import ConfigError, ControllerConfig
from actors.controller.replicas import ControllerAddressEvent, Event, ReplicaTable
from protocol.codes import ResponseCode
from protocol.command import RemotingError

log = logging.getLogger("boltmq.controller")

__all__ = ["RaftJournal"]

#: Seconds between attempts to commit this controller's remoting address.
ANNOUNCE_RETRY = 0.5

_NOT_LEADER_REASONS = {
    FAIL_REASON.MISSING_LEADER,
    FAIL_REASON.NOT_LEADER,
    FAIL_REASON.LEADER_CHANGED,
    FAIL_REASON.DISCARDED,
}


class _Replicas(SyncObjConsumer):  # type: ignore[misc]
    """The replicated part: the table, changed only by `apply_events` in log order.

    A consumer, not the SyncObj itself, so the table exists before pysyncobj's thread starts
    (it may replay the journal or load a dump at once) and is all its dumps hold."""

    def __init__(self, lock: threading.Lock) -> None:
        # Set before SyncObjConsumer.__init__: pysyncobj leaves attributes that exist by then
        # out of its dumps, and a lock cannot be dumped.
        self.lock = lock
        super().__init__()
        self.table = ReplicaTable()

    @replicated  # type: ignore[untyped-decorator]
    def apply_events(self, events: tuple[Event, ...]) -> int:
        with self.lock:
            self.table.apply_all(events)
            return self.table.applied


class RaftJournal:
    """The `actors.controller.journal.Journal` of a controller among several (Raft)."""

    def __init__(self, config: ControllerConfig) -> None:
        peer = config.self_peer
        if peer is None:
            raise ConfigError("controllerDLegerSelfId names no entry of controllerDLegerPeers")
        if not config.controller_store_path:
            raise ConfigError(
                "controllerStorePath is empty; several controllers (controllerDLegerPeers) "
                "keep their Raft journal there"
            )
        self.config = config
        self.self_peer = peer
        self.lock = threading.Lock()
        self._by_raft_address = {p.address: p.peer_id for p in config.peers}
        self._replicas = _Replicas(self.lock)
        self._state: SyncObj | None = None

    @property
    def table(self) -> ReplicaTable:
        """The state as this controller has applied it (pysyncobj replaces it on a restore)."""
        return self._replicas.table

    def is_leader(self) -> bool:
        """True while pysyncobj says this node leads."""
        state = self._state
        return state is not None and bool(state._isLeader())

    def leader_id(self) -> str | None:
        """The last known leader's peer id."""
        state = self._state
        leader = None if state is None else state._getLeader()
        if leader is None:
            return None
        return self._by_raft_address.get(leader.address)

    def leader_address(self) -> str | None:
        """The last known leader's remoting address, once it has announced it."""
        leader = self.leader_id()
        if leader is None:
            return None
        with self.lock:
            return self.table.controller_addresses.get(leader)

    def peers_text(self) -> str:
        """controllerDLegerPeers as configured."""
        return ";".join(f"{p.peer_id}-{p.address}" for p in self.config.peers)

    async def load(self) -> None:
        """Nothing: pysyncobj reads its journal and dump when `run` starts it."""

    async def commit(self, events: tuple[Event, ...]) -> None:
        """Append ``events`` to the Raft log and wait until they are applied here."""
        state = self._state
        if state is None or not state._isLeader():
            raise RemotingError(
                ResponseCode.CONTROLLER_NOT_LEADER,
                f"this controller is not the leader; the leader is {self.leader_address()}",
            )
        await self._replicate(state, events)

    async def _replicate(self, state: SyncObj, events: tuple[Event, ...]) -> None:
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        outcome: list[Any] = []

        def callback(result: object, error: int) -> None:
            # pysyncobj's thread: hand the outcome to trio.
            def deliver() -> None:
                outcome.append(error)
                done.set()

            try:
                token.run_sync_soon(deliver)
            except trio.RunFinishedError:
                pass  # the controller stopped while the write was in flight

        timeout = self.config.controller_commit_timeout / 1000
        self._replicas.apply_events(events, callback=callback)
        with trio.move_on_after(timeout):
            await done.wait()
        if not outcome:
            raise RemotingError(
                ResponseCode.CONTROLLER_JRAFT_INTERNAL_ERROR,
                f"the change was not committed within {timeout:g} s (controllerCommitTimeout); "
                "a majority of controllers may be down. It may still commit: read before "
                "retrying",
            )
        error = outcome[0]
        if error == FAIL_REASON.SUCCESS:
            return
        if error in _NOT_LEADER_REASONS:
            raise RemotingError(
                ResponseCode.CONTROLLER_NOT_LEADER,
                f"leadership changed before the change committed; the leader is "
                f"{self.leader_address()}; retry there",
            )
        raise RemotingError(
            ResponseCode.CONTROLLER_JRAFT_INTERNAL_ERROR,
            f"the Raft log refused the change (pysyncobj reason {error})",
        )

    async def run(
        self, address: str, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Start pysyncobj on this controller's Raft port, announce ``address``, run until
        cancelled, then stop pysyncobj (its thread and port)."""
        store = Path(os.path.expanduser(self.config.controller_store_path))
        store.mkdir(parents=True, exist_ok=True)
        host = self.self_peer.address.rpartition(":")[0]
        conf = SyncObjConf(
            journalFile=str(store / "raft.journal"),
            fullDumpFile=str(store / "raft.dump"),
            # No fork for dumps: the process runs trio and other threads.
            useFork=False,
            bindAddress=self.self_peer.address if host else None,
            maxBindRetries=10,
            bindRetryTime=0.5,
            dynamicMembershipChange=False,
            # Elections within a couple of seconds of losing the leader.
            raftMinTimeout=0.4,
            raftMaxTimeout=1.4,
            # A leader cut from the majority steps down after 5 s (pysyncobj's default is
            # 30 s), so it stops scanning and answering writes it could not commit anyway.
            leaderFallbackTimeout=5.0,
        )
        others = [p.address for p in self.config.peers if p.peer_id != self.self_peer.peer_id]
        # Built in trio's own thread: pysyncobj's tick thread stops when its creator ends.
        # A fresh consumer per run: a run after a stop replays the journal from empty.
        self._replicas = _Replicas(self.lock)
        state = SyncObj(self.self_peer.address, others, conf, consumers=[self._replicas])
        try:
            try:
                await trio.to_thread.run_sync(state.waitBinded)
            except Exception as exc:
                raise OSError(
                    f"cannot listen on the Raft port {self.self_peer.address} "
                    f"(controllerDLegerPeers entry {self.self_peer.peer_id}): {exc}"
                ) from None
            self._state = state
            task_status.started()
            await self._announce(address)
            await trio.sleep_forever()
        finally:
            self._state = None
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(state.destroy_synchronous)

    async def _announce(self, address: str) -> None:
        # Until this controller's remoting address is in the replicated state: a follower's
        # command goes to the leader through pysyncobj, and none is accepted without one.
        event = ControllerAddressEvent(self.self_peer.peer_id, address)
        token = trio.lowlevel.current_trio_token()
        while True:
            with self.lock:
                if self.table.controller_addresses.get(event.peer_id) == address:
                    return
            done = trio.Event()

            def callback(result: object, error: int, done: trio.Event = done) -> None:
                try:
                    token.run_sync_soon(done.set)
                except trio.RunFinishedError:
                    pass

            self._replicas.apply_events((event,), callback=callback)
            with trio.move_on_after(ANNOUNCE_RETRY * 4):
                await done.wait()
            await trio.sleep(ANNOUNCE_RETRY)
