"""The controller's request handlers: one table of codes.

Reads (GET_REPLICA_INFO, GET_SYNC_STATE_DATA, GET_METADATA_INFO, GET_CONTROLLER_CONFIG) run
inline and any controller answers them from its copy of the state; writes (ids, register,
alter, elect, clean) run on the Raft leader only and are answered once committed; a follower
answers CONTROLLER_NOT_LEADER naming the leader's address. Heartbeats go into this
controller's own liveness table.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import orjson

from actors.controller.config import ConfigError
from actors.controller.heartbeat import DEFAULT_HEARTBEAT_TIMEOUT, BrokerLiveInfo
from actors.controller.replicas import ReplicaTable, Result
from protocol.bodies import BodyError, SyncStateSet
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.connection import Connection, Dispatcher
from protocol.headers import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    GetMetaDataResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetReplicaInfoRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    decode_header,
    encode_header,
)
from supervisors.config import format_properties, parse_properties

if TYPE_CHECKING:
    from actors.controller.service import Controller

__all__ = ["CONTROLLER_CODES", "register_handlers"]

log = logging.getLogger("boltmq.controller")

#: Every code a controller serves (an embedding registry lends it these).
CONTROLLER_CODES = (
    RequestCode.BROKER_HEARTBEAT,
    RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
    RequestCode.CONTROLLER_APPLY_BROKER_ID,
    RequestCode.CONTROLLER_REGISTER_BROKER,
    RequestCode.CONTROLLER_GET_REPLICA_INFO,
    RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
    RequestCode.CONTROLLER_ELECT_MASTER,
    RequestCode.CONTROLLER_GET_METADATA_INFO,
    RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
    RequestCode.CLEAN_BROKER_DATA,
    RequestCode.GET_CONTROLLER_CONFIG,
    RequestCode.UPDATE_CONTROLLER_CONFIG,
)


def answer(request: RemotingCommand, result: Result) -> RemotingCommand:
    """The response carrying an operation's result."""
    ext = encode_header(result.header) if result.header is not None else None
    return request.response(result.code, result.remark, ext, result.body)


