"""The operator's requests about consumers: who is connected, what each group has committed,
offset resets and clones, who consumes a topic and how far behind, and calls relayed to a
consumer (mqadmin's consumerConnection, producerConnection, resetOffsetByTime,
cloneGroupOffset, consumerStatus, consumeMessage).

INVOKE_BROKER_TO_RESET_OFFSET (222) takes ResetOffsetRequestHeader (``topic``, ``group``,
``timestamp``, ``isForce``) and works in one of three ways:

- **by time** (RocketMQ 4.x): every queue of the topic goes to the offset stored at
  ``timestamp`` (-1 = the queue's end). Without ``isForce`` a queue only moves back, never
  ahead of the group's committed offset. A queue where the group has no offset yet takes the
  time's offset; a group with no offset on any queue of the topic is refused.
- **explicit offsets per queue** (beyond 4.x): a ResetOffsetBody ``{"offsetTable":
  {MessageQueue: offset, ...}}`` (fastjson object keys or JSON-text keys); queues of other
  brokers are skipped, ``timestamp`` and ``isForce`` are ignored.
- **one queue** (RocketMQ 5's header): ``queueId`` and ``offset`` in the header.

An explicit offset must lie within the queue's [min, max] offsets, else nothing is changed.
The new offsets are committed in the broker's offset table and written to its file before the
answer, so a group that is offline starts from them (after a broker crash too), and every live
consumer of the group is told with a oneway
RESET_CONSUMER_CLIENT_OFFSET (220) carrying the same table (C++ consumers get the list form
``{"offsetTable":[{"brokerName","offset","queueId","topic"}]}`` their client reads). The answer's
body is the ResetOffsetBody of the offsets set.
"""

from __future__ import annotations

import logging
import time

import attrs
import orjson
import trio

from actors.broker.config import BrokerConfig
from actors.broker.tables.clients import (
    ClientChannel,
    ClientManager,
)
from actors.broker.tables.offsets import CloneOffsets, CommitOffsets, ConsumerOffsetManager
from actors.broker.tables.topics import TopicManager
from protocol.bodies import (
    BodyError,
    ConsumerConnection,
    ConsumerOffsetSerializeWrapper,
    GroupList,
    MessageQueue,
    ProducerConnection,
    ProducerInfo,
    ProducerTableInfo,
    QueryConsumeTimeSpanBody,
    QueueTimeSpan,
    ResetOffsetBody,
)
from protocol.bodies import (
    Connection as ConnectionBody,
)
from protocol.codes import LanguageCode, RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError, RemotingTimeoutError
from protocol.connection import Connection
from protocol.headers import (
    CloneGroupOffsetRequestHeader,
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetProducerConnectionListRequestHeader,
    QueryConsumeTimeSpanRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    ResetOffsetRequestHeader,
    decode_header,
    encode_header,
)
from protocol.message import MessageFormatError, decode_offset_msg_id
from storage import MessageStore

log = logging.getLogger("boltmq.broker.admin")

#: Seconds to wait for a consumer's answer to a relayed call (RocketMQ's callClient).
CALL_CLIENT_TIMEOUT = 10.0


@attrs.frozen
class ConsumerAdminParts:
    """What the operator's connection, offset and progress requests read and change."""

    config: BrokerConfig
    store: MessageStore
    topics: TopicManager
    offsets: ConsumerOffsetManager
    clients: ClientManager


