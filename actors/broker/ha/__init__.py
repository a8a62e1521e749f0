"""High availability of one broker: which HA parts its role runs, their stats and hooks.

A master (ASYNC_MASTER or SYNC_MASTER) runs `master.HAService`, the HA listener and the
SYNC_MASTER's wait for a slave; a slave runs `slave.HAClient`, its replication link, and
`sync.SlaveSynchronize`, the copy of its master's tables. The composition root
(`actors.broker.broker`) builds the parts its role runs and hands them to `HighAvailability`;
each is a child of the broker's supervisor, so a failed replication link restarts alone while
the broker keeps serving. Nothing here answers requests: GET_ALL_DELAY_OFFSET, what a slave's
config sync reads besides the admin tables, is served by `actors.broker.handlers.replication`.
"""

from __future__ import annotations

from collections.abc import Callable

from actors.broker.ha.master import HAService, HAStatistics
from actors.broker.ha.slave import HAClient, HAClientStatistics, MasterAddresses
from actors.broker.ha.sync import SlaveSynchronize
from storage import MessageExtBrokerInner, MessageStore, PutMessageResult
from supervisors.supervisor import ChildSpec

__all__ = [
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

    def children(self) -> list[ChildSpec]:
        """Supervisor children: the HA service, or the HA client and the config sync."""
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
        if self.service is not None:
            return self.service.statistics()
        return self.client.statistics() if self.client is not None else None


def ha_runtime_info(ha: HighAvailability) -> dict[str, str]:
    """Runtime-info keys of replication: slave lag on a master, link state on a slave."""
    info: dict[str, str] = {}
    service, client = ha.service, ha.client
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