def register_handlers(dispatcher: Dispatcher, controller: Controller) -> None:
    """Serve every controller request code on ``dispatcher``."""
    config = controller.config

    def table() -> ReplicaTable:
        # Looked up per request: a Raft journal replaces its table when it loads a dump.
        return controller.journal.table

    # ------------------------------------------------------------------ liveness

    def broker_heartbeat(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(BrokerHeartbeatRequestHeader, request.ext_fields)
        if header.broker_id is None:
            raise RemotingError(
                ResponseCode.CONTROLLER_INVALID_REQUEST,
                f"BROKER_HEARTBEAT from {header.broker_addr} names no brokerId; a broker in "
                "controller mode beats with the id the controller gave it",
            )
        timeout_ms = header.heartbeat_timeout_mills
        info = BrokerLiveInfo(
            cluster_name=header.cluster_name,
            broker_name=header.broker_name,
            broker_id=header.broker_id,
            broker_addr=header.broker_addr,
            last_update=controller.now(),
            timeout=timeout_ms / 1000 if timeout_ms else DEFAULT_HEARTBEAT_TIMEOUT,
            epoch=header.epoch or 0,
            max_offset=header.max_offset or 0,
            confirm_offset=header.confirm_offset or 0,
            election_priority=header.election_priority or 0,
        )
        if controller.heartbeats.beat(info):
            controller.log_broker_alive(info)
        return request.response()

    # ------------------------------------------------------------------ reads

    def get_replica_info(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(GetReplicaInfoRequestHeader, request.ext_fields)
        return answer(
            request, controller.read(lambda _: table().get_replica_info(header.broker_name))
        )

    def get_sync_state_data(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        try:
            names = orjson.loads(request.body or b"")
        except orjson.JSONDecodeError:
            names = None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise RemotingError(
                ResponseCode.CONTROLLER_INVALID_REQUEST,
                "CONTROLLER_GET_SYNC_STATE_DATA needs a JSON list of broker names as its body",
            )

        def read(liveness: object) -> Result:
            info = table().sync_state_data(names, controller.liveness())
            return Result(body=info.to_json())

        return answer(request, controller.read(read))

    def get_metadata_info(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        controller.check_running()
        journal = controller.journal
        header = GetMetaDataResponseHeader(
            group=config.controller_dleger_group,
            controller_leader_id=journal.leader_id(),
            controller_leader_address=journal.leader_address(),
            is_leader=journal.is_leader(),
            peers=journal.peers_text() or None,
        )
        return request.response(ext_fields=encode_header(header))

    def get_controller_config(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=format_properties(config.to_properties()).encode())

    def update_controller_config(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        try:
            properties = parse_properties(bytes(request.body or b"").decode("utf-8"), "body")
            if not properties:
                raise ConfigError("the body names no key=value")
            changed = config.update(properties)
        except (UnicodeDecodeError, ConfigError) as exc:
            raise RemotingError(
                ResponseCode.NO_PERMISSION
                if "cannot be changed" in str(exc)
                else ResponseCode.SYSTEM_ERROR,
                f"UPDATE_CONTROLLER_CONFIG: {exc}",
            ) from None
        log.info("controller config updated from %s: %s", conn.peer,
                 ", ".join(f"{k}={properties[k]}" for k in changed))  # fmt: skip
        return request.response()

    # ------------------------------------------------------------------ writes

    async def get_next_broker_id(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(GetNextBrokerIdRequestHeader, request.ext_fields)
        # A write, as RocketMQ has it: the answer must come from the state the leader holds.
        result = await controller.write(
            lambda _: table().get_next_broker_id(header.cluster_name, header.broker_name)
        )
        return answer(request, result)

    async def apply_broker_id(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(ApplyBrokerIdRequestHeader, request.ext_fields)
        result = await controller.write(
            lambda _: table().apply_broker_id(
                header.cluster_name,
                header.broker_name,
                header.applied_broker_id,
                header.register_check_code,
            )
        )
        return answer(request, result)

    async def register_broker(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(RegisterBrokerToControllerRequestHeader, request.ext_fields)
        result = await controller.write(
            lambda live: table().register_broker(
                header.cluster_name,
                header.broker_name,
                header.broker_id,
                header.broker_address,
                live,
            )
        )
        return answer(request, result)

    async def alter_sync_state_set(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(AlterSyncStateSetRequestHeader, request.ext_fields)
        try:
            proposed = SyncStateSet.from_json(request.body or b"")
        except BodyError as exc:
            raise RemotingError(
                ResponseCode.CONTROLLER_INVALID_REQUEST,
                f"CONTROLLER_ALTER_SYNC_STATE_SET from {header.broker_name}: {exc}",
            ) from None
        result = await controller.write(
            lambda live: table().alter_sync_state_set(
                header.broker_name, header.master_broker_id, header.master_epoch, proposed, live
            )
        )
        return answer(request, result)

    async def elect_master(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(ElectMasterRequestHeader, request.ext_fields)
        result = await controller.write(
            lambda live: table().elect_master(
                header.broker_name,
                header.broker_id,
                designate=header.designate_elect,
                liveness=live,
                unclean=config.enable_elect_unclean_master,
            ),
            trigger="admin" if header.designate_elect else "broker",
        )
        return answer(request, result)

    async def clean_broker_data(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(CleanControllerBrokerDataRequestHeader, request.ext_fields)
        result = await controller.write(
            lambda live: table().clean_broker_data(
                header.broker_name,
                header.broker_controller_ids_to_clean,
                header.is_clean_living_broker,
                header.cluster_name,
                live,
            )
        )
        if result.ok:
            ids_text = header.broker_controller_ids_to_clean
            ids = {int(x) for x in ids_text.split(";") if x.strip()} if ids_text else None
            controller.heartbeats.forget(header.broker_name, ids or None)
        return answer(request, result)

    handlers = {
        RequestCode.BROKER_HEARTBEAT: broker_heartbeat,
        RequestCode.CONTROLLER_GET_NEXT_BROKER_ID: get_next_broker_id,
        RequestCode.CONTROLLER_APPLY_BROKER_ID: apply_broker_id,
        RequestCode.CONTROLLER_REGISTER_BROKER: register_broker,
        RequestCode.CONTROLLER_GET_REPLICA_INFO: get_replica_info,
        RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: alter_sync_state_set,
        RequestCode.CONTROLLER_ELECT_MASTER: elect_master,
        RequestCode.CONTROLLER_GET_METADATA_INFO: get_metadata_info,
        RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: get_sync_state_data,
        RequestCode.CLEAN_BROKER_DATA: clean_broker_data,
        RequestCode.GET_CONTROLLER_CONFIG: get_controller_config,
        RequestCode.UPDATE_CONTROLLER_CONFIG: update_controller_config,
    }
    assert set(handlers) == set(CONTROLLER_CODES)
    for code, handler in handlers.items():
        dispatcher.register(code, handler)  # type: ignore[arg-type]
