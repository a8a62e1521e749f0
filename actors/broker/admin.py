"""The broker's other request codes: client heartbeats, offsets, queue queries, message lookup
and topic / group administration. A plain function is answered inline by the connection's
reader (heartbeats and offset commits cast their change to the table's actor without waiting);
topic and group administration is ``async``: it waits for the table actor's answer.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from actors.broker.clients import (
    ClientChannel,
    ConsumerHeartbeat,
    Heartbeat,
    UnregisterClient,
)
from actors.broker.groups import DeleteGroup, UpdateGroup
from actors.broker.offsets import CommitOffset, RemoveGroupOffsets
from actors.broker.topics import PERM_RW, DeleteTopicConfig, UpdateTopicConfig, retry_topic
from protocol.bodies import (
    BodyError,
    ConsumerConnection,
    ConsumerOffsetSerializeWrapper,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    ProducerConnection,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicFilterType,
)
from protocol.bodies import (
    Connection as ConnectionBody,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.connection import Connection
from protocol.headers import (
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    GetProducerConnectionListRequestHeader,
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
from supervisors.actor import ActorError

if TYPE_CHECKING:
    from actors.broker.service import Broker

log = logging.getLogger("boltmq.broker")

DEFAULT_QUERY_MAX_NUM = 32


class AdminHandlers:
    """Handlers of client heartbeats, offsets, queue queries, lookups and topic / group
    administration (the broker's one table is in actors/broker/handlers.py)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    # -- clients ---------------------------------------------------------------------------

    def heart_beat(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        broker = self.broker
        try:
            data = HeartbeatData.from_json(request.body or b"")
        except BodyError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad heartbeat body: {exc}")
        now = trio.current_time()
        consumers = []
        for consumer in data.consumer_data_set:
            group_config = broker.groups.find_subscription_group_config(consumer.group_name)
            notify = broker.config.notify_consumer_ids_changed_enable
            if group_config is not None:
                notify = notify and group_config.notify_consumer_ids_changed_enable
                broker.topics.create_topic_in_send_back_nowait(
                    retry_topic(consumer.group_name), group_config.retry_queue_nums, PERM_RW
                )
            consumers.append(ConsumerHeartbeat(
                consumer.group_name, consumer.consume_type, consumer.message_model,
                consumer.consume_from_where, tuple(consumer.subscription_data_set), notify,
            ))  # fmt: skip
        producers = tuple(producer.group_name for producer in data.producer_data_set)
        try:
            broker.clients.cast_nowait(Heartbeat(
                connection, data.client_id, request.language, request.version, now,
                tuple(consumers), producers,
            ))  # fmt: skip
        except ActorError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"heartbeat not recorded: {exc}")
        return request.response()

    def unregister_client(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(UnregisterClientRequestHeader, request.ext_fields)
        try:
            self.broker.clients.cast_nowait(
                UnregisterClient(connection, header.producer_group, header.consumer_group)
            )
        except ActorError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"not unregistered: {exc}")
        return request.response()

    def get_consumer_list_by_group(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(GetConsumerListByGroupRequestHeader, request.ext_fields)
        info = self.broker.clients.get_consumer_group_info(header.consumer_group)
        if info is None or not info.channels:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {header.consumer_group}"
            )
        body = GetConsumerListByGroupResponseBody(consumer_id_list=info.client_ids())
        return request.response(body=body.to_json())

    def get_consumer_connection_list(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(GetConsumerConnectionListRequestHeader, request.ext_fields)
        info = self.broker.clients.get_consumer_group_info(header.consumer_group)
        if info is None or not info.channels:
            return request.response(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"the consumer group {header.consumer_group} is not online",
            )
        body = ConsumerConnection(
            connection_set=[_connection_body(c) for c in info.channels.values()],
            subscription_table=dict(info.subscriptions),
            consume_type=info.consume_type,
            message_model=info.message_model,
            consume_from_where=info.consume_from_where,
        )
        return request.response(body=body.to_json())

    def get_producer_connection_list(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(GetProducerConnectionListRequestHeader, request.ext_fields)
        channels = self.broker.clients.producer_table.get(header.producer_group)
        if not channels:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"the producer group {header.producer_group} has no connection",
            )
        body = ProducerConnection(connection_set=[_connection_body(c) for c in channels.values()])
        return request.response(body=body.to_json())

    # -- offsets ---------------------------------------------------------------------------

    def query_consumer_offset(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(QueryConsumerOffsetRequestHeader, request.ext_fields)
        broker = self.broker
        offset = broker.offsets.query_offset(header.consumer_group, header.topic, header.queue_id)
        if offset < 0:
            # A new group starts a queue that still holds its first message at offset 0,
            # as RocketMQ does; otherwise the client applies its consumeFromWhere.
            if broker.store.get_min_offset_in_queue(header.topic, header.queue_id) <= 0:
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
            self.broker.offsets.cast_nowait(CommitOffset(
                header.consumer_group, header.topic, header.queue_id, header.commit_offset
            ))  # fmt: skip
        except ActorError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"offset not committed: {exc}")
        return request.response()

    def get_all_consumer_offset(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        table = self.broker.offsets.offset_table
        body = ConsumerOffsetSerializeWrapper(offset_table={k: dict(v) for k, v in table.items()})
        return request.response(body=body.to_json())

    def get_min_offset(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(GetMinOffsetRequestHeader, request.ext_fields)
        offset = self.broker.store.get_min_offset_in_queue(header.topic, header.queue_id)
        return request.response(ext_fields=encode_header(GetMinOffsetResponseHeader(offset=offset)))

    def get_max_offset(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(GetMaxOffsetRequestHeader, request.ext_fields)
        offset = self.broker.store.get_max_offset_in_queue(header.topic, header.queue_id)
        return request.response(ext_fields=encode_header(GetMaxOffsetResponseHeader(offset=offset)))

    def search_offset_by_timestamp(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(SearchOffsetRequestHeader, request.ext_fields)
        offset = self.broker.store.get_offset_in_queue_by_time(
            header.topic, header.queue_id, header.timestamp
        )
        return request.response(ext_fields=encode_header(SearchOffsetResponseHeader(offset=offset)))

    def get_earliest_msg_storetime(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(GetEarliestMsgStoretimeRequestHeader, request.ext_fields)
        timestamp = self.broker.store.get_earliest_message_time(header.topic, header.queue_id)
        return request.response(
            ext_fields=encode_header(GetEarliestMsgStoretimeResponseHeader(timestamp=timestamp))
        )

    # -- message lookup --------------------------------------------------------------------

    def view_message_by_id(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(ViewMessageRequestHeader, request.ext_fields)
        record = self.broker.store.look_message_by_offset(header.offset)
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
        result = self.broker.store.query_message(
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

    # -- topics and groups -----------------------------------------------------------------

    async def update_and_create_topic(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        from actors.broker.topics import check_topic_name

        header = decode_header(CreateTopicRequestHeader, request.ext_fields)
        broker = self.broker
        if broker.config.is_slave:
            return request.response(
                ResponseCode.NO_PERMISSION, "a slave does not create topics; ask its master"
            )
        problem = check_topic_name(header.topic)
        if problem is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, problem)
        if (
            header.topic in broker.topics.system_topics
            or header.topic == broker.config.broker_cluster_name
        ):
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"topic {header.topic} is a system topic"
            )
        try:
            filter_type = TopicFilterType[header.topic_filter_type or "SINGLE_TAG"]
        except KeyError:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"topicFilterType {header.topic_filter_type!r} is not SINGLE_TAG or MULTI_TAG",
            )
        await broker.topics.call(UpdateTopicConfig(
            TopicConfig(
                topic_name=header.topic,
                read_queue_nums=header.read_queue_nums,
                write_queue_nums=header.write_queue_nums,
                perm=header.perm,
                topic_filter_type=filter_type,
                topic_sys_flag=header.topic_sys_flag or 0,
                order=header.order,
            )
        ))  # fmt: skip
        return request.response()

    async def delete_topic_in_broker(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(DeleteTopicRequestHeader, request.ext_fields)
        await self.broker.topics.call(DeleteTopicConfig(header.topic))
        return request.response()

    def get_all_topic_config(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        return request.response(body=self.broker.topics.to_json())

    async def update_and_create_group(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        try:
            config = SubscriptionGroupConfig.from_json(request.body or b"")
        except BodyError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad group body: {exc}")
        await self.broker.groups.call(UpdateGroup(config))
        return request.response()

    async def delete_group(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(DeleteSubscriptionGroupRequestHeader, request.ext_fields)
        await self.broker.groups.call(DeleteGroup(header.group_name))
        if header.remove_offset:
            await self.broker.offsets.call(RemoveGroupOffsets(header.group_name))
        return request.response()

    def get_all_group_config(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        return request.response(body=self.broker.groups.to_json())


def _connection_body(channel: ClientChannel) -> ConnectionBody:
    return ConnectionBody(
        client_id=channel.client_id,
        client_addr=channel.connection.peer,
        language=channel.language,
        version=channel.version,
    )


def notify_request(group: str) -> RemotingCommand:
    """The oneway NOTIFY_CONSUMER_IDS_CHANGED a broker sends to a group's members."""
    header = encode_header(NotifyConsumerIdsChangedRequestHeader(consumer_group=group))
    return RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, header, oneway=True)


__all__ = ["AdminHandlers", "RemotingError", "notify_request"]
