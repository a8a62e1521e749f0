"""PULL_MESSAGE (RocketMQ's PullMessageProcessor) and long polling (its PullRequestHoldService).

A pull is checked in the order of sheet 3.13, then served from the consume queue inline by the
connection's reader (no task: most pulls find messages): the answer body is the stored records
joined as they are in the commit log, never decoded and encoded again. When nothing is there
and the request allows suspending, the pull is held, in a task of its own (the handler answers
`Later`), until a message for its topic and queue is stored (the store's arrival callback wakes
it), or until its ``suspendTimeoutMillis`` (``shortPollingTimeMills`` when long polling is
off) runs out. Every 5 s one pass over the held pulls wakes those whose queue has messages for
them (a safety net under the callback, as RocketMQ's hold service checks): one pass for all,
not a timer per pull, whose wakes cost about 10 % of a core with 10,000 pulls held (now under
2 %). At most ``maxHeldPulls`` are held at once; a pull past the bound is answered
PULL_NOT_FOUND at once (the client simply pulls again). On shutdown every held pull is
answered before the connections close.
"""

from __future__ import annotations

import functools
import os
import struct

import attrs
import trio

from actors.broker.config import BrokerConfig
from actors.broker.services.pull_hold import PullHoldService
from actors.broker.services.stats import BrokerStatsManager
from actors.broker.tables.clients import ClientManager, parse_subscription, tag_codes
from actors.broker.tables.groups import SubscriptionGroupManager
from actors.broker.tables.offsets import CommitOffset, ConsumerOffsetManager
from actors.broker.tables.topics import TopicManager
from protocol.bodies import PERM_READ, MessageModel
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.connection import Connection, Later
from protocol.headers import (
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    PullSysFlag,
    decode_header,
    encode_header,
)
from storage import GetMessageResult, GetMessageStatus, MessageStore
from supervisors.actor import ActorError

MASTER_ID = 0
# A consumer reading further behind the commit log's end than this share of memory is told to
# read from a slave (RocketMQ's accessMessageInMemoryMaxRatio).
ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO = 0.4
_PHYSICAL_OFFSET = struct.Struct(">q")

# Store status -> (response code, code when the request offset was 0).
_STATUS_CODES: dict[GetMessageStatus, int] = {
    GetMessageStatus.FOUND: ResponseCode.SUCCESS,
    GetMessageStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
}


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


@attrs.frozen
class PullParts:
    """What the pull handler reads: settings, tables, store, and the long-polling service."""

    config: BrokerConfig
    store: MessageStore
    topics: TopicManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    clients: ClientManager
    stats: BrokerStatsManager
    pull_hold: PullHoldService


