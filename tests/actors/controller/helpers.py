"""Helpers for the controller's tests: requests as a broker or an operator sends them."""

from __future__ import annotations

from typing import Any

import orjson
import trio

from protocol.bodies import SyncStateSet
from protocol.client import RemotingClient
from protocol.codes import RequestCode
from protocol.command import RemotingCommand, RemotingError
from protocol.headers import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    ElectMasterRequestHeader,
    GetNextBrokerIdRequestHeader,
    GetReplicaInfoRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    encode_header,
)

CLUSTER, GROUP = "DefaultCluster", "broker-a"


def address_of(broker_id: int) -> str:
    """A fake broker's address (nothing listens there; notices to it are lost)."""
    return f"127.0.0.1:{20000 + broker_id}"


async def call(
    client: RemotingClient, address: str, code: int, header: Any = None, body: bytes | None = None
) -> RemotingCommand:
    """One request with a deadline."""
    ext = encode_header(header) if header is not None else None
    with trio.fail_after(10):
        return await client.invoke(address, RemotingCommand.request(code, ext, body), timeout=8)


async def heartbeat(
    client: RemotingClient,
    address: str,
    broker_id: int,
    *,
    timeout_ms: int = 1000,
    epoch: int = 0,
    max_offset: int = 0,
    group: str = GROUP,
    broker_addr: str | None = None,
) -> RemotingCommand:
    """BROKER_HEARTBEAT as a broker of ``group`` sends it."""
    header = BrokerHeartbeatRequestHeader(
        cluster_name=CLUSTER,
        broker_addr=broker_addr or address_of(broker_id),
        broker_name=group,
        broker_id=broker_id,
        epoch=epoch,
        max_offset=max_offset,
        confirm_offset=max_offset,
        heartbeat_timeout_mills=timeout_ms,
        election_priority=0,
    )
    return await call(client, address, RequestCode.BROKER_HEARTBEAT, header)


async def join(
    client: RemotingClient, address: str, group: str = GROUP, broker_addr: str | None = None
) -> int:
    """GET_NEXT_BROKER_ID, APPLY_BROKER_ID and REGISTER_BROKER as a new broker does."""
    reply = await call(
        client,
        address,
        RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
        GetNextBrokerIdRequestHeader(cluster_name=CLUSTER, broker_name=group),
    )
    assert reply.code == 0, reply.remark
    broker_id = int(reply.field("nextBrokerId") or "0")
    applied = await call(
        client,
        address,
        RequestCode.CONTROLLER_APPLY_BROKER_ID,
        ApplyBrokerIdRequestHeader(
            cluster_name=CLUSTER,
            broker_name=group,
            applied_broker_id=broker_id,
            register_check_code=f"{broker_addr or address_of(broker_id)};{broker_id}",
        ),
    )
    assert applied.code == 0, applied.remark
    registered = await register(client, address, broker_id, group, broker_addr)
    assert registered.code == 0, registered.remark
    return broker_id


async def register(
    client: RemotingClient,
    address: str,
    broker_id: int,
    group: str = GROUP,
    broker_addr: str | None = None,
) -> RemotingCommand:
    """CONTROLLER_REGISTER_BROKER."""
    return await call(
        client,
        address,
        RequestCode.CONTROLLER_REGISTER_BROKER,
        RegisterBrokerToControllerRequestHeader(
            cluster_name=CLUSTER,
            broker_name=group,
            broker_id=broker_id,
            broker_address=broker_addr or address_of(broker_id),
        ),
    )


async def elect(
    client: RemotingClient, address: str, broker_id: int, *, designate: bool = False
) -> RemotingCommand:
    """CONTROLLER_ELECT_MASTER as a broker (or, designating, an operator) asks it."""
    header = ElectMasterRequestHeader(
        cluster_name=CLUSTER, broker_name=GROUP, broker_id=broker_id, designate_elect=designate
    )
    return await call(client, address, RequestCode.CONTROLLER_ELECT_MASTER, header)


async def replica_info(client: RemotingClient, address: str) -> RemotingCommand:
    """CONTROLLER_GET_REPLICA_INFO of broker-a."""
    header = GetReplicaInfoRequestHeader(broker_name=GROUP)
    return await call(client, address, RequestCode.CONTROLLER_GET_REPLICA_INFO, header)


async def alter(
    client: RemotingClient,
    address: str,
    master: int,
    epoch: int,
    members: list[int],
    set_epoch: int,
) -> RemotingCommand:
    """CONTROLLER_ALTER_SYNC_STATE_SET as the master sends it."""
    header = AlterSyncStateSetRequestHeader(
        broker_name=GROUP, master_broker_id=master, master_epoch=epoch
    )
    body = SyncStateSet(sync_state_set=members, sync_state_set_epoch=set_epoch).to_json()
    return await call(client, address, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, header, body)


async def sync_state_data(client: RemotingClient, address: str, *names: str) -> RemotingCommand:
    """CONTROLLER_GET_SYNC_STATE_DATA for the names given."""
    body = orjson.dumps(list(names))
    return await call(client, address, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=body)


class Beating:
    """Heartbeats for some broker ids every ``interval`` s until each is silenced."""

    def __init__(self, client: RemotingClient, addresses: list[str], interval: float = 0.1) -> None:
        self.client, self.addresses, self.interval = client, addresses, interval
        #: broker id -> (address it beats from, max offset it reports)
        self.brokers: dict[int, tuple[str, int]] = {}

    def add(self, broker_id: int, broker_addr: str | None = None, max_offset: int = 0) -> None:
        self.brokers[broker_id] = (broker_addr or address_of(broker_id), max_offset)

    def silence(self, broker_id: int) -> None:
        self.brokers.pop(broker_id, None)

    async def beat_once(self) -> None:
        for broker_id, (broker_addr, max_offset) in list(self.brokers.items()):
            for address in self.addresses:
                try:
                    await heartbeat(
                        self.client, address, broker_id, max_offset=max_offset,
                        broker_addr=broker_addr,
                    )  # fmt: skip
                except (OSError, trio.TooSlowError, RemotingError):
                    pass  # a stopped controller: the others still get the beat

    async def run(self) -> None:
        while True:
            await self.beat_once()
            await trio.sleep(self.interval)
