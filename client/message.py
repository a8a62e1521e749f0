"""What producers send and get back: `Message`, `SendResult`, `SendStatus`, `MQClientError`."""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from protocol.bodies import MessageQueue
from protocol.command import RemotingError
from protocol.message import MessageConst


class MQClientError(RemotingError):
    """A client-side failure: no route, no queue to send to, a bad message or a broker refusal."""


class SendStatus(enum.Enum):
    """How a send ended on the broker (RocketMQ's SendStatus)."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@attrs.define(kw_only=False)
class Message:
    """A message to send: topic, body, and the usual optional parts.

    ``delay_level`` (1..18) asks the broker to deliver later; ``deliver_time_ms`` is carried
    as the ``__STARTDELIVERTIME`` property for brokers that honour timed delivery.
    """

    topic: str
    body: bytes
    tags: str | None = attrs.field(default=None, kw_only=True)
    keys: str | list[str] | None = attrs.field(default=None, kw_only=True)
    properties: Mapping[str, str] = attrs.field(factory=dict, kw_only=True)
    delay_level: int = attrs.field(default=0, kw_only=True)
    deliver_time_ms: int | None = attrs.field(default=None, kw_only=True)
    flag: int = attrs.field(default=0, kw_only=True)
    wait_store_msg_ok: bool = attrs.field(default=True, kw_only=True)

    def wire_properties(self) -> dict[str, str]:
        """User properties plus TAGS, KEYS, DELAY, WAIT and the deliver time, as stored."""
        props = dict(self.properties)
        if self.tags:
            props[MessageConst.TAGS] = self.tags
        if self.keys:
            keys = self.keys if isinstance(self.keys, str) else " ".join(self.keys)
            props[MessageConst.KEYS] = keys
        if self.delay_level > 0:
            props[MessageConst.DELAY] = str(self.delay_level)
        if self.deliver_time_ms is not None:
            props[MessageConst.START_DELIVER_TIME] = str(self.deliver_time_ms)
        props[MessageConst.WAIT] = "true" if self.wait_store_msg_ok else "false"
        return props


@attrs.frozen
class SendResult:
    """The answer to a send: status, client msg id (UNIQ_KEY), offset msg id, queue, offset.

    For a batch, ``msg_id`` and ``offset_msg_id`` are the ids of every message joined by ``,``.
    """

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    region_id: str | None = None
    trace_on: bool = True
