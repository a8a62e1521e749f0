"""Controller-mode calls (RocketMQ 5's RIP-44): a controller's metadata, the groups'
SyncStateSets, an operator's election, and a broker's epoch entries.

A controller address may name several controllers (``"a:9878;b:9878;c:9878"``). Reads go to
the first that answers (any controller answers them from its replica of the state); an
election is a write, answered by the Raft leader alone: a follower's CONTROLLER_NOT_LEADER
sends the request on to the leader its remark names, or the one its metadata names.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from client.admin.core import AdminCore, check_response, request_name
from client.message import MQClientError
from protocol.bodies import BrokerReplicasInfo, ElectMasterResponseBody, EpochEntryCache
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.headers import (
    ElectMasterRequestHeader,
    ElectMasterResponseHeader,
    GetMetaDataResponseHeader,
    decode_header,
    encode_header,
    leader_named,
)


def controller_addresses(controller_addr: str | Sequence[str]) -> list[str]:
    """``"a:9878;b:9878"`` (or a list) -> the addresses; ValueError when it names none."""
    parts = controller_addr.split(";") if isinstance(controller_addr, str) else controller_addr
    addresses = [p.strip() for p in parts if p.strip()]
    if not addresses:
        raise ValueError("no controller address given: use host:port[;host:port...]")
    return addresses


class ControllerCalls(AdminCore):
    """Ask controllers about broker groups, elect a master, read a broker's epochs."""

    async def controller_metadata(self, controller_addr: str) -> GetMetaDataResponseHeader:
        """The controller group, its leader and peers (CONTROLLER_GET_METADATA_INFO), from the
        first of the controllers named that answers."""
        request = RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO)
        _, response = await self._controller_read(controller_addr, request)
        return decode_header(GetMetaDataResponseHeader, response.ext_fields)

    async def sync_state_data(
        self, controller_addr: str, broker_names: Sequence[str], *, require_all: bool = True
    ) -> BrokerReplicasInfo:
        """Each named group's master, epochs and in-sync and other replicas
        (CONTROLLER_GET_SYNC_STATE_DATA). A name the controller does not know is absent from
        the answer (or refused, as RocketMQ's controller does): with ``require_all``,
        `MQClientError` names it; without, the groups it knows are returned."""
        body = json.dumps(list(broker_names)).encode()
        request = RemotingCommand.request(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=body)
        address, response = await self._controller_read(controller_addr, request)
        info = BrokerReplicasInfo.from_json(response.body or b"{}")
        unknown = [name for name in broker_names if name not in info.replicas_info_table]
        if unknown and require_all:
            raise MQClientError(
                ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                f"controller {address} knows no broker group named {', '.join(unknown)}",
            )
        return info

    async def elect_master(
        self, controller_addr: str, cluster: str, broker_name: str, broker_id: int
    ) -> tuple[ElectMasterResponseHeader, ElectMasterResponseBody]:
        """Make broker ``broker_id`` of ``broker_name`` the master (CONTROLLER_ELECT_MASTER
        with designateElect, mqadmin's electMaster); the new master and members."""
        header = ElectMasterRequestHeader(
            cluster_name=cluster, broker_name=broker_name, broker_id=broker_id,
            designate_elect=True,
        )  # fmt: skip
        request = RemotingCommand.request(
            RequestCode.CONTROLLER_ELECT_MASTER, encode_header(header)
        )
        _, response = await self._controller_write(controller_addr, request)
        body = ElectMasterResponseBody.from_json(response.body) if response.body else None
        return (
            decode_header(ElectMasterResponseHeader, response.ext_fields),
            body or ElectMasterResponseBody(),
        )

    async def broker_epoch_cache(self, broker_addr: str) -> EpochEntryCache:
        """A controller-mode broker's epoch entries and commit-log end (GET_BROKER_EPOCH_CACHE)."""
        request = RemotingCommand.request(RequestCode.GET_BROKER_EPOCH_CACHE)
        try:
            response = await self.instance.invoke_broker(broker_addr, request, self.timeout)
        except RemotingError as exc:
            raise MQClientError(
                ResponseCode.SYSTEM_ERROR, f"broker {broker_addr} did not answer: {exc.remark}"
            ) from None
        check_response(response, f"GET_BROKER_EPOCH_CACHE at {broker_addr}")
        return EpochEntryCache.from_json(response.body or b"{}")

    async def group_addresses(
        self, broker_name: str | None = None, cluster: str | None = None
    ) -> dict[str, dict[int, str]]:
        """Broker name -> broker id -> address, of one group or of every group of a cluster,
        as the registry knows them (masters and slaves)."""
        info = await self.cluster_info()
        if broker_name is not None:
            names = [broker_name]
            if broker_name not in info.broker_addr_table:
                raise MQClientError(
                    ResponseCode.SYSTEM_ERROR, f"the registry knows no broker named {broker_name}"
                )
        elif cluster is not None:
            if cluster not in info.cluster_addr_table:
                raise MQClientError(ResponseCode.SYSTEM_ERROR, f"no cluster named {cluster}")
            names = sorted(info.cluster_addr_table[cluster])
        else:
            names = sorted(info.broker_addr_table)
        return {
            name: dict(sorted(info.broker_addr_table[name].broker_addrs.items()))
            for name in names
            if name in info.broker_addr_table
        }

    async def broker_names_of_cluster(self, cluster: str) -> list[str]:
        """The broker names of ``cluster`` as the registry knows them."""
        return list(await self.group_addresses(cluster=cluster))

    # -- helpers ------------------------------------------------------------------------------

    async def _controller_read(
        self, controller_addr: str, request: RemotingCommand
    ) -> tuple[str, RemotingCommand]:
        """The first answer of the controllers named, in order; a refusal is raised as is."""
        errors: list[str] = []
        for address in controller_addresses(controller_addr):
            try:
                response = await self.instance.remoting.invoke(address, request, self.timeout)
            except RemotingError as exc:
                errors.append(f"{address}: {exc.remark}")
                continue
            return address, check_response(response, f"{request_name(request.code)} at {address}")
        raise MQClientError(
            ResponseCode.SYSTEM_ERROR,
            "no controller answered (check -a and that the controllers run): " + "; ".join(errors),
        )

    async def _controller_write(
        self, controller_addr: str, request: RemotingCommand
    ) -> tuple[str, RemotingCommand]:
        """Send a write to the controllers named until the leader answers it: a follower's
        CONTROLLER_NOT_LEADER moves it to the leader it names (or its metadata names)."""
        queue = controller_addresses(controller_addr)
        tried: list[str] = []
        errors: list[str] = []
        while queue:
            address = queue.pop(0)
            if address in tried:
                continue
            tried.append(address)
            try:
                response = await self.instance.remoting.invoke(address, request, self.timeout)
            except RemotingError as exc:
                errors.append(f"{address}: {exc.remark}")
                continue
            if response.code != ResponseCode.CONTROLLER_NOT_LEADER:
                return address, check_response(
                    response, f"{request_name(request.code)} at {address}"
                )
            errors.append(f"{address}: not the leader ({response.remark})")
            leader = await self._leader_named(address, response.remark or "")
            if leader is not None and leader not in tried:
                queue.insert(0, leader)
        raise MQClientError(
            ResponseCode.CONTROLLER_NOT_LEADER
            if any("not the leader" in e for e in errors)
            else ResponseCode.SYSTEM_ERROR,
            f"no controller leader took {request_name(request.code)} (tried {', '.join(tried)}): "
            + "; ".join(errors),
        )

    async def _leader_named(self, follower: str, remark: str) -> str | None:
        named = leader_named(remark)
        if named is not None:
            return named
        try:
            metadata = await self.controller_metadata(follower)
        except RemotingError:
            return None
        return metadata.controller_leader_address or None
