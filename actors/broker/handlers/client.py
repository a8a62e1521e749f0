"""The requests clients make of a broker besides sends and pulls: heartbeats and group
membership, committed offsets, queue offsets and times, and message lookups by id and key.

Each handler is a plain function, answered inline by the connection's reader: none of them
waits (a heartbeat or an offset commit is a cast to its table's actor).
"""

from __future__ import annotations

import logging

import attrs
import trio

from actors.broker.config import BrokerConfig
from actors.broker.tables.clients import (
    ClientManager,
    ConsumerHeartbeat,
    Heartbeat,
    UnregisterClient,
)
from actors.broker.tables.groups import SubscriptionGroupManager
from actors.broker.tables.offsets import CommitOffset, ConsumerOffsetManager
from actors.broker.tables.topics import PERM_RW, TopicManager
from protocol.bodies import (
    BodyError,
    CheckClientRequestBody,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.connection import Connection, Later
from protocol.filter import SQL92, FilterParseError, compile_sql92, is_tag_type
from protocol.headers import (
    GetConsumerListByGroupRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    NotifyConsumerIdsChangedRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
    decode_header,
    encode_header,
)
from protocol.names import retry_topic
from storage import MessageStore
from supervisors.actor import ActorError

#: Seconds a consumer's heartbeat waits for the client table before it is refused.
HEARTBEAT_APPLY_TIMEOUT = 3.0

log = logging.getLogger("boltmq.broker")

DEFAULT_QUERY_MAX_NUM = 32


@attrs.frozen
class ClientParts:
    """What the clients' requests read and change: settings, tables and store."""

    config: BrokerConfig
    store: MessageStore
    topics: TopicManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    clients: ClientManager


class ClientRequests:
    """Handlers of the requests clients make (see the module docstring)."""

    def __init__(self, parts: ClientParts) -> None:
        self.parts = parts

    # -- clients -------------------------------------------------------------------------------

    def heart_beat(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand | Later:
        parts = self.parts
        try:
            data = HeartbeatData.from_json(request.body or b"")
        except BodyError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad heartbeat body: {exc}")
        now = trio.current_time()
        consumers = []
        for consumer in data.consumer_data_set:
            group_config = parts.groups.find_subscription_group_config(consumer.group_name)
            notify = parts.config.notify_consumer_ids_changed_enable
            if group_config is not None:
                notify = notify and group_config.notify_consumer_ids_changed_enable
                parts.topics.create_topic_in_send_back_nowait(
                    retry_topic(consumer.group_name), group_config.retry_queue_nums, PERM_RW
                )
            consumers.append(ConsumerHeartbeat(
                consumer.group_name, consumer.consume_type, consumer.message_model,
                consumer.consume_from_where, tuple(consumer.subscription_data_set), notify,
            ))  # fmt: skip
        producers = tuple(producer.group_name for producer in data.producer_data_set)
        heartbeat = Heartbeat(
            connection, data.client_id, request.language, request.version, now,
            tuple(consumers), producers,
        )  # fmt: skip
        if not consumers:
            try:
                parts.clients.cast_nowait(heartbeat)
            except ActorError as exc:
                return request.response(ResponseCode.SYSTEM_ERROR, f"heartbeat not recorded: {exc}")
            return request.response()

        # A consumer's heartbeat is answered once its group lists it, as RocketMQ's broker
        # registers before it answers: a client asks for its group's members right after
        # (GET_CONSUMER_LIST_BY_GROUP) and must find itself there.
        async def registered(connection: Connection, request: RemotingCommand) -> RemotingCommand:
            try:
                await parts.clients.call(heartbeat, timeout=HEARTBEAT_APPLY_TIMEOUT)
            except ActorError as exc:
                return request.response(ResponseCode.SYSTEM_ERROR, f"heartbeat not recorded: {exc}")
            return request.response()

        return Later(registered)

    def check_client_config(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """CHECK_CLIENT_CONFIG: may this consumer subscribe so? (Java consumers ask at start
        for each SQL92 subscription.) RocketMQ's answers: SUCCESS for a TAG subscription or
        a valid expression; SYSTEM_ERROR when enablePropertyFilter is off;
        SUBSCRIPTION_PARSE_FAILED with the parser's message for a bad expression."""
        try:
            body = CheckClientRequestBody.from_json(request.body) if request.body else None
        except BodyError as exc:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"bad CHECK_CLIENT_CONFIG body: {exc}"
            )
        subscription = body.subscription_data if body is not None else None
        if subscription is None:
            return request.response()
        expression_type = subscription.expression_type
        if is_tag_type(expression_type.upper()):
            return request.response()
        if not self.parts.config.enable_property_filter:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"The broker does not support consumer to filter message by {expression_type}",
            )
        assert body is not None
        if expression_type.upper() != SQL92:
            remark = f"expression type {expression_type} is not supported (TAG or SQL92)"
        else:
            try:
                compile_sql92(subscription.sub_string)
            except FilterParseError as error:
                remark = error.remark
            else:
                return request.response()
        log.warning(
            "client %s of group %s (%s) subscribes to %s with %s expression %r, refused: %s",
            body.client_id, body.group, connection.peer, subscription.topic,
            expression_type, subscription.sub_string, remark,
        )  # fmt: skip
        return request.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, remark)

    def unregister_client(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(UnregisterClientRequestHeader, request.ext_fields)
        try:
            self.parts.clients.cast_nowait(
                UnregisterClient(connection, header.producer_group, header.consumer_group)
            )
        except ActorError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"not unregistered: {exc}")
        return request.response()

    def get_consumer_list_by_group(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(GetConsumerListByGroupRequestHeader, request.ext_fields)
        info = self.parts.clients.get_consumer_group_info(header.consumer_group)
        if info is None or not info.channels:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {header.consumer_group}"
            )
        body = GetConsumerListByGroupResponseBody(consumer_id_list=info.client_ids())
        return request.response(body=body.to_json())

    # -- offsets -------------------------------------------------------------------------------

    def query_consumer_offset(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(QueryConsumerOffsetRequestHeader, request.ext_fields)
        parts = self.parts
        offset = parts.offsets.query_offset(header.consumer_group, header.topic, header.queue_id)
        if offset < 0:
            # A new group starts a queue that still holds its first message at offset 0,
            # as RocketMQ does; otherwise the client applies its consumeFromWhere.
            if parts.store.get_min_offset_in_queue(header.topic, header.queue_id) <= 0:
                offset = 0
            else:
                return request.response(
                    ResponseCode.QUERY_NOT_FOUND,
                    f"no offset of {header.consumer_group} on {header.topic}:{header.queue_id}",
                )
        return request.response(
            ext_fields=encode_header(QueryConsumerOffsetResponseHeader(offset=offset))
        )

    def update_consumer_offset(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(UpdateConsumerOffsetRequestHeader, request.ext_fields)
        try:
            self.parts.offsets.cast_nowait(CommitOffset(
                header.consumer_group, header.topic, header.queue_id, header.commit_offset
            ))  # fmt: skip
        except ActorError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"offset not committed: {exc}")
        return request.response()

    def get_min_offset(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(GetMinOffsetRequestHeader, request.ext_fields)
        offset = self.parts.store.get_min_offset_in_queue(header.topic, header.queue_id)
        return request.response(ext_fields=encode_header(GetMinOffsetResponseHeader(offset=offset)))

    def get_max_offset(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(GetMaxOffsetRequestHeader, request.ext_fields)
        offset = self.parts.store.get_max_offset_in_queue(header.topic, header.queue_id)
        return request.response(ext_fields=encode_header(GetMaxOffsetResponseHeader(offset=offset)))

    def search_offset_by_timestamp(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(SearchOffsetRequestHeader, request.ext_fields)
        offset = self.parts.store.get_offset_in_queue_by_time(
            header.topic, header.queue_id, header.timestamp
        )
        return request.response(ext_fields=encode_header(SearchOffsetResponseHeader(offset=offset)))

    def get_earliest_msg_storetime(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(GetEarliestMsgStoretimeRequestHeader, request.ext_fields)
        timestamp = self.parts.store.get_earliest_message_time(header.topic, header.queue_id)
        return request.response(
            ext_fields=encode_header(GetEarliestMsgStoretimeResponseHeader(timestamp=timestamp))
        )

    # -- message lookup ------------------------------------------------------------------------

    def view_message_by_id(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(ViewMessageRequestHeader, request.ext_fields)
        record = self.parts.store.look_message_by_offset(header.offset)
        if record is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"no message at commit-log offset {header.offset}"
            )
        body = bytes(record)
        record.release()
        return request.response(body=body)

    def query_message(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(QueryMessageRequestHeader, request.ext_fields)
        max_num = DEFAULT_QUERY_MAX_NUM if header.unique_key_query else header.max_num
        result = self.parts.store.query_message(
            header.topic, header.key, max(1, max_num), header.begin_timestamp, header.end_timestamp
        )
        if not result.buffers:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND,
                f"no message of topic {header.topic} with key {header.key} in that time range",
            )
        body = b"".join(result.buffers)
        for buffer in result.buffers:
            buffer.release()
        ext = encode_header(
            QueryMessageResponseHeader(
                index_last_update_timestamp=result.index_last_update_timestamp,
                index_last_update_phyoffset=result.index_last_update_phyoffset,
            )
        )
        return request.response(ext_fields=ext, body=body)


def notify_request(group: str) -> RemotingCommand:
    """The oneway NOTIFY_CONSUMER_IDS_CHANGED a broker sends to a group's members."""
    header = encode_header(NotifyConsumerIdsChangedRequestHeader(consumer_group=group))
    return RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, header, oneway=True)