class ConsumerAdmin:
    """Handlers of the operator's requests about consumers."""

    def __init__(self, parts: ConsumerAdminParts) -> None:
        self.parts = parts

    # -- connections ---------------------------------------------------------------------------

    def get_consumer_connection_list(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(GetConsumerConnectionListRequestHeader, request.ext_fields)
        info = self.parts.clients.get_consumer_group_info(header.consumer_group)
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
        channels = self.parts.clients.producer_table.get(header.producer_group)
        if not channels:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"the producer group {header.producer_group} has no connection",
            )
        body = ProducerConnection(connection_set=[_connection_body(c) for c in channels.values()])
        return request.response(body=body.to_json())

    def get_all_producer_info(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        # GET_ALL_PRODUCER_INFO (RocketMQ 5): every producer group and its live connections.
        now_ms = int(time.time() * 1000)
        now = trio.current_time()
        data = {
            group: [
                ProducerInfo(
                    client_id=c.client_id,
                    remote_ip=c.connection.peer,
                    language=c.language,
                    version=c.version,
                    # the table keeps trio's clock; the wire wants epoch milliseconds
                    last_update_timestamp=now_ms - int((now - c.last_update) * 1000),
                )
                for c in channels.values()
            ]
            for group, channels in self.parts.clients.producer_table.items()
            if channels
        }
        return request.response(body=ProducerTableInfo(data=data).to_json())

    # -- offsets -------------------------------------------------------------------------------

    def get_all_consumer_offset(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        table = self.parts.offsets.offset_table
        body = ConsumerOffsetSerializeWrapper(offset_table={k: dict(v) for k, v in table.items()})
        return request.response(body=body.to_json())

    async def reset_offset(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(ResetOffsetRequestHeader, request.ext_fields)
        parts = self.parts
        topic, group = header.topic, header.group
        topic_config = parts.topics.select(topic)
        if topic_config is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"[reset-offset] no topic {topic} on broker {parts.config.broker_name}",
            )
        queues = max(topic_config.read_queue_nums, topic_config.write_queue_nums)
        try:
            explicit = self._explicit_offsets(header, request, queues)
        except RemotingError as refused:
            return request.response(refused.code, refused.remark)
        if explicit is None:
            committed = parts.offsets.queue_offsets(group, topic)
            if not committed:
                return request.response(
                    ResponseCode.SYSTEM_ERROR,
                    f"consumer group {group} has no offset on topic {topic} on this broker; "
                    "reset it to explicit offsets instead",
                )
            store = parts.store
            wanted: dict[int, int] = {}
            for queue_id in range(topic_config.write_queue_nums):
                if header.timestamp == -1:
                    target = store.get_max_offset_in_queue(topic, queue_id)
                else:
                    target = store.get_offset_in_queue_by_time(topic, queue_id, header.timestamp)
                target = max(target, 0)
                current = committed.get(queue_id)
                if current is not None and not header.is_force and target >= current:
                    target = current  # without isForce a queue only moves back
                wanted[queue_id] = target
        else:
            wanted = explicit
        await parts.offsets.call_persisted(CommitOffsets(group, topic, wanted))
        table = {self._queue(topic, queue_id): offset for queue_id, offset in wanted.items()}
        told = self._tell_consumers(header, table)
        log.info(
            "offsets of %s on %s reset to %s by %s; %d live consumer(s) told",
            group, topic, wanted, connection.peer, told,
        )  # fmt: skip
        return request.response(body=ResetOffsetBody(offset_table=table).to_json())

    def _explicit_offsets(
        self, header: ResetOffsetRequestHeader, request: RemotingCommand, queues: int
    ) -> dict[int, int] | None:
        """Queue id -> offset asked for explicitly, or None for a reset by time."""
        parts = self.parts
        wanted: dict[int, int] = {}
        if request.body:
            try:
                body = ResetOffsetBody.from_json(request.body)
            except BodyError as exc:
                raise RemotingError(
                    ResponseCode.SYSTEM_ERROR, f"bad ResetOffsetBody: {exc}"
                ) from None
            for mq, offset in body.offset_table.items():
                if mq.broker_name not in ("", parts.config.broker_name):
                    continue  # another broker's queue: the admin sends the table to each
                if mq.topic != header.topic:
                    raise RemotingError(
                        ResponseCode.SYSTEM_ERROR,
                        f"the offset table names topic {mq.topic}, the header {header.topic}",
                    )
                wanted[mq.queue_id] = offset
        elif header.queue_id is not None and header.offset is not None:
            wanted[header.queue_id] = header.offset
        else:
            return None
        store = parts.store
        for queue_id, offset in wanted.items():
            if not 0 <= queue_id < queues:
                raise RemotingError(
                    ResponseCode.SYSTEM_ERROR,
                    f"queue id {queue_id} is out of range: topic {header.topic} has {queues}",
                )
            low = store.get_min_offset_in_queue(header.topic, queue_id)
            high = store.get_max_offset_in_queue(header.topic, queue_id)
            if not low <= offset <= high:
                raise RemotingError(
                    ResponseCode.SYSTEM_ERROR,
                    f"offset {offset} of {header.topic}:{queue_id} is outside the queue's "
                    f"[{low}, {high}]; nothing was reset",
                )
        return wanted

    def _tell_consumers(
        self, header: ResetOffsetRequestHeader, table: dict[MessageQueue, int]
    ) -> int:
        info = self.parts.clients.get_consumer_group_info(header.group)
        if info is None:
            return 0
        ext = encode_header(
            ResetOffsetRequestHeader(
                topic=header.topic,
                group=header.group,
                timestamp=header.timestamp,
                is_force=header.is_force,
            )
        )
        java_body = ResetOffsetBody(offset_table=table).to_json()
        told = 0
        for channel in list(info.channels.values()):
            if channel.connection.closed:
                continue
            body = _reset_body_for_cpp(table) if channel.language == LanguageCode.CPP else java_body
            request = RemotingCommand.request(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET, dict(ext), body, oneway=True
            )
            try:
                channel.connection.send_oneway(request)
                told += 1
            except RemotingError as exc:
                log.warning("could not tell %s of the offset reset: %s", channel.client_id, exc)
        return told

    async def clone_group_offset(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(CloneGroupOffsetRequestHeader, request.ext_fields)
        parts = self.parts
        source = header.src_group
        topics = (
            {header.topic} if header.topic and header.topic.strip()
            else parts.offsets.topics_of_group(source)
        )  # fmt: skip
        info = parts.clients.get_consumer_group_info(source)
        cloned: set[str] = set()
        for topic in topics:
            if parts.topics.select(topic) is None:
                continue
            if (
                not header.offline
                and info is not None
                and info.subscriptions
                and topic not in info.subscriptions
            ):
                continue  # the live source group no longer subscribes it (RocketMQ's rule)
            cloned.add(topic)
        await parts.offsets.call_persisted(
            CloneOffsets(source, header.dest_group, frozenset(cloned))
        )
        return request.response()

    # -- progress ------------------------------------------------------------------------------

    def query_topic_consume_by_who(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(QueryTopicConsumeByWhoRequestHeader, request.ext_fields)
        parts = self.parts
        groups = {
            name
            for name, info in parts.clients.consumer_table.items()
            if header.topic in info.subscriptions
        }
        groups |= parts.offsets.groups_of_topic(header.topic)
        return request.response(body=GroupList(group_list=sorted(groups)).to_json())

    def query_consume_time_span(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(QueryConsumeTimeSpanRequestHeader, request.ext_fields)
        parts = self.parts
        topic = header.topic
        topic_config = parts.topics.select(topic)
        if topic_config is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = parts.store
        now = int(time.time() * 1000)
        spans: list[QueueTimeSpan] = []
        for queue_id in range(topic_config.write_queue_nums):
            min_time = store.get_earliest_message_time(topic, queue_id)
            max_offset = store.get_max_offset_in_queue(topic, queue_id)
            max_time = store.get_message_store_timestamp(topic, queue_id, max_offset - 1)
            consumer_offset = parts.offsets.query_offset(header.group, topic, queue_id)
            consume_time = (
                store.get_message_store_timestamp(topic, queue_id, consumer_offset - 1)
                if consumer_offset > 0
                else min_time
            )
            delay = 0
            if consumer_offset < max_offset:
                # How long the oldest message not yet consumed has waited.
                next_time = store.get_message_store_timestamp(
                    topic, queue_id, max(consumer_offset, 0)
                )
                delay = now - next_time if next_time > 0 else 0
            spans.append(
                QueueTimeSpan(
                    message_queue=self._queue(topic, queue_id),
                    min_time_stamp=min_time,
                    max_time_stamp=max_time,
                    consume_time_stamp=consume_time,
                    delay_time=delay,
                )
            )
        body = QueryConsumeTimeSpanBody(consume_time_span_set=spans)
        return request.response(body=body.to_json())

    # -- calls relayed to a consumer -----------------------------------------------------------

    async def get_consumer_running_info(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(GetConsumerRunningInfoRequestHeader, request.ext_fields)
        return await self._call_consumer(
            request, RequestCode.GET_CONSUMER_RUNNING_INFO, header.consumer_group,
            header.client_id, dict(request.ext_fields or {}), request.body,
        )  # fmt: skip

    async def consume_message_directly(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(ConsumeMessageDirectlyResultRequestHeader, request.ext_fields)
        parts = self.parts
        ext = dict(request.ext_fields or {})
        ext["brokerName"] = parts.config.broker_name
        body = request.body
        if header.msg_id:
            # The consumer gets the stored message the offset msg id points at.
            try:
                _, offset = decode_offset_msg_id(header.msg_id)
            except MessageFormatError as exc:
                return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
            record = parts.store.look_message_by_offset(offset)
            if record is None:
                return request.response(
                    ResponseCode.SYSTEM_ERROR,
                    f"no message with msgId {header.msg_id} on broker {parts.config.broker_name}",
                )
            body = bytes(record)
            record.release()
        return await self._call_consumer(
            request, RequestCode.CONSUME_MESSAGE_DIRECTLY, header.consumer_group,
            header.client_id or "", ext, body,
        )  # fmt: skip

    async def _call_consumer(
        self,
        request: RemotingCommand,
        code: int,
        group: str,
        client_id: str,
        ext: dict[str, str],
        body: bytes | bytearray | memoryview | None,
    ) -> RemotingCommand:
        info = self.parts.clients.get_consumer_group_info(group)
        channel = None
        if info is not None:
            for candidate in info.channels.values():
                if candidate.client_id == client_id and not candidate.connection.closed:
                    channel = candidate
                    break
        if channel is None:
            return request.response(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"The consumer <{group}> <{client_id}> not online on this broker",
            )
        call = RemotingCommand.request(code, ext, body)
        try:
            answer = await channel.connection.invoke(call, CALL_CLIENT_TIMEOUT)
        except RemotingTimeoutError as exc:
            return request.response(
                ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer <{group}> <{client_id}>: {exc}"
            )
        except RemotingError as exc:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"invoke consumer <{group}> <{client_id}> failed: {exc.remark}",
            )
        return request.response(answer.code, answer.remark, answer.ext_fields, answer.body)

    def _queue(self, topic: str, queue_id: int) -> MessageQueue:
        return MessageQueue(
            topic=topic, broker_name=self.parts.config.broker_name, queue_id=queue_id
        )


def _connection_body(channel: ClientChannel) -> ConnectionBody:
    return ConnectionBody(
        client_id=channel.client_id,
        client_addr=channel.connection.peer,
        language=channel.language,
        version=channel.version,
    )


def _reset_body_for_cpp(table: dict[MessageQueue, int]) -> bytes:
    # RocketMQ's ResetOffsetBodyForC: the C++ client reads a list, not object keys.
    entries = [
        {"brokerName": mq.broker_name, "offset": offset, "queueId": mq.queue_id, "topic": mq.topic}
        for mq, offset in table.items()
    ]
    return orjson.dumps({"offsetTable": entries})
