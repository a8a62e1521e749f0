"""Raw requests of RocketMQ 5's pop codes, and reading their answers, for the pop tests."""

from __future__ import annotations

import base64
import json

import attrs

from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    NotificationRequestHeader,
    PopMessageRequestHeader,
    encode_header,
)
from protocol.message import MessageExt, decode_records
from tests.support.remoting import call

POP_CK = "POP_CK"


def pop_request(
    topic: str,
    group: str = "CG_pop",
    *,
    queue_id: int = -1,
    max_msgs: int = 32,
    invisible_ms: int = 60_000,
    poll_ms: int = 0,
    init_mode: int = 0,
    exp: str | None = None,
    exp_type: str | None = None,
    order: bool = False,
    attempt_id: str | None = None,
) -> RemotingCommand:
    """A POP_MESSAGE as a RocketMQ 5 front sends it."""
    header = PopMessageRequestHeader(
        consumer_group=group, topic=topic, queue_id=queue_id, max_msg_nums=max_msgs,
        invisible_time=invisible_ms, poll_time=poll_ms, born_time=0, init_mode=init_mode,
        exp=exp, exp_type=exp_type, order=order, attempt_id=attempt_id,
    )  # fmt: skip
    return RemotingCommand.request(RequestCode.POP_MESSAGE, encode_header(header))


@attrs.frozen
class Popped:
    """One popped message and what acks it."""

    message: MessageExt
    handle: str

    @property
    def offset(self) -> int:
        """Its queue offset (in the retry topic for a retry)."""
        return self.message.queue_offset

    @property
    def queue_id(self) -> int:
        """Its queue id."""
        return self.message.queue_id


async def pop(
    client: RemotingClient, address: str, topic: str, group: str = "CG_pop", **kwargs: object
) -> list[Popped]:
    """Pop; the messages (none on POLLING_TIMEOUT)."""
    answer = await call(client, address, pop_request(topic, group, **kwargs), 15)  # type: ignore[arg-type]
    if answer.code == ResponseCode.POLLING_TIMEOUT:
        return []
    assert answer.code == ResponseCode.SUCCESS, (answer.code, answer.remark)
    return [Popped(m, m.properties[POP_CK]) for m in decode_records(answer.body or b"")]


def ack_request(topic: str, popped: Popped, group: str = "CG_pop") -> RemotingCommand:
    """An ACK_MESSAGE of one popped message."""
    header = AckMessageRequestHeader(
        consumer_group=group, topic=topic, queue_id=popped.queue_id,
        extra_info=popped.handle, offset=popped.offset,
    )  # fmt: skip
    return RemotingCommand.request(RequestCode.ACK_MESSAGE, encode_header(header))


def change_request(
    topic: str, popped: Popped, invisible_ms: int, group: str = "CG_pop"
) -> RemotingCommand:
    """A CHANGE_MESSAGE_INVISIBLETIME of one popped message."""
    header = ChangeInvisibleTimeRequestHeader(
        consumer_group=group, topic=topic, queue_id=popped.queue_id,
        extra_info=popped.handle, offset=popped.offset, invisible_time=invisible_ms,
    )  # fmt: skip
    return RemotingCommand.request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, encode_header(header))


def new_handle(popped: Popped, answer: RemotingCommand) -> Popped:
    """The handle after a change of invisible time, built from the answer as a front does."""
    fields = popped.handle.split(" ")
    ext = answer.ext_fields or {}
    start = str(popped.offset)  # the new checkpoint holds the one message
    fields[0:3] = [start, str(ext["popTime"]), str(ext["invisibleTime"])]
    return Popped(popped.message, " ".join(fields))


def batch_ack_request(topic: str, popped: list[Popped], group: str = "CG_pop") -> RemotingCommand:
    """A BATCH_ACK_MESSAGE of messages popped together from one queue (one BatchAck)."""
    fields = popped[0].handle.split(" ")
    start = int(fields[0])
    bits = 0
    for one in popped:
        bits |= 1 << (one.offset - start)
    raw = bits.to_bytes(max(1, (bits.bit_length() + 7) // 8), "little")
    body = {
        "brokerName": fields[5],
        "acks": [{
            "c": group, "t": topic, "r": fields[4], "so": start, "q": int(fields[6]),
            "rq": int(fields[3]), "pt": int(fields[1]), "it": int(fields[2]),
            "b": base64.b64encode(raw).decode(),
        }],
    }  # fmt: skip
    return RemotingCommand.request(RequestCode.BATCH_ACK_MESSAGE, None, json.dumps(body).encode())


def notification_request(
    topic: str,
    group: str = "CG_pop",
    *,
    queue_id: int = -1,
    poll_ms: int = 0,
    order: bool = False,
) -> RemotingCommand:
    """A NOTIFICATION long poll (``order``: for a FIFO group)."""
    header = NotificationRequestHeader(
        consumer_group=group, topic=topic, queue_id=queue_id, poll_time=poll_ms, born_time=0,
        order=order,
    )  # fmt: skip
    return RemotingCommand.request(RequestCode.NOTIFICATION, encode_header(header))


def assignment_request(topic: str, group: str = "CG_pop") -> RemotingCommand:
    """A QUERY_ASSIGNMENT for pop."""
    body = {"topic": topic, "consumerGroup": group, "clientId": "c1",
            "strategyName": "AVG", "messageModel": "CLUSTERING"}  # fmt: skip
    return RemotingCommand.request(RequestCode.QUERY_ASSIGNMENT, None, json.dumps(body).encode())
