"""The controller's broker liveness table: plain state, no I/O, no clock (times are passed in).

Each controller keeps its own table from the BROKER_HEARTBEAT requests it receives; the table
is not replicated (every broker beats to every controller), so a new Raft leader already
knows who is alive. A broker counts as alive while ``now <= last beat + its timeout``; the
timeout is the broker's own ``heartbeatTimeoutMills`` (its controllerHeartBeatTimeoutMills).
"""

from __future__ import annotations

import attrs

__all__ = ["DEFAULT_HEARTBEAT_TIMEOUT", "BrokerKey", "BrokerLiveInfo", "HeartbeatTable"]

#: Seconds a broker stays alive after a beat that names no timeout (RocketMQ's 10 s).
DEFAULT_HEARTBEAT_TIMEOUT = 10.0

#: (clusterName, brokerName, brokerId): one broker of a group.
BrokerKey = tuple[str, str, int]


@attrs.frozen
class BrokerLiveInfo:
    """What a broker's last heartbeat said, and when it arrived (seconds, the caller's clock)."""

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    last_update: float
    timeout: float
    epoch: int = 0
    max_offset: int = 0
    confirm_offset: int = 0
    election_priority: int = 0

    def alive_at(self, now: float) -> bool:
        """True while the broker's timeout has not run out since its last beat."""
        return now <= self.last_update + self.timeout


class HeartbeatTable:
    """Brokers' last heartbeats; `scan` drops and returns the ones that went silent."""

    def __init__(self) -> None:
        self._brokers: dict[BrokerKey, BrokerLiveInfo] = {}
        # Brokers `scan` dropped, kept for what they last said (an election logs the offset
        # the old master reached) until they beat again.
        self._departed: dict[BrokerKey, BrokerLiveInfo] = {}
        #: Heartbeats received since start.
        self.beats = 0

    def beat(self, info: BrokerLiveInfo) -> bool:
        """Record a heartbeat; True when the broker was not known (or had expired) before."""
        key = (info.cluster_name, info.broker_name, info.broker_id)
        previous = self._brokers.get(key)
        self._brokers[key] = info
        self._departed.pop(key, None)
        self.beats += 1
        return previous is None or not previous.alive_at(info.last_update)

    def get(self, cluster_name: str, broker_name: str, broker_id: int) -> BrokerLiveInfo | None:
        """The broker's last heartbeat, alive or not (until `scan` drops it)."""
        return self._brokers.get((cluster_name, broker_name, broker_id))

    def last_known(
        self, cluster_name: str, broker_name: str, broker_id: int
    ) -> BrokerLiveInfo | None:
        """The broker's last heartbeat, even after `scan` dropped it."""
        key = (cluster_name, broker_name, broker_id)
        return self._brokers.get(key) or self._departed.get(key)

    def is_alive(self, cluster_name: str, broker_name: str, broker_id: int, now: float) -> bool:
        """True when the broker has beaten within its timeout."""
        info = self._brokers.get((cluster_name, broker_name, broker_id))
        return info is not None and info.alive_at(now)

    def alive(self, now: float) -> list[BrokerLiveInfo]:
        """Every broker alive at ``now``."""
        return [info for info in self._brokers.values() if info.alive_at(now)]

    def scan(self, now: float) -> list[BrokerLiveInfo]:
        """Drop and return every broker whose timeout ran out before ``now``."""
        gone = [info for info in self._brokers.values() if not info.alive_at(now)]
        for info in gone:
            key = (info.cluster_name, info.broker_name, info.broker_id)
            del self._brokers[key]
            self._departed[key] = info
        return gone

    def forget(self, broker_name: str, broker_ids: set[int] | None = None) -> None:
        """Drop a group's brokers (all, or the ids given), as CLEAN_BROKER_DATA does."""
        for table in (self._brokers, self._departed):
            for key in list(table):
                if key[1] == broker_name and (broker_ids is None or key[2] in broker_ids):
                    del table[key]

    def __len__(self) -> int:
        return len(self._brokers)
