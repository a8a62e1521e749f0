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

Filters: a TAG subscription is checked against the consume queue's tag hash; a SQL92 one
(with ``enablePropertyFilter``) against each record's properties, read from the commit log.
Both the subscription a pull carries and the one a heartbeat left are compiled once
(`protocol.filter` caches by expression; the heartbeat's per group and topic until its
subVersion changes). A held pull wakes only once a message its filter takes has arrived:
messages it would leave out move the offset it waits at, and the answer starts there.
"""

from __future__ import annotations

import functools
import logging
import os
import struct
from collections.abc import Callable

import attrs
import trio

from actors.broker.config import BrokerConfig
from actors.broker.services.pull_hold import PullHoldService
from actors.broker.services.stats import BrokerStatsManager
from actors.broker.tables.clients import ClientManager, parse_subscription, tag_codes
from actors.broker.tables.groups import SubscriptionGroupManager
from actors.broker.tables.offsets import CommitOffset, ConsumerOffsetManager
from actors.broker.tables.topics import TopicManager
from protocol.bodies import PERM_READ, MessageModel, SubscriptionData
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.connection import Connection, Later
from protocol.filter import SQL92, FilterParseError, Sql92Filter, compile_sql92, is_tag_type
from protocol.headers import (
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    PullSysFlag,
    decode_header,
    encode_header,
)
from protocol.message import MessageFormatError, record_properties
from storage import GetMessageResult, GetMessageStatus, MessageStore
from supervisors.actor import ActorError

log = logging.getLogger("boltmq.broker.pull")

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


# Heartbeat subscriptions compiled per (group, topic); a table past this many is started
# afresh (entries of groups long gone would otherwise stay for ever).
MAX_CACHED_SUBSCRIPTION_FILTERS = 10_000


@attrs.frozen
class PullFilter:
    """What a pull takes: tag hash codes (None = every tag), then a test of each record's
    bytes (None = every record)."""

    tag_codes: frozenset[int] | None
    record_filter: Callable[[memoryview], bool] | None = None

    @property
    def takes_all(self) -> bool:
        """True when nothing is filtered out."""
        return self.tag_codes is None and self.record_filter is None


@functools.lru_cache(maxsize=1024)
def sql92_pull_filter(expression: str) -> PullFilter | FilterParseError:
    """The pull filter of a SQL92 expression (cached by its text), or why it does not parse."""
    try:
        selector = compile_sql92(expression)
    except FilterParseError as error:
        return error
    return PullFilter(None, _record_filter(selector))


def _record_filter(selector: Sql92Filter) -> Callable[[memoryview], bool]:
    def matches(record: memoryview) -> bool:
        try:
            properties = record_properties(record)
        except MessageFormatError:
            return False  # a record the store holds is whole; never hand on one that is not
        return selector.matches(properties)

    return matches


@attrs.frozen
class _CachedFilter:
    sub_version: int
    expression_type: str
    expression: str
    answer: PullFilter | FilterParseError | None  # None: no expression, or an unknown type


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
        # (group, topic) -> the heartbeat subscription's compiled filter (see the docstring).
        self._subscription_filters: dict[tuple[str, str], _CachedFilter] = {}

    def __call__(self, connection: Connection, request: RemotingCommand) -> RemotingCommand | Later:
        """Check, read and answer one pull inline; a pull to hold is answered `Later`."""
        header = decode_header(PullMessageRequestHeader, request.ext_fields)
        checked = self._check(header, request)
        if isinstance(checked, RemotingCommand):
            return checked
        pull_filter = checked
        response = self._pull(request, header, pull_filter, commit=True)
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
        return Later(functools.partial(self._hold, header, pull_filter, timeout_ms))

    async def _hold(
        self,
        header: PullMessageRequestHeader,
        pull_filter: PullFilter,
        timeout_ms: int,
        connection: Connection,
        request: RemotingCommand,
    ) -> RemotingCommand:
        """Wait (holding the slot `__call__` took) for a message the filter takes, or the
        timeout; answer."""
        try:
            deadline = trio.current_time() + timeout_ms / 1000
            store = self.parts.store
            waiting_at = header.queue_offset
            while True:
                if store.get_max_offset_in_queue(header.topic, header.queue_id) > waiting_at:
                    if pull_filter.takes_all:
                        self.hold.woken += 1
                        break
                    passed = self._passed_over(header, pull_filter, waiting_at)
                    if passed is None:
                        self.hold.woken += 1
                        break
                    # Only messages the filter leaves out came: wait beyond them.
                    waiting_at = passed
                    continue
                remaining = deadline - trio.current_time()
                if remaining <= 0 or self.hold.closing:
                    self.hold.timed_out += 1
                    break
                await self.hold.wait(header.topic, header.queue_id, waiting_at, remaining)
        finally:
            self.hold.release()
        if waiting_at != header.queue_offset:
            header = attrs.evolve(header, queue_offset=waiting_at)
        response = self._pull(request, header, pull_filter, commit=False)
        return response

    def _passed_over(
        self, header: PullMessageRequestHeader, pull_filter: PullFilter, offset: int
    ) -> int | None:
        """None when a message from ``offset`` on passes the filter; else the offset the
        scan reached, every message before it left out."""
        result = self.parts.store.get_message(
            header.consumer_group, header.topic, header.queue_id, offset,
            max(1, header.max_msg_nums), pull_filter.tag_codes,
            record_filter=pull_filter.record_filter,
        )  # fmt: skip
        status, next_offset = result.status, result.next_begin_offset
        result.release()
        if status != GetMessageStatus.NO_MATCHED_MESSAGE or next_offset <= offset:
            return None
        return next_offset

    def _check(
        self, header: PullMessageRequestHeader, request: RemotingCommand
    ) -> RemotingCommand | PullFilter:
        """The refusal to answer, or the filter to read with."""
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
            expression_type = header.expression_type or ""
            if is_tag_type(expression_type.upper()):
                return PullFilter(tag_codes(parse_subscription(header.topic, header.subscription)))
            return self._sql92_from_pull(header, request, expression_type)
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
        if is_tag_type(subscription.expression_type.upper()):
            return PullFilter(tag_codes(subscription))
        return self._sql92_from_heartbeat(header, request, subscription)

    def _sql92_from_pull(
        self, header: PullMessageRequestHeader, request: RemotingCommand, expression_type: str
    ) -> RemotingCommand | PullFilter:
        """A subscription the pull carries that is not by tag: RocketMQ's answers and order
        (no expression, then the broker's setting, then the expression itself)."""
        expression = header.subscription or ""
        if not expression:
            return request.response(
                ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed"
            )
        if not self.config.enable_property_filter:
            return _filter_disabled(request, expression_type)
        answer = sql92_pull_filter(expression) if expression_type.upper() == SQL92 else None
        if not isinstance(answer, PullFilter):
            # RocketMQ would go on unfiltered here; a clear refusal loses nothing.
            log.warning(
                "pull of %s by %s: %s expression %r refused: %s", header.topic,
                header.consumer_group, expression_type, expression,
                answer.remark if answer is not None else "an unknown expression type",
            )  # fmt: skip
            return request.response(
                ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed"
            )
        return answer

    def _sql92_from_heartbeat(
        self,
        header: PullMessageRequestHeader,
        request: RemotingCommand,
        subscription: SubscriptionData,
    ) -> RemotingCommand | PullFilter:
        """A heartbeat subscription that is not by tag, compiled once per subVersion."""
        key = (header.consumer_group, header.topic)
        cached = self._subscription_filters.get(key)
        if (
            cached is None
            or cached.sub_version != subscription.sub_version
            or cached.expression != subscription.sub_string
            or cached.expression_type != subscription.expression_type
        ):
            expression_type = subscription.expression_type
            answer = (
                sql92_pull_filter(subscription.sub_string)
                if expression_type.upper() == SQL92 and subscription.sub_string
                else None
            )
            if not isinstance(answer, PullFilter):
                log.warning(
                    "consumer group %s subscribes to %s with %s expression %r, refused: %s",
                    header.consumer_group, header.topic, expression_type, subscription.sub_string,
                    answer.remark if answer is not None else "no expression or an unknown type",
                )  # fmt: skip
            if len(self._subscription_filters) >= MAX_CACHED_SUBSCRIPTION_FILTERS:
                self._subscription_filters.clear()
            cached = self._subscription_filters[key] = _CachedFilter(
                subscription.sub_version, expression_type, subscription.sub_string, answer
            )
        if not isinstance(cached.answer, PullFilter):
            return request.response(
                ResponseCode.FILTER_DATA_NOT_EXIST,
                "The broker's consumer filter data is not exist!Your expression may be wrong!",
            )
        if not self.config.enable_property_filter:
            return _filter_disabled(request, cached.expression_type)
        return cached.answer

    def _pull(
        self,
        request: RemotingCommand,
        header: PullMessageRequestHeader,
        pull_filter: PullFilter,
        *,
        commit: bool,
    ) -> RemotingCommand:
        parts = self.parts
        result = parts.store.get_message(
            header.consumer_group, header.topic, header.queue_id, header.queue_offset,
            max(1, header.max_msg_nums), pull_filter.tag_codes,
            record_filter=pull_filter.record_filter,
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


def _filter_disabled(request: RemotingCommand, expression_type: str) -> RemotingCommand:
    # RocketMQ's answer, word for word, when enablePropertyFilter is off.
    return request.response(
        ResponseCode.SYSTEM_ERROR,
        f"The broker does not support consumer to filter message by {expression_type}",
    )
