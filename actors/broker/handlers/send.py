"""SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE (RocketMQ's SendMessageProcessor).

Checks run in the order of sheet 3.12, each refusal with its RocketMQ response code and a
remark that says what to fix; nothing is stored when a check fails. The body goes to the store
as received (compressed bodies stay compressed); the answer carries the offset msg id, the
queue and the queue offset.

A message with a ``BOLTMQ_DEDUP_KEY`` property already stored within the dedup window is
answered with the first one's result and not stored again (`actors.broker.services.dedup`);
in a batch each message is checked on its own, and only the new ones are stored.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial
from operator import itemgetter
from time import perf_counter
from typing import TYPE_CHECKING

import attrs

from actors.broker.config import BrokerConfig
from actors.broker.services.dedup import DEDUP_KEY, DedupIndex, KeyInFlight, StoredMessage
from actors.broker.services.request_stats import RequestStats, message_type_of
from actors.broker.services.schedule import ScheduleMessageService
from actors.broker.services.stats import BrokerStatsManager
from actors.broker.services.transaction import prepare_half_message
from actors.broker.tables.groups import SubscriptionGroupManager
from actors.broker.tables.topics import (
    NOT_ALLOWED_SEND_TOPICS,
    PERM_RW,
    CreateTopicInSendBack,
    CreateTopicInSendMessageMethod,
    TopicManager,
    TopicMissing,
    check_topic_name,
    create_then_serve,
)
from protocol.bodies import PERM_WRITE, TopicConfig, TopicFilterType
from protocol.codes import RequestCode, ResponseCode
from protocol.command import ConnectionClosedError, RemotingCommand, RemotingError
from protocol.connection import Connection
from protocol.frame import encode_answer
from protocol.headers import (
    MSG_REGION,
    TRACE_ON,
    SendFields,
    decode_send_fields,
)
from protocol.message import (
    MessageConst,
    MessageFormatError,
    MessageSysFlag,
    decode_batch_tuples,
    properties_to_string,
    string_to_properties,
)
from protocol.names import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, dlq_topic
from protocol.transport import parse_address
from storage import (
    MessageBatch,
    MessageExtBrokerInner,
    MessageStore,
    PutMessageResult,
    PutMessageStatus,
)

if TYPE_CHECKING:
    from actors.broker.ha.controller_mode import ControllerLink
    from actors.broker.ha.master import HAService

#: Store statuses that still stored the message, and the code to answer them with.
_STORED_CODES = {
    PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
}
_FAILED_CODES = {
    PutMessageStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutMessageStatus.OS_PAGECACHE_BUSY: ResponseCode.SYSTEM_BUSY,
}


#: Entries at most in each of the send handler's caches (cleared whole when full).
_CACHE_LIMIT = 65536


class SendRefused(RemotingError):
    """A send check failed: the response code and remark to answer with."""


@attrs.frozen
class SendParts:
    """What the send handler uses: settings, tables, store and the services a send meets."""

    config: BrokerConfig
    topics: TopicManager
    groups: SubscriptionGroupManager
    store: MessageStore
    #: Delayed and timed sends are stored in the schedule or timer topic.
    schedule: ScheduleMessageService
    dedup: DedupIndex
    stats: BrokerStatsManager
    request_stats: RequestStats
    #: The master's HA service (None on a slave): a SYNC_MASTER answers once a slave has it.
    ha_service: HAService | None
    #: Controller mode's link (None without it): `ControlledSendHandler` answers by it.
    controller: ControllerLink | None = None


class SendHandler:
    """Serves the three send codes for one broker."""

    def __init__(self, parts: SendParts) -> None:
        # Bound one by one: the send path reads them per message.
        self.config = config = parts.config
        self.topics = parts.topics
        self.groups = parts.groups
        self.store = parts.store
        self.schedule = parts.schedule
        self.dedup = parts.dedup
        self.stats = parts.stats
        self.request_stats = parts.request_stats
        self.ha_service = parts.ha_service
        self.controller = parts.controller
        self.cluster_name = config.broker_cluster_name
        self._region = config.region_id
        self._trace_on = "true" if config.trace_on else "false"
        self._timed = parts.request_stats.timing  # latency buckets for the metrics
        # Per send, cached: topic names already found valid, and each peer's (host, port).
        self._valid_topics: set[str] = set()
        self._born_hosts: dict[str, tuple[str, int]] = {}

    def __call__(self, connection: Connection, request: RemotingCommand) -> RemotingCommand | None:
        """Check and store one send; the answer goes out when the store has the message.

        A plain function on purpose: the reader calls it inline and the store writer's
        callback sends the answer, so a send costs no task and no event of its own.
        """
        started = perf_counter() if self._timed else 0.0  # actors.broker.services.request_stats
        try:
            header = decode_send_fields(request.ext_fields)
            batch = header.batch or request.code == RequestCode.SEND_BATCH_MESSAGE
            topic_config, queue_id, topic, reconsume = self._check(header, request)
            # set by _put for a batch some of whose messages are duplicates
            merge = _Merge() if batch else _SINGLE
            # A partial, not a closure: a closure over this many names cost a microsecond
            # of a single send in cells alone (py-spy).
            done = partial(self._done, self.ha_service, connection, request, header,
                           topic, queue_id, merge, started)  # fmt: skip
            duplicate = self._put(connection, request, header, batch, topic_config, topic,
                                  queue_id, reconsume, done, merge)  # fmt: skip
            if duplicate is not None and not request.is_oneway:
                if started:
                    self.request_stats.on_rpc(request.code, duplicate.code, started)
                return duplicate
        except SendRefused as refused:
            if started:
                self.request_stats.on_rpc(request.code, refused.code, started)
            return request.response(refused.code, refused.remark)
        except TopicMissing as missing:  # a topic's first send (actors.broker.tables.topics)
            return create_then_serve(self.topics, missing, connection, request, self)
        return None

    def _done(
        self,
        ha: HAService | None,
        connection: Connection,
        request: RemotingCommand,
        header: SendFields,
        topic: str,
        queue_id: int,
        merge: _Merge,
        started: float,
        result: PutMessageResult,
    ) -> None:
        """The store's callback of a send: count it and answer the producer."""
        # The callback again for a SYNC_MASTER's wait (defer answers False at once otherwise).
        if ha is not None and ha.sync_master:
            again = partial(
                self._done, ha, connection, request, header, topic, queue_id, merge, started
            )
            if ha.defer(result, again):
                return  # SYNC_MASTER: answered once a slave has it (actors.broker.ha.master)
        if result.msg_num:  # stored (a refused put has none); actors.broker.services.stats
            self.stats.on_put(topic, result.msg_num, result.wrote_bytes,
                                     message_type_of(header.properties))  # fmt: skip
            if topic != header.topic and topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
                self.request_stats.on_dlq(
                    topic[len(DLQ_GROUP_TOPIC_PREFIX) :], header.topic, result.msg_num
                )
        if request.is_oneway or connection.closed:
            return
        code = _STORED_CODES.get(result.status)
        if code is not None and merge.originals is None:
            # The usual answer, encoded straight from its fields (the same bytes as _ok's).
            ext = {
                "msgId": result.msg_id,
                "queueId": str(queue_id),
                "queueOffset": str(result.queue_offset),
                MSG_REGION: self._region,
                TRACE_ON: self._trace_on,
            }
            if started:
                self.request_stats.on_rpc(request.code, code, started)
            try:
                connection.send_frame(encode_answer(request, code, ext))
            except ConnectionClosedError:
                pass  # the producer went away; it will not read the answer
            return
        answer = self._answer(request, result, queue_id, merge)
        if started:
            self.request_stats.on_rpc(request.code, answer.code, started)
        try:
            connection.send(answer)
        except ConnectionClosedError:
            pass  # the producer went away; it will not read the answer

    def check(
        self, header: SendFields, request: RemotingCommand
    ) -> tuple[TopicConfig, int, str, int]:
        """A send's checks (sheet 3.12): (topic config, queue id, topic to store in,
        reconsume times); raises `SendRefused`, or `TopicMissing` for a topic to create."""
        return self._check(header, request)

    def _check(
        self, header: SendFields, request: RemotingCommand
    ) -> tuple[TopicConfig, int, str, int]:
        config = self.config
        if config.is_slave:
            controller = self.controller
            raise SendRefused(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                controller.write_refusal() if controller is not None
                else f"broker {config.broker_name} is a slave and does not take writes; "
                "send to its master",
            )  # fmt: skip
        if not config.broker_permission & PERM_WRITE:
            raise SendRefused(
                ResponseCode.NO_PERMISSION,
                f"the broker {config.broker_addr} forbids sending (brokerPermission "
                f"{config.broker_permission})",
            )
        topic = header.topic
        if topic not in self._valid_topics:
            problem = check_topic_name(topic)
            if problem is not None:
                raise SendRefused(ResponseCode.SYSTEM_ERROR, problem)
            if len(self._valid_topics) >= _CACHE_LIMIT:
                self._valid_topics.clear()
            self._valid_topics.add(topic)
        if topic in NOT_ALLOWED_SEND_TOPICS:
            raise SendRefused(
                ResponseCode.NO_PERMISSION, f"sending to the system topic {topic} is forbidden"
            )
        body = request.body
        if body is None:
            raise SendRefused(ResponseCode.MESSAGE_ILLEGAL, "the send request has no body")
        if len(body) > config.max_message_size:
            raise SendRefused(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the message body of {len(body)} bytes exceeds maxMessageSize "
                f"{config.max_message_size}",
            )
        topic_config = self.topics.select(topic)
        if topic_config is None:
            # Created by the topic actor, then the send is served again (TopicMissing).
            queues = header.default_topic_queue_nums
            if self.topics.topic_from_template(topic, header.default_topic, queues) is not None:
                raise TopicMissing(
                    CreateTopicInSendMessageMethod(topic, header.default_topic, queues)
                )
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                raise TopicMissing(CreateTopicInSendBack(topic, 1, PERM_RW))
            raise SendRefused(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic {topic} does not exist on broker {config.broker_name} and cannot be "
                f"created from {header.default_topic!r} (autoCreateTopicEnable="
                f"{str(config.auto_create_topic_enable).lower()})",
            )
        if not topic_config.perm & PERM_WRITE:
            raise SendRefused(
                ResponseCode.NO_PERMISSION,
                f"topic {topic} does not allow writes (perm {topic_config.perm})",
            )
        queue_id = header.queue_id
        queues = max(topic_config.write_queue_nums, topic_config.read_queue_nums)
        if queue_id >= queues:
            raise SendRefused(
                ResponseCode.SYSTEM_ERROR,
                f"queue id {queue_id} is out of range: topic {topic} has {queues} queues",
            )
        if queue_id < 0:
            queue_id = random.randrange(max(topic_config.write_queue_nums, 1))
        reconsume = header.reconsume_times or 0
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            group = topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
            group_config = self.groups.find_subscription_group_config(group)
            if group_config is None:
                raise SendRefused(
                    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                    f"subscription group {group} does not exist",
                )
            max_times = group_config.retry_max_times
            if header.max_reconsume_times is not None and header.max_reconsume_times >= 0:
                max_times = header.max_reconsume_times
            if reconsume >= max_times:
                topic = dlq_topic(group)
                topic_config = self.topics.select(topic)
                if topic_config is None:
                    raise TopicMissing(CreateTopicInSendBack(topic, 1, PERM_RW))
                queue_id = 0
        return topic_config, queue_id, topic, reconsume

    def _put(
        self,
        connection: Connection,
        request: RemotingCommand,
        header: SendFields,
        batch: bool,
        topic_config: TopicConfig,
        topic: str,
        queue_id: int,
        reconsume: int,
        done: Callable[[PutMessageResult], None],
        merge: _Merge,
    ) -> RemotingCommand | None:
        """Store the send; a duplicate's answer when every message of it is one."""
        body = request.body
        assert body is not None
        body = bytes(body)
        peer = connection.peer
        born_host = self._born_hosts.get(peer)
        if born_host is None:
            if len(self._born_hosts) >= _CACHE_LIMIT:
                self._born_hosts.clear()
            born_host = self._born_hosts[peer] = parse_address(peer)
        sys_flag = header.sys_flag
        if topic_config.topic_filter_type == TopicFilterType.MULTI_TAG:
            sys_flag |= MessageSysFlag.MULTI_TAGS
        properties = string_to_properties(header.properties or "")
        properties.pop(MessageConst.WAIT, None)
        properties[MessageConst.CLUSTER] = self.cluster_name
        dedup_topic = topic  # keys are scoped by the topic the producer named
        if properties.get(MessageConst.TRAN_MSG) == "true":  # a half message (transaction.py)
            topic, queue_id, sys_flag = prepare_half_message(
                self.topics, properties, topic, queue_id, sys_flag, batch)  # fmt: skip
        # Delayed and timed sends are stored in the schedule or timer topic
        # (actors.broker.services.schedule).
        topic, queue_id, tags_code = self.schedule.redirect_send(
            topic, queue_id, properties, sys_flag, batch)  # fmt: skip
        if batch:
            try:
                elements = decode_batch_tuples(body)
            except MessageFormatError as exc:
                raise SendRefused(ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {exc}") from None
            if not elements:
                raise SendRefused(ResponseCode.MESSAGE_ILLEGAL, "the batch holds no message")
            if self.dedup.enabled:
                elements, done, answer = self._dedup_batch(
                    request, dedup_topic, queue_id, elements, done, merge)  # fmt: skip
                if answer is not None:
                    return answer
            self.store.put_messages_nowait(
                MessageBatch(
                    topic=topic,
                    queue_id=queue_id,
                    elements=elements,
                    properties=properties_to_string(properties),
                    sys_flag=sys_flag,
                    born_timestamp=header.born_timestamp,
                    born_host=born_host,
                    reconsume_times=reconsume,
                ),
                done,
            )
            return None
        key = properties.get(DEDUP_KEY) if self.dedup.enabled else None
        if key is not None:
            stored = self._lookup(dedup_topic, key)
            if stored is not None:
                return self._ok(request, ResponseCode.SUCCESS, stored.msg_id, stored.queue_id,
                                stored.queue_offset)  # fmt: skip
            done = self._reserve_one(dedup_topic, key, queue_id, done)
        self.store.put_message_nowait(
            MessageExtBrokerInner(
                topic=topic,
                body=body,
                queue_id=queue_id,
                flag=header.flag,
                properties=properties,
                sys_flag=sys_flag,
                born_timestamp=header.born_timestamp,
                born_host=born_host,
                reconsume_times=reconsume,
                tags_code=tags_code,
            ),
            done,
        )
        return None

    def _answer(
        self, request: RemotingCommand, result: PutMessageResult, queue_id: int, merge: _Merge
    ) -> RemotingCommand:
        code = _STORED_CODES.get(result.status)
        if code is None:
            failed = _FAILED_CODES.get(result.status, ResponseCode.SYSTEM_ERROR)
            remark = result.remark or f"the store refused the message: {result.status}"
            return request.response(failed, remark)
        if merge.originals is not None:  # a batch of which only some messages were stored
            msg_id, queue_offset = merge.merged(result)
            return self._ok(request, code, msg_id, queue_id, queue_offset)
        return self._ok(request, code, result.msg_id, queue_id, result.queue_offset)

    def _ok(
        self, request: RemotingCommand, code: int, msg_id: str, queue_id: int, queue_offset: int
    ) -> RemotingCommand:
        # The SendMessageResponseHeader fields and the two extras, written directly: this runs
        # once per send, and the generic header encoder costs more than the rest of it.
        ext = {
            "msgId": msg_id,
            "queueId": str(queue_id),
            "queueOffset": str(queue_offset),
            MSG_REGION: self._region,
            TRACE_ON: self._trace_on,
        }
        return request.response(code, None, ext)

    # -- the dedup index (actors.broker.services.dedup) -----------------------------------

    def _lookup(self, topic: str, key: str) -> StoredMessage | None:
        try:
            return self.dedup.lookup(topic, key)
        except KeyInFlight as busy:
            raise SendRefused(ResponseCode.SYSTEM_BUSY, f"{busy}; send it again") from None

    def _reserve_one(
        self, topic: str, key: str, queue_id: int, done: Callable[[PutMessageResult], None]
    ) -> Callable[[PutMessageResult], None]:
        """Reserve ``key``; the callback that records (or, on failure, releases) it."""
        index = self.dedup
        index.reserve(topic, key)

        def stored(result: PutMessageResult) -> None:
            if result.ok and result.physical_offsets:
                index.record(topic, key, StoredMessage(result.msg_ids[0], queue_id,
                                                       result.queue_offset))  # fmt: skip
            elif not result.ok:
                index.release(topic, key)
            done(result)

        return stored

    def _dedup_batch(
        self,
        request: RemotingCommand,
        topic: str,
        queue_id: int,
        elements: list[tuple[int, bytes, str]],
        done: Callable[[PutMessageResult], None],
        merge: _Merge,
    ) -> tuple[list[tuple[int, bytes, str]], Callable[[PutMessageResult], None],
               RemotingCommand | None]:  # fmt: skip
        """The batch's new messages and the callback recording their keys, or the answer when
        every message is a duplicate. Each message is checked on its own: a producer that
        sends again a batch of which part was stored stores only the rest."""
        # Most batches carry no key: one scan of their properties joined rules that out (a
        # mark across two elements' joint only costs the look per element below).
        if _DEDUP_MARK not in "".join(map(_PROPERTIES, elements)):
            return elements, done, None
        keys = [_dedup_key(properties) for _, _, properties in elements]
        if not any(keys):
            return elements, done, None
        index = self.dedup
        first_of: dict[str, int] = {}
        repeats: dict[int, int] = {}  # the same key twice in one batch: stored once
        for position, key in enumerate(keys):
            if key is not None and (earlier := first_of.setdefault(key, position)) != position:
                keys[position] = None
                repeats[position] = earlier
        try:
            found, names = index.lookup_batch(topic, keys)
        except KeyInFlight as busy:
            raise SendRefused(ResponseCode.SYSTEM_BUSY, f"{busy}; send it again") from None
        originals: list[StoredMessage | int | None] = list(found)
        for position, earlier in repeats.items():
            originals[position] = earlier
        fresh = [p for p, o in enumerate(originals) if o is None]
        if not fresh:
            ids = [_original(originals, p).msg_id for p in range(len(elements))]
            first = _original(originals, 0)
            return elements, done, self._ok(request, ResponseCode.SUCCESS, ",".join(ids),
                                            first.queue_id, first.queue_offset)  # fmt: skip
        # (k, name) of the k-th message stored now, for those with a key.
        new_names = [(k, name) for k, p in enumerate(fresh) if (name := names[p]) is not None]
        index.reserve_batch([name for _, name in new_names])
        if len(fresh) < len(elements):
            merge.originals = originals

        def stored(result: PutMessageResult) -> None:
            if result.ok:
                index.record_batch(new_names, result.msg_ids, queue_id, result.queue_offset)
            else:
                index.release_batch(new_names)
            done(result)

        return [elements[p] for p in fresh], stored, None


_DEDUP_MARK = DEDUP_KEY + "\x01"
_PROPERTIES = itemgetter(2)  # of a (flag, body, properties) batch element


def _dedup_key(properties: str) -> str | None:
    # Sliced out rather than parsed: most batches carry no key, and splitting costs more.
    start = properties.find(_DEDUP_MARK)
    if start < 0:
        return None
    if start and properties[start - 1] != "\x02":  # the mark inside another value
        return string_to_properties(properties).get(DEDUP_KEY) or None
    start += len(_DEDUP_MARK)
    end = properties.find("\x02", start)
    return (properties[start:end] if end >= 0 else properties[start:]) or None


def _original(originals: list[StoredMessage | int | None], position: int) -> StoredMessage:
    found = originals[position]
    if isinstance(found, int):  # a repeat of an earlier message of the batch
        found = originals[found]
    assert isinstance(found, StoredMessage)
    return found


@attrs.define(slots=True)
class _Merge:
    """A batch of which some messages were duplicates: per message, its original
    (`StoredMessage`), the position of an earlier message of the batch with its key (int), or
    None for a message stored now, in order."""

    originals: list[StoredMessage | int | None] | None = None

    def merged(self, result: PutMessageResult) -> tuple[str, int]:
        """Every message's msg id (comma-joined, in the batch's order) and the first one's
        queue offset."""
        assert self.originals is not None
        new_ids = iter(result.msg_ids)
        ids: list[str] = []
        offsets: list[int] = []
        stored_now = 0
        for found in self.originals:
            if isinstance(found, int):
                ids.append(ids[found])
                offsets.append(offsets[found])
            elif found is None:
                ids.append(next(new_ids, ""))
                offsets.append(result.queue_offset + stored_now)
                stored_now += 1
            else:
                ids.append(found.msg_id)
                offsets.append(found.queue_offset)
        return ",".join(ids), offsets[0]


#: The `_Merge` of every single send: never set (only a batch's duplicates set one).
_SINGLE = _Merge()


class ControlledSendHandler(SendHandler):
    """The send handler of a controller-mode broker: answers only while it is master.

    A put the store accepted before the broker lost its mastership (fenced, or told of a
    newer master epoch) is answered SERVICE_NOT_AVAILABLE, not SEND_OK, also when it waited
    for a slave: the new master may not have it. A subclass, so a broker outside controller
    mode pays nothing for the check."""

    def _done(
        self,
        ha: HAService | None,
        connection: Connection,
        request: RemotingCommand,
        header: SendFields,
        topic: str,
        queue_id: int,
        merge: _Merge,
        started: float,
        result: PutMessageResult,
    ) -> None:
        controller = self.controller
        if controller is not None and not controller.is_master and result.status in _STORED_CODES:
            result.status = PutMessageStatus.SERVICE_NOT_AVAILABLE
            result.remark = controller.write_refusal() + " (the message was not acknowledged)"
        super()._done(ha, connection, request, header, topic, queue_id, merge, started, result)
