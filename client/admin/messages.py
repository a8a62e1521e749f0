"""Message lookups: by offset msg id, by key, and one message pushed to a live consumer."""

from __future__ import annotations

import time

from client.admin.core import AdminCore, check_response
from client.instance import MASTER_ID
from client.message import MQClientError
from protocol.bodies import ConsumeMessageDirectlyResult
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    ConsumeMessageDirectlyResultRequestHeader,
    QueryMessageRequestHeader,
    ViewMessageRequestHeader,
    encode_header,
)
from protocol.message import MessageExt, decode_offset_msg_id, decode_record, iter_records


class MessageCalls(AdminCore):
    """Stored messages looked up by id or key, or consumed directly by one live consumer."""

    async def view_message(self, offset_msg_id: str) -> MessageExt:
        """The stored message an offset msg id names (VIEW_MESSAGE_BY_ID at its store host)."""
        (host, port), offset = decode_offset_msg_id(offset_msg_id)
        header = ViewMessageRequestHeader(offset=offset)
        response = await self._broker(f"{host}:{port}", RequestCode.VIEW_MESSAGE_BY_ID, header)
        if not response.body:
            raise MQClientError(ResponseCode.SYSTEM_ERROR, f"no message {offset_msg_id}")
        return decode_record(response.body)

    async def query_message(
        self,
        topic: str,
        key: str,
        *,
        max_num: int = 32,
        begin_ms: int = 0,
        end_ms: int | None = None,
        unique_key: bool = False,
    ) -> list[MessageExt]:
        """Messages of ``topic`` with business key ``key`` (or UNIQ_KEY), from every broker."""
        route = await self.route(topic)
        header = QueryMessageRequestHeader(
            topic=topic, key=key, max_num=max_num, begin_timestamp=begin_ms,
            end_timestamp=end_ms if end_ms is not None else int(time.time() * 1000) + 60_000,
            unique_key_query=unique_key,
        )  # fmt: skip
        found: list[MessageExt] = []
        for broker in route.broker_datas:
            address = broker.broker_addrs.get(MASTER_ID)
            if address is None:
                continue
            request = RemotingCommand.request(RequestCode.QUERY_MESSAGE, encode_header(header))
            response = await self.instance.invoke_broker(address, request, self.timeout)
            if response.code == ResponseCode.QUERY_NOT_FOUND:
                continue
            check_response(response, f"query {topic} key {key} at {address}")
            for message in iter_records(response.body or b""):
                wanted = message.msg_id == key if unique_key else key in message.keys
                if wanted:  # the index matches by hash: drop collisions
                    found.append(message)
        return found

    async def consume_message_directly(
        self, group: str, client_id: str, offset_msg_id: str
    ) -> ConsumeMessageDirectlyResult:
        """Have the store host of ``offset_msg_id`` push that message to one live consumer
        of ``group`` and say how its listener took it (CONSUME_MESSAGE_DIRECTLY)."""
        (host, port), _ = decode_offset_msg_id(offset_msg_id)
        header = ConsumeMessageDirectlyResultRequestHeader(
            consumer_group=group, client_id=client_id, msg_id=offset_msg_id
        )
        request = RemotingCommand.request(
            RequestCode.CONSUME_MESSAGE_DIRECTLY, encode_header(header)
        )
        # The broker relays to the consumer and waits for its listener: allow for both.
        response = await self.instance.invoke_broker(f"{host}:{port}", request, self.timeout * 2)
        check_response(response, f"consume {offset_msg_id} directly at {client_id} of {group}")
        return ConsumeMessageDirectlyResult.from_json(response.body or b"{}")
