"""The registry's request handlers: queries read the tables directly, changes go to the actor.

Synchronous handlers (every query) run inline in the connection's reader, with no task or
channel hop; ``async`` handlers (every change) send a command to the registry actor and await
its answer.
"""

from __future__ import annotations

import logging

import orjson

from actors.registry.actor import (
    DeleteKVConfig,
    DeleteTopic,
    PutKVConfig,
    QueryDataVersion,
    RegisterBroker,
    RegistryActor,
    SetWritePerm,
    UnregisterBroker,
    UpdateConfig,
)
from actors.registry.config import KEYS, RUNTIME_KEYS, ConfigError
from actors.registry.kv_config import ORDER_TOPIC_CONFIG
from actors.registry.websocket_routes import WebsocketRoutes
from actors.registry.wire import (
    BodyError,
    DataVersion,
    body_crc32,
    decode_register_body,
    kv_table,
    topic_list,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.connection import Connection, Dispatcher
from protocol.headers import (
    AddWritePermOfBrokerRequestHeader,
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigRequestHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    RegisterBrokerRequestHeader,
    UnRegisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    decode_header,
)
from supervisors.config import format_properties, parse_properties

log = logging.getLogger("boltmq.registry")

#: Connection attribute set once a broker registers over it (only such closes matter).
BROKER_CONNECTION = "registry.broker"


def register_handlers(dispatcher: Dispatcher, actor: RegistryActor) -> None:
    """Serve every registry request code on ``dispatcher``."""
    table = actor.route_table
    kv = actor.kv_config
    websocket_routes = WebsocketRoutes(table)

    # ------------------------------------------------------------- route queries (hot path)

    def get_route_info_by_topic(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        # A dict lookup, not decode_header: this is the registry's hot path.
        ext = request.ext_fields
        topic = ext.get("topic") if ext is not None else None
        if topic is None:
            topic = decode_header(GetRouteInfoRequestHeader, ext).topic  # raises the clear error
        if conn.over_websocket:
            # A websocket client cannot open TCP addresses: its route names ws:// ones.
            body = websocket_routes.route_json(topic)
            if body is None and table.route(topic) is not None:
                return request.response(
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"No broker of the topic {topic} has a websocket listener; "
                    "give the brokers websocketListenPort",
                )
        else:
            body = table.route_json(topic)
        if body is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic}",
            )
        return request.response(body=body)

    # ------------------------------------------------------------- other queries

    def get_broker_cluster_info(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        if conn.over_websocket:
            return request.response(body=orjson.dumps(websocket_routes.cluster_info()))
        return request.response(body=orjson.dumps(table.cluster_info()))

    def get_all_topic_list(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=topic_list(table.all_topics()))

    def get_topics_by_cluster(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(GetTopicsByClusterRequestHeader, request.ext_fields)
        return request.response(body=topic_list(table.topics_by_cluster(header.cluster)))

    def get_system_topic_list(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        topics, broker_addr = table.system_topics()
        return request.response(body=topic_list(topics, broker_addr))

    def unit_topics(unit: bool | None, unit_sub: bool | None) -> object:
        def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            return request.response(body=topic_list(table.topics_with_sys_flag(unit, unit_sub)))

        return handler

    def get_kv_config(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(GetKVConfigRequestHeader, request.ext_fields)
        namespace, key = header.namespace, header.key
        value = kv.get(namespace, key)
        if value is None:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND,
                f"No config item, Namespace: {namespace} Key: {key}",
            )
        return request.response(ext_fields={"value": value})

    def get_kvlist_by_namespace(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        namespace = decode_header(GetKVListByNamespaceRequestHeader, request.ext_fields).namespace
        entries = kv.namespace(namespace)
        if entries is None:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace}"
            )
        return request.response(body=kv_table(entries))

    def get_namesrv_config(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        text = format_properties(actor.config.to_properties())
        return request.response(body=text.encode())

    # ------------------------------------------------------------- changes (through the actor)

    async def register_broker(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(RegisterBrokerRequestHeader, request.ext_fields)
        body = request.body
        if header.body_crc32 != 0:
            actual = body_crc32(body or b"")
            if actual != header.body_crc32:
                raise RemotingError(
                    ResponseCode.SYSTEM_ERROR,
                    f"crc32 not match: header bodyCrc32={header.body_crc32}, body has {actual} "
                    f"(REGISTER_BROKER from {header.broker_addr})",
                )
        try:
            decoded = decode_register_body(body, header.compressed)
        except BodyError as exc:
            raise RemotingError(
                ResponseCode.SYSTEM_ERROR, f"REGISTER_BROKER from {header.broker_addr}: {exc}"
            ) from None
        wrapper = decoded.topic_config_serialize_wrapper
        result = await actor.call(
            RegisterBroker(
                cluster=header.cluster_name,
                broker_addr=header.broker_addr,
                broker_name=header.broker_name,
                broker_id=header.broker_id,
                ha_server_addr=header.ha_server_addr,
                data_version=wrapper.data_version,
                topic_config_table=wrapper.topic_config_table,
                filter_server_list=decoded.filter_server_list,
                connection=conn,
                websocket_addr=header.websocket_addr or None,
            )
        )
        conn.attributes[BROKER_CONNECTION] = True
        ext: dict[str, str] = {}
        if result.master_addr is not None:
            ext["masterAddr"] = result.master_addr
        if result.ha_server_addr is not None:
            ext["haServerAddr"] = result.ha_server_addr
        order = kv.namespace(ORDER_TOPIC_CONFIG)
        return request.response(ext_fields=ext, body=kv_table(order) if order else None)

    async def unregister_broker(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(UnRegisterBrokerRequestHeader, request.ext_fields)
        command = UnregisterBroker(
            cluster=header.cluster_name,
            broker_addr=header.broker_addr,
            broker_name=header.broker_name,
            broker_id=header.broker_id,
        )
        await actor.call(command)
        return request.response()

    async def query_data_version(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        broker_addr = decode_header(QueryDataVersionRequestHeader, request.ext_fields).broker_addr
        try:
            version = DataVersion.from_json(request.body or b"{}")
        except BodyError as exc:
            raise RemotingError(
                ResponseCode.SYSTEM_ERROR,
                f"QUERY_DATA_VERSION from {broker_addr}: bad DataVersion body: {exc}",
            ) from None
        changed, stored = await actor.call(QueryDataVersion(broker_addr, version))
        body = stored.to_json() if isinstance(stored, DataVersion) else None
        return request.response(ext_fields={"changed": "true" if changed else "false"}, body=body)

    async def delete_topic(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(DeleteTopicFromNamesrvRequestHeader, request.ext_fields)
        await actor.call(DeleteTopic(header.topic, header.cluster_name or None))
        return request.response()

    def write_perm(writable: bool, count_key: str) -> object:
        async def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            ext = request.ext_fields
            broker_name = (
                decode_header(AddWritePermOfBrokerRequestHeader, ext).broker_name
                if writable
                else decode_header(WipeWritePermOfBrokerRequestHeader, ext).broker_name
            )
            count = await actor.call(SetWritePerm(broker_name, writable))
            return request.response(ext_fields={count_key: str(count)})

        return handler

    async def put_kv_config(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(PutKVConfigRequestHeader, request.ext_fields)
        await actor.call(PutKVConfig(header.namespace, header.key, header.value))
        return request.response()

    async def delete_kv_config(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(DeleteKVConfigRequestHeader, request.ext_fields)
        await actor.call(DeleteKVConfig(header.namespace, header.key))
        return request.response()

    async def update_namesrv_config(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        if not request.body:
            raise RemotingError(
                ResponseCode.SYSTEM_ERROR, "UPDATE_NAMESRV_CONFIG needs a properties text body"
            )
        try:
            properties = parse_properties(bytes(request.body).decode("utf-8"), "request body")
        except (UnicodeDecodeError, ConfigError) as exc:
            raise RemotingError(
                ResponseCode.SYSTEM_ERROR, f"UPDATE_NAMESRV_CONFIG: bad properties body: {exc}"
            ) from None
        fixed = sorted(k for k in properties if k in KEYS and k not in RUNTIME_KEYS)
        if fixed:
            raise RemotingError(
                ResponseCode.NO_PERMISSION,
                f"cannot update {', '.join(fixed)} while the registry runs "
                f"(changeable: {', '.join(sorted(RUNTIME_KEYS))})",
            )
        try:
            await actor.call(UpdateConfig(properties))
        except ConfigError as exc:
            raise RemotingError(ResponseCode.SYSTEM_ERROR, str(exc)) from None
        return request.response()

    handlers = {
        RequestCode.GET_ROUTEINFO_BY_TOPIC: get_route_info_by_topic,
        RequestCode.GET_BROKER_CLUSTER_INFO: get_broker_cluster_info,
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: get_all_topic_list,
        RequestCode.GET_TOPICS_BY_CLUSTER: get_topics_by_cluster,
        RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: get_system_topic_list,
        RequestCode.GET_UNIT_TOPIC_LIST: unit_topics(True, None),
        RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: unit_topics(None, True),
        RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: unit_topics(False, True),
        RequestCode.GET_KV_CONFIG: get_kv_config,
        RequestCode.GET_KVLIST_BY_NAMESPACE: get_kvlist_by_namespace,
        RequestCode.GET_NAMESRV_CONFIG: get_namesrv_config,
        RequestCode.REGISTER_BROKER: register_broker,
        RequestCode.UNREGISTER_BROKER: unregister_broker,
        RequestCode.QUERY_DATA_VERSION: query_data_version,
        RequestCode.DELETE_TOPIC_IN_NAMESRV: delete_topic,
        RequestCode.WIPE_WRITE_PERM_OF_BROKER: write_perm(False, "wipeTopicCount"),
        RequestCode.ADD_WRITE_PERM_OF_BROKER: write_perm(True, "addTopicCount"),
        RequestCode.PUT_KV_CONFIG: put_kv_config,
        RequestCode.DELETE_KV_CONFIG: delete_kv_config,
        RequestCode.UPDATE_NAMESRV_CONFIG: update_namesrv_config,
    }
    for code, handler in handlers.items():
        dispatcher.register(code, handler)  # type: ignore[arg-type]
