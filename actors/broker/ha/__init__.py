"""High availability of one broker: which HA parts its role runs, their stats and hooks.

A master (ASYNC_MASTER or SYNC_MASTER) runs `ha_master.HAService`; a slave runs
`ha_slave.HAClient` and `ha_sync.SlaveSynchronize`. Each is a child of the broker's supervisor,
so a failed replication link restarts alone while the broker keeps serving.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from actors.broker.ha.master import HAService, HAStatistics
from actors.broker.ha.slave import HAClient, HAClientStatistics
from actors.broker.ha.sync import SlaveSynchronize
from protocol.command import RemotingCommand
from protocol.connection import Connection
from storage import MessageExtBrokerInner, PutMessageResult
from supervisors.supervisor import ChildSpec

if TYPE_CHECKING:
    from actors.broker.service import Broker

__all__ = ["HAClientStatistics", "HAStatistics", "HighAvailability", "ha_runtime_info"]


class HighAvailability:
    """The HA parts of one broker (None where its role has none)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        slave = broker.config.is_slave
        self.service: HAService | None = None if slave else HAService(broker)
        self.client: HAClient | None = HAClient(broker) if slave else None
        self.sync: SlaveSynchronize | None = SlaveSynchronize(broker) if slave else None

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
        store = self.broker.store
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

    def get_all_delay_offset(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """GET_ALL_DELAY_OFFSET: what a slave's config sync reads besides the admin tables."""
        return request.response(body=self.broker.schedule.delay_offsets.to_json())


def ha_runtime_info(broker: Broker) -> dict[str, str]:
    """Runtime-info keys of replication: slave lag on a master, link state on a slave."""
    info: dict[str, str] = {}
    service, client = broker.ha.service, broker.ha.client
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
