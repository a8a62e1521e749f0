"""SEND_REPLY_MESSAGE and SEND_REPLY_MESSAGE_V2: request-reply's replies (RocketMQ 4.6+).

A responder answers a request message with a reply message in ``{cluster}_REPLY_TOPIC`` whose
REPLY_TO_CLIENT property names the requesting client. The broker pushes the reply at once to
that client's connection (PUSH_REPLY_MESSAGE_TO_CLIENT, found among the producers' heartbeats)
and, with ``storeReplyMessageEnable`` (the default), also stores it in the reply topic. The
answer says whether the push reached the requester: SYSTEM_ERROR with why when the requester
has gone or refused it, whether or not the reply was stored (as RocketMQ's broker answers).
The send checks (a slave, permissions, the topic, the queue) are the send handler's.
"""

from __future__ import annotations

import time

import attrs

from actors.broker.config import BrokerConfig
from actors.broker.handlers.send import SendHandler, SendRefused
from actors.broker.services.stats import BrokerStatsManager
from actors.broker.tables.clients import ClientManager
from actors.broker.tables.topics import TopicMissing
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.connection import Connection
from protocol.headers import MSG_REGION, TRACE_ON, SendFields, decode_send_fields
from protocol.message import MessageConst, properties_to_string, string_to_properties
from protocol.transport import parse_address
from storage import MessageExtBrokerInner, MessageStore

#: Seconds the requester gets to take a pushed reply (RocketMQ's broker-to-client call).
PUSH_REPLY_TIMEOUT = 3.0


@attrs.frozen
class ReplyParts:
    """What the reply handler uses: the send handler's checks, the producers' connections,
    the store and the put counters."""

    config: BrokerConfig
    send: SendHandler
    clients: ClientManager
    store: MessageStore
    stats: BrokerStatsManager


class ReplyHandler:
    """Serves SEND_REPLY_MESSAGE(_V2) for one broker."""

    def __init__(self, parts: ReplyParts) -> None:
        self.parts = parts
        self._region = parts.config.region_id
        self._trace_on = "true" if parts.config.trace_on else "false"

    async def __call__(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        """Check the reply, push it to its requester, store it; answer how the push went."""
        try:
            header = decode_send_fields(request.ext_fields)
            _, queue_id, topic, _ = self.parts.send.check(header, request)
        except SendRefused as refused:
            return request.response(refused.code, refused.remark)
        except TopicMissing:  # the send would create it; a reply goes to an existing topic
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"reply topic {header.topic} does not exist on broker "
                f"{self.parts.config.broker_name}",
            )
        body = bytes(request.body or b"")
        properties = string_to_properties(header.properties or "")
        pushed, why = await self._push(connection, header, topic, queue_id, body, properties)
        ext = {"msgId": "0", "queueId": str(queue_id), "queueOffset": "0",
               MSG_REGION: self._region, TRACE_ON: self._trace_on}  # fmt: skip
        if self.parts.config.store_reply_message_enable:
            result = await self.parts.store.put_message(
                MessageExtBrokerInner(
                    topic=topic,
                    body=body,
                    queue_id=queue_id,
                    flag=header.flag,
                    properties=properties,
                    sys_flag=header.sys_flag,
                    born_timestamp=header.born_timestamp,
                    born_host=parse_address(connection.peer),
                    reconsume_times=header.reconsume_times or 0,
                )
            )
            if result.ok:
                self.parts.stats.on_put(topic, result.msg_num, result.wrote_bytes)
                ext["msgId"], ext["queueOffset"] = result.msg_id, str(result.queue_offset)
        if not pushed:
            return request.response(ResponseCode.SYSTEM_ERROR, why, ext)
        return request.response(ResponseCode.SUCCESS, None, ext)

    async def _push(
        self,
        connection: Connection,
        header: SendFields,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: dict[str, str],
    ) -> tuple[bool, str]:
        """PUSH_REPLY_MESSAGE_TO_CLIENT to the requester: (reached it, why not)."""
        requester = properties.get(MessageConst.MESSAGE_REPLY_TO_CLIENT)
        if not requester:
            return False, (
                f"the reply has no {MessageConst.MESSAGE_REPLY_TO_CLIENT} property: it names "
                "the requesting client (create replies from the request message)"
            )
        target = self._requester(requester)
        if target is None:
            return False, (
                f"push reply message fail: the requester <{requester}> has no connection to "
                f"broker {self.parts.config.broker_name} (gone, or never sent a heartbeat here)"
            )
        pushed = dict(properties)
        pushed[MessageConst.PUSH_REPLY_TIME] = str(time.time_ns() // 1_000_000)
        ext = {
            "producerGroup": header.producer_group,
            "topic": topic,
            "defaultTopic": header.default_topic,
            "defaultTopicQueueNums": str(header.default_topic_queue_nums),
            "queueId": str(queue_id),
            "sysFlag": str(header.sys_flag),
            "bornTimestamp": str(header.born_timestamp),
            "flag": str(header.flag),
            "properties": properties_to_string(pushed),
            "reconsumeTimes": str(header.reconsume_times or 0),
            "unitMode": "true" if header.unit_mode else "false",
            # host:port, which every client's address parser takes as it is.
            "bornHost": connection.peer,
            "storeHost": self.parts.config.broker_addr,
            "storeTimestamp": str(time.time_ns() // 1_000_000),
        }
        call = RemotingCommand.request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, ext, body)
        try:
            answer = await target.invoke(call, PUSH_REPLY_TIMEOUT)
        except RemotingError as exc:
            return False, f"push reply message to <{requester}> failed: {exc}"
        if answer.code != ResponseCode.SUCCESS:
            return False, f"push reply message to <{requester}> failed: {answer.remark}"
        return True, ""

    def _requester(self, client_id: str) -> Connection | None:
        """The open connection of the producer client ``client_id`` (newest heartbeat)."""
        found = None
        for channels in self.parts.clients.producer_table.values():
            for channel in channels.values():
                if (
                    channel.client_id == client_id
                    and not channel.connection.closed
                    and (found is None or channel.last_update > found.last_update)
                ):
                    found = channel
        return None if found is None else found.connection
