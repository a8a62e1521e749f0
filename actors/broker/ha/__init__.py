"""High availability of one broker: which HA parts its role runs, their stats and hooks.

A master (ASYNC_MASTER or SYNC_MASTER) runs `master.HAService`, the HA listener and the
SYNC_MASTER's wait for a slave; a slave runs `slave.HAClient`, its replication link, and
`sync.SlaveSynchronize`, the copy of its master's tables. The composition root
(`actors.broker.broker`) builds the parts its role runs and hands them to `HighAvailability`;
each is a child of the broker's supervisor, so a failed replication link restarts alone while
the broker keeps serving.

In controller mode (`controller_mode`) the role changes at run time, so a broker holds the parts
of both roles and one child, ``ha-role``, runs those of the current role (`HARole`): the HA
service on a master, the HA client and the config sync on a slave, nothing while the broker
waits for the controller. `HighAvailability.switch` stops the running parts and starts the
other role's, in place, without restarting the broker.

Nothing here answers requests: GET_ALL_DELAY_OFFSET, what a slave's config sync reads besides
the admin tables, is served by `actors.broker.handlers.replication`.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable

import trio

from actors.broker.ha.master import HAService, HAStatistics
from actors.broker.ha.slave import HAClient, HAClientStatistics, MasterAddresses
from actors.broker.ha.sync import SlaveSynchronize
from storage import MessageExtBrokerInner, MessageStore, PutMessageResult
from supervisors.supervisor import ChildSpec

log = logging.getLogger("boltmq.broker.ha")


class HARole(enum.Enum):
    """Which replication parts run: a master's, a slave's, or none (waiting for a role)."""

    MASTER = "master"
    SLAVE = "slave"
    NONE = "none"


__all__ = [
    "HARole",
    "HAClient",
    "HAClientStatistics",
    "HAService",
    "HAStatistics",
    "HighAvailability",
    "MasterAddresses",
    "SlaveSynchronize",
    "ha_runtime_info",
]


class HighAvailability:
    """The HA parts of one broker (None where its role has none)."""

    def __init__(
        self,
        store: MessageStore,
        *,
        service: HAService | None = None,
        client: HAClient | None = None,
        sync: SlaveSynchronize | None = None,
    ) -> None:
        self.store = store
        self.service = service
        self.client = client
        self.sync = sync
        #: Set by `controlled`: the role's parts run under one ``ha-role`` child.
        self.switchable = False
        #: The parts running (controller mode), or the fixed role's.
        self.role = HARole.MASTER if client is None else HARole.SLAVE
        self._role_changed = trio.Event()
        self._role_running: HARole | None = None
        self._role_settled = trio.Event()

    @classmethod
    def controlled(
        cls, store: MessageStore, service: HAService, client: HAClient, sync: SlaveSynchronize
    ) -> HighAvailability:
        """Both roles' parts, run per the role the controller gives; none at first."""
        ha = cls(store, service=service, client=client, sync=sync)
        ha.switchable = True
        ha.role = HARole.NONE
        return ha

    async def switch(self, role: HARole, timeout: float = 30.0) -> None:
        """Stop the running role's parts and start ``role``'s; returns once they run.

        The HA service is bound (a new master's slaves can connect) when this returns; a
        stopped HA service has answered every send waiting for a slave.
        """
        assert self.switchable, "only a controller-mode broker changes its HA role"
        if role is self.role and self._role_running is role:
            return
        self.role = role
        self._role_changed.set()
        with trio.fail_after(timeout):
            while self._role_running is not role:
                await self._role_settled.wait()

    async def run_role(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The ``ha-role`` child: run the current role's parts, restart them on a switch."""
        task_status.started()
        try:
            while True:
                role = self.role
                self._role_changed = trio.Event()
                async with trio.open_nursery() as nursery:
                    if role is HARole.MASTER and self.service is not None:
                        await nursery.start(self.service.run)
                    elif role is HARole.SLAVE and self.client is not None:
                        await nursery.start(self.client.run)
                        if self.sync is not None:
                            await nursery.start(self.sync.run)
                    self._settle(role)
                    await self._role_changed.wait()
                    nursery.cancel_scope.cancel()
                log.info("HA role %s stopped; starting %s", role.value, self.role.value)
        finally:
            self._settle(None)

    def _settle(self, role: HARole | None) -> None:
        self._role_running = role
        self._role_settled.set()
        self._role_settled = trio.Event()

    def children(self) -> list[ChildSpec]:
        """Supervisor children: the HA service, or the HA client and the config sync."""
        if self.switchable:
            return [ChildSpec.function("ha-role", self.run_role)]
        children = []
        if self.service is not None:
            children.append(ChildSpec.instance("ha-service", self.service))
        if self.client is not None:
            children.append(ChildSpec.instance("ha-client", self.client))
        if self.sync is not None:
            children.append(ChildSpec.instance("slave-sync", self.sync))
        return children

    def put_message(
        self, msg: MessageExtBrokerInner, callback: Callable[[PutMessageResult], object]
    ) -> None:
        """Store ``msg``; ``callback`` gets the result when the broker may answer for it.

        For the puts that do not come through the send handler (send-back, a committed
        transaction, a due delayed message): on a SYNC_MASTER that is once a slave has the
        bytes, or with FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE (the message is stored on the
        master all the same); elsewhere once the store has it. RocketMQ lets send-back and
        delayed re-puts skip the wait; holding them means nothing a SYNC_MASTER answered for,
        or recorded as delivered, is missing from its slave.
        """
        service = self.service
        store = self.store
        if service is None or not service.sync_master:
            store.put_message_nowait(msg, callback)
            return

        def stored(result: PutMessageResult) -> None:
            if not service.defer(result, callback):
                callback(result)

        store.put_message_nowait(msg, stored)

    def statistics(self) -> HAStatistics | HAClientStatistics | None:
        """The master's slave links or the slave's link."""
        if self.role is HARole.NONE:
            return None
        if self.service is not None and self.role is HARole.MASTER:
            return self.service.statistics()
        return self.client.statistics() if self.client is not None else None


def ha_runtime_info(ha: HighAvailability) -> dict[str, str]:
    """Runtime-info keys of replication: slave lag on a master, link state on a slave."""
    info: dict[str, str] = {}
    service, client = ha.service, ha.client
    if ha.switchable:  # controller mode: only the running role's parts say anything
        service = service if ha.role is HARole.MASTER else None
        client = client if ha.role is HARole.SLAVE else None
    if service is not None:
        stats = service.statistics()
        info["haConnectionCount"] = str(len(stats.slaves))
        info["haPushToSlaveMaxOffset"] = str(stats.push_to_slave_max_offset)
        if stats.slaves:
            info["haSlaveFallBehindBytes"] = str(max(s.behind_bytes for s in stats.slaves))
            info["haSlaveFallBehindSeconds"] = repr(max(s.behind_seconds for s in stats.slaves))
    if client is not None:
        link = client.statistics()
        info["haMasterAddress"] = link.master_address or ""
        info["haMasterConnected"] = str(link.connected).lower()
        info["haMasterFallBehindBytes"] = str(link.behind_bytes)
    return info
