"""SEND_REPLY_MESSAGE(_V2) over the wire: the broker pushes a reply to the connection of the
client its REPLY_TO_CLIENT names (PUSH_REPLY_MESSAGE_TO_CLIENT, that client known from its
producer heartbeat), stores it in the reply topic unless storeReplyMessageEnable is off, and
answers SYSTEM_ERROR when the requester is not connected, whether or not it stored the reply."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

import boltmq
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.bodies import HeartbeatData, ProducerData
from protocol.connection import Connection
from protocol.headers import GetMaxOffsetRequestHeader, encode_header
from protocol.message import MessageConst, string_to_properties
from tests.actors.broker.helpers import SMALL_FILES, send_request

pytestmark = pytest.mark.timeout(60)

REPLY_TOPIC = "DefaultCluster_REPLY_TOPIC"


class Requester:
    """A client connection that heartbeats as producer client ``client_id`` and records the
    replies pushed to it."""

    def __init__(self, client_id: str, answer: int = ResponseCode.SUCCESS) -> None:
        self.client_id = client_id
        self.answer = answer
        self.pushed: list[RemotingCommand] = []
        self.arrived = trio.Event()
        self.remoting = RemotingClient()
        self.remoting.dispatcher.register(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, self._push)

    def _push(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        self.pushed.append(request)
        self.arrived.set()
        return request.response(self.answer, None if self.answer == 0 else "not now")

    async def heartbeat(self, broker: str) -> None:
        data = HeartbeatData(
            client_id=self.client_id,
            producer_data_set=[ProducerData(group_name="RequesterPG")],
        )
        answer = await self.remoting.invoke(
            broker, RemotingCommand.request(RequestCode.HEART_BEAT, None, data.to_json()), 5.0
        )
        assert answer.code == ResponseCode.SUCCESS


def reply_request(reply_to: str | None, *, v2: bool = True) -> RemotingCommand:
    properties = {MessageConst.CORRELATION_ID: "corr-1", MessageConst.MESSAGE_TYPE: "reply",
                  MessageConst.MESSAGE_TTL: "3000"}  # fmt: skip
    if reply_to is not None:
        properties[MessageConst.MESSAGE_REPLY_TO_CLIENT] = reply_to
    code = RequestCode.SEND_REPLY_MESSAGE_V2 if v2 else RequestCode.SEND_REPLY_MESSAGE
    return send_request(REPLY_TOPIC, b"the answer", queue_id=-1, properties=properties,
                        code=code, producer_group="ResponderPG")  # fmt: skip


async def stored_replies(client: RemotingClient, broker: str) -> int:
    header = GetMaxOffsetRequestHeader(topic=REPLY_TOPIC, queue_id=0)
    answer = await client.invoke(
        broker, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, encode_header(header)), 5.0
    )
    return int(answer.ext_fields["offset"])


@pytest.mark.parametrize("v2", [True, False], ids=["v2", "v1"])
async def test_a_reply_is_pushed_to_its_requester_and_stored(tmp_path: Path, v2: bool) -> None:
    requester = Requester("10.0.0.7@42#requester")
    async with (
        boltmq.embedded(tmp_path, **SMALL_FILES) as cluster,
        requester.remoting,
        RemotingClient() as responder,
    ):
        broker = cluster.broker_address
        await requester.heartbeat(broker)
        answer = await responder.invoke(broker, reply_request(requester.client_id, v2=v2), 10.0)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        assert answer.ext_fields["msgId"] != "0"  # stored: the stored message's id
        assert int(answer.ext_fields["queueId"]) == 0  # the reply topic has one queue
        (push,) = requester.pushed
        fields = push.ext_fields
        assert bytes(push.body or b"") == b"the answer"
        assert fields["topic"] == REPLY_TOPIC
        assert fields["producerGroup"] == "ResponderPG"
        assert fields["queueId"] == "0"
        assert fields["storeHost"] == broker
        assert fields["bornHost"].startswith("127.0.0.1:")
        assert int(fields["storeTimestamp"]) > 0
        properties = string_to_properties(fields["properties"])
        assert properties[MessageConst.CORRELATION_ID] == "corr-1"
        assert int(properties[MessageConst.PUSH_REPLY_TIME]) > 0
        assert await stored_replies(responder, broker) == 1


async def test_without_store_reply_message_enable_the_reply_is_only_pushed(
    tmp_path: Path,
) -> None:
    requester = Requester("10.0.0.7@43#requester")
    async with (
        boltmq.embedded(tmp_path, store_reply_message_enable=False, **SMALL_FILES) as cluster,
        requester.remoting,
        RemotingClient() as responder,
    ):
        broker = cluster.broker_address
        await requester.heartbeat(broker)
        answer = await responder.invoke(broker, reply_request(requester.client_id), 10.0)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        assert (answer.ext_fields["msgId"], answer.ext_fields["queueOffset"]) == ("0", "0")
        assert len(requester.pushed) == 1
        assert await stored_replies(responder, broker) == 0


async def test_a_requester_that_is_not_connected_gets_a_system_error(tmp_path: Path) -> None:
    async with (
        boltmq.embedded(tmp_path, **SMALL_FILES) as cluster,
        RemotingClient() as responder,
    ):
        broker = cluster.broker_address
        answer = await responder.invoke(broker, reply_request("10.0.0.7@44#gone"), 10.0)
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert "10.0.0.7@44#gone" in (answer.remark or "")
        # Stored all the same, as RocketMQ's broker does: a consumer of the reply topic sees it.
        assert await stored_replies(responder, broker) == 1
        answer = await responder.invoke(broker, reply_request(None), 10.0)
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert "REPLY_TO_CLIENT" in (answer.remark or "")


async def test_a_requester_that_refuses_the_push_makes_the_reply_fail(tmp_path: Path) -> None:
    requester = Requester("10.0.0.7@45#busy", answer=ResponseCode.SYSTEM_BUSY)
    async with (
        boltmq.embedded(tmp_path, **SMALL_FILES) as cluster,
        requester.remoting,
        RemotingClient() as responder,
    ):
        broker = cluster.broker_address
        await requester.heartbeat(broker)
        answer = await responder.invoke(broker, reply_request(requester.client_id), 10.0)
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert "not now" in (answer.remark or "")
        assert len(requester.pushed) == 1


async def test_a_slave_refuses_replies(tmp_path: Path) -> None:
    async with (
        boltmq.embedded(tmp_path, broker_role="SLAVE", broker_id=1, **SMALL_FILES) as cluster,
        RemotingClient() as responder,
    ):
        answer = await responder.invoke(
            cluster.broker_address, reply_request("10.0.0.7@46#x"), 10.0
        )
        assert answer.code == ResponseCode.SERVICE_NOT_AVAILABLE