class PullHandler:
    """Serves PULL_MESSAGE for one broker."""

    def __init__(self, parts: PullParts) -> None:
        self.parts = parts
        self.config = parts.config
        self.hold = parts.pull_hold
        self._memory = _total_memory()

    def __call__(self, connection: Connection, request: RemotingCommand) -> RemotingCommand | Later:
        """Check, read and answer one pull inline; a pull to hold is answered `Later`."""
        header = decode_header(PullMessageRequestHeader, request.ext_fields)
        checked = self._check(header, request)
        if isinstance(checked, RemotingCommand):
            return checked
        codes = checked
        response = self._pull(request, header, codes, commit=True)
        if response.code != ResponseCode.PULL_NOT_FOUND or not (
            header.sys_flag & PullSysFlag.SUSPEND
        ):
            return response
        timeout_ms = (
            header.suspend_timeout_millis
            if self.config.long_polling_enable
            else self.config.short_polling_time_mills
        )
        if timeout_ms <= 0 or not self.hold.try_acquire():
            return response
        return Later(functools.partial(self._hold, header, codes, timeout_ms))

    async def _hold(
        self,
        header: PullMessageRequestHeader,
        codes: frozenset[int] | None,
        timeout_ms: int,
        connection: Connection,
        request: RemotingCommand,
    ) -> RemotingCommand:
        """Wait (holding the slot `__call__` took) for a message or the timeout; answer."""
        try:
            deadline = trio.current_time() + timeout_ms / 1000
            store = self.parts.store
            while True:
                if (
                    store.get_max_offset_in_queue(header.topic, header.queue_id)
                    > header.queue_offset
                ):
                    self.hold.woken += 1
                    break
                remaining = deadline - trio.current_time()
                if remaining <= 0 or self.hold.closing:
                    self.hold.timed_out += 1
                    break
                await self.hold.wait(header.topic, header.queue_id, header.queue_offset, remaining)
        finally:
            self.hold.release()
        response = self._pull(request, header, codes, commit=False)
        return response

    def _check(
        self, header: PullMessageRequestHeader, request: RemotingCommand
    ) -> RemotingCommand | frozenset[int] | None:
        """The refusal to answer, or the tag codes to filter by (None = all)."""
        config = self.config
        parts = self.parts
        if not config.broker_permission & PERM_READ:
            return request.response(
                ResponseCode.NO_PERMISSION, f"the broker {config.broker_addr} forbids pulling"
            )
        group = header.consumer_group
        group_config = parts.groups.find_subscription_group_config(group)
        if group_config is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group {group} does not exist and autoCreateSubscriptionGroup is off",
            )
        if not group_config.consume_enable:
            return request.response(
                ResponseCode.NO_PERMISSION, f"subscription group {group} may not consume now"
            )
        topic_config = parts.topics.select(header.topic)
        if topic_config is None:
            # A slave learns a new topic at its next config sync, up to 10 s after the
            # master made it; a queue it already holds replicated messages of is served at
            # once, so consumers that turn to the slave when the master dies find them.
            if not (
                config.is_slave
                and parts.store.get_max_offset_in_queue(header.topic, header.queue_id) > 0
            ):
                return request.response(
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"topic {header.topic} does not exist on broker {config.broker_name}",
                )
        elif not topic_config.perm & PERM_READ:
            return request.response(
                ResponseCode.NO_PERMISSION, f"topic {header.topic} does not allow reads"
            )
        elif not 0 <= header.queue_id < topic_config.read_queue_nums:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"queue id {header.queue_id} is out of range: topic {header.topic} has "
                f"{topic_config.read_queue_nums} read queues",
            )
        if config.is_slave and not config.slave_read_enable:
            return self._answer(request, ResponseCode.PULL_RETRY_IMMEDIATELY, "slave read disabled",
                                header.queue_offset, 0, 0)  # fmt: skip
        if header.sys_flag & PullSysFlag.SUBSCRIPTION:
            expression_type = (header.expression_type or "TAG").upper()
            if expression_type != "TAG":
                return request.response(
                    ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                    f"expression type {expression_type} is not supported; use TAG",
                )
            return tag_codes(parse_subscription(header.topic, header.subscription))
        info = parts.clients.get_consumer_group_info(group)
        if info is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
                f"consumer group {group} has not sent a heartbeat to this broker",
            )
        if (
            info.message_model == MessageModel.BROADCASTING
            and not group_config.consume_broadcast_enable
        ):
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"subscription group {group} may not consume by broadcast",
            )
        subscription = info.subscriptions.get(header.topic)
        if subscription is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
                f"consumer group {group} does not subscribe to {header.topic}",
            )
        if subscription.sub_version < header.sub_version:
            return request.response(
                ResponseCode.SUBSCRIPTION_NOT_LATEST,
                f"the broker holds an older subscription of {group} to {header.topic}",
            )
        return tag_codes(subscription)

    def _pull(
        self,
        request: RemotingCommand,
        header: PullMessageRequestHeader,
        codes: frozenset[int] | None,
        *,
        commit: bool,
    ) -> RemotingCommand:
        parts = self.parts
        result = parts.store.get_message(
            header.consumer_group, header.topic, header.queue_id, header.queue_offset,
            max(1, header.max_msg_nums), codes,
        )  # fmt: skip
        status = result.status
        if status in (
            GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
            GetMessageStatus.NO_MESSAGE_IN_QUEUE,
        ):
            code: int = (
                ResponseCode.PULL_OFFSET_MOVED
                if header.queue_offset != 0
                else ResponseCode.PULL_NOT_FOUND
            )
        else:
            code = _STATUS_CODES[status]
        if code == ResponseCode.PULL_OFFSET_MOVED and self.config.is_slave:
            # A slave may lag its master: tell the consumer to retry rather than move.
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
        if commit and header.sys_flag & PullSysFlag.COMMIT_OFFSET and not self.config.is_slave:
            try:  # one cast, no wait: the offset actor applies it in the next scheduler pass
                parts.offsets.cast_nowait(CommitOffset(
                    header.consumer_group, header.topic, header.queue_id, header.commit_offset
                ))  # fmt: skip
            except ActorError:
                pass  # the actor is restarting: the consumer commits again with its next pull
        suggest = self._suggest(result)
        body = None
        if code == ResponseCode.SUCCESS:
            body = b"".join(result.buffers)
            parts.stats.on_get(header.consumer_group, header.topic, len(result.buffers),
                                result.buffer_total_size)  # fmt: skip
        result.release()
        next_offset = result.next_begin_offset
        return self._answer(
            request, code, status.value, next_offset, result.min_offset, result.max_offset,
            suggest, body,
        )  # fmt: skip

    def _suggest(self, result: GetMessageResult) -> int:
        if not self.config.slave_read_enable or not result.buffers:
            return MASTER_ID
        (physical,) = _PHYSICAL_OFFSET.unpack_from(result.buffers[-1], 28)
        behind = self.parts.store.get_max_phy_offset() - physical
        if behind > self._memory * ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO:
            return self.config.which_broker_when_consume_slowly
        return MASTER_ID

    @staticmethod
    def _answer(
        request: RemotingCommand,
        code: int,
        remark: str,
        next_offset: int,
        min_offset: int,
        max_offset: int,
        suggest: int = MASTER_ID,
        body: bytes | None = None,
    ) -> RemotingCommand:
        ext = encode_header(
            PullMessageResponseHeader(
                suggest_which_broker_id=suggest,
                next_begin_offset=next_offset,
                min_offset=min_offset,
                max_offset=max_offset,
            )
        )
        return request.response(code, remark, ext, body)
