"""Pulling for the push consumer: one long-polling pull task per assigned queue.

`PullMessageService` (RocketMQ's PullMessageService and PullAPIWrapper) is the part of
`PushConsumer` that fills each queue's `ProcessQueue`: PULL_MESSAGE held up to 15 s by the
broker, at the broker id the last answer suggested (a slave while the master is down), with
our committed offset piggy-backed towards a master; tags re-checked on the client (the
broker filters by tag hash), bodies inflated, a redelivery shown under its original topic.
Concurrently consumed messages are then queued for the consume tasks.

Flow control: a queue's next pull waits 50 ms instead while it caches more than
``pull_threshold_for_queue`` messages or ``pull_threshold_size_for_queue`` bytes, or
(concurrently) spans more than ``consume_concurrently_max_span`` offsets. A failed pull
waits 3 s; less when the broker may have gone (`_delay_after_failure`), so a master elected
elsewhere is read from soon.
"""

from __future__ import annotations

import logging
import time

import anyio

from client.consume_service import ConsumeMessageService
from client.instance import MASTER_ID
from client.message import MQClientError
from client.process_queue import ProcessQueue, now_ms
from protocol.bodies import MessageModel
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.filter import TAG
from protocol.headers import (
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    PullSysFlag,
    decode_header,
    encode_header,
)
from protocol.message import (
    MessageConst,
    MessageExt,
    MessageSysFlag,
    decode_records,
    decompress_body,
)

log = logging.getLogger("boltmq.client")

_BROKER_SUSPEND = 15.0  # how long a pull may be held at the broker
_FLOW_CONTROL_DELAY = 0.05
_PULL_DELAY_ON_ERROR = 3.0
_PULL_DELAY_AFTER_MOVE = 0.1
_PULL_DELAY_NO_BROKER = 0.5
_PULL_DELAY_UNREACHABLE = 1.0
_PULL_ANSWERS = frozenset({
    ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
    ResponseCode.PULL_OFFSET_MOVED,
})  # fmt: skip


class PullMessageService(ConsumeMessageService):
    """Pull tasks of a push consumer; `PushConsumer` supplies the state and starts the tasks."""

    pull_batch_size: int
    pull_threshold_for_queue: int
    pull_threshold_size_for_queue: int
    consume_concurrently_max_span: int
    timeout: float
    #: Topic -> expression type of a subscription not by tag (SQL92); absent = TAG.
    expression_types: dict[str, str]

    async def _pull_loop(self, pq: ProcessQueue) -> None:
        with anyio.CancelScope() as scope:
            pq.pull_scope = scope
            flow_controlled = 0
            while not pq.dropped:
                if (
                    pq.count > self.pull_threshold_for_queue
                    or pq.size > self.pull_threshold_size_for_queue
                    or (not self.orderly and pq.max_span() > self.consume_concurrently_max_span)
                ):
                    flow_controlled += 1
                    self._stats["flow_control"] += 1
                    if flow_controlled % 1000 == 1:
                        log.info("%s: flow control on %s: %d messages, %d bytes, span %d",
                                 self.group, pq.queue, pq.count, pq.size,
                                 pq.max_span())  # fmt: skip
                    await anyio.sleep(_FLOW_CONTROL_DELAY)
                    continue
                if self._locks_queues and (not pq.locked or pq.lock_expired()):
                    await anyio.sleep(_PULL_DELAY_ON_ERROR)  # the lock service renews it
                    continue
                try:
                    await self._pull_once(pq)
                except RemotingError as exc:
                    log.warning("%s: pull of %s failed: %s", self.group, pq.queue, exc)
                    await anyio.sleep(self._delay_after_failure(pq, exc))
                except Exception:
                    log.exception("%s: pull of %s failed", self.group, pq.queue)
                    await anyio.sleep(_PULL_DELAY_ON_ERROR)

    def _delay_after_failure(self, pq: ProcessQueue, error: RemotingError) -> float:
        """How long a failed pull waits. The route was re-read on the failure: when it names
        another broker to read from (a master elected elsewhere), 0.1 s; when it names none
        (an election under way), 0.5 s, the pace of the rate-limited route refresh; when the
        broker could not be reached, 1 s (each retry re-reads the route); else 3 s."""
        found = self.instance.read_address(pq.queue.broker_name, pq.read_from)
        if found is None:
            return _PULL_DELAY_NO_BROKER
        if found[0] != pq.pull_address:
            return _PULL_DELAY_AFTER_MOVE
        if not isinstance(error, MQClientError):
            return _PULL_DELAY_UNREACHABLE  # no answer at all: the broker may be gone
        return _PULL_DELAY_ON_ERROR

    async def _pull_once(self, pq: ProcessQueue) -> None:
        queue = pq.queue
        subscription = self.subscriptions.get(queue.topic)
        if subscription is None:
            await anyio.sleep(_PULL_DELAY_ON_ERROR)  # unsubscribed: the rebalance drops it
            return
        expression, tags, sub_version = subscription
        address, broker_id = await self.instance.find_read_address(queue, pq.read_from)
        pq.pull_address = address
        sys_flag = PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION
        commit_offset = 0
        if self.message_model == MessageModel.CLUSTERING and broker_id == MASTER_ID:
            # The pull carries our progress to the master (never to a slave, as in Java).
            stored = self.offset_store.read(queue)
            if stored is not None and stored > 0:
                sys_flag |= PullSysFlag.COMMIT_OFFSET
                commit_offset = stored
        offset = pq.next_offset
        header = PullMessageRequestHeader(
            consumer_group=self.group, topic=queue.topic, queue_id=queue.queue_id,
            queue_offset=offset, max_msg_nums=self.pull_batch_size, sys_flag=int(sys_flag),
            commit_offset=commit_offset, suspend_timeout_millis=int(_BROKER_SUSPEND * 1000),
            subscription=expression, sub_version=sub_version,
            expression_type=self.expression_types.get(queue.topic, TAG),
        )  # fmt: skip
        request = RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header))
        started = time.perf_counter()
        pq.last_pull_timestamp = now_ms()
        response = await self.instance.invoke_for_queue(
            queue, request, _BROKER_SUSPEND + self.timeout, address
        )
        self._stats["pulls"] += 1
        topic_stats = self._topic(queue.topic)
        topic_stats[3] += 1
        topic_stats[4] += time.perf_counter() - started
        code = response.code
        if code not in _PULL_ANSWERS:
            raise MQClientError(code, f"pull of {queue} from {address}: {response.remark}")
        answer = decode_header(PullMessageResponseHeader, response.ext_fields)
        pq.read_from = answer.suggest_which_broker_id
        if pq.dropped:
            return
        next_offset = answer.next_begin_offset
        if code == ResponseCode.PULL_OFFSET_MOVED:
            log.warning("%s: offset %d of %s is illegal (queue holds %d..%d): moving to %d",
                        self.group, offset, queue, answer.min_offset, answer.max_offset,
                        next_offset)  # fmt: skip
            pq.next_offset = next_offset
            self.offset_store.update(queue, next_offset)
            await self.offset_store.persist([queue])
            return
        pq.next_offset = next_offset
        messages = self._decode(response.body, tags) if code == ResponseCode.SUCCESS else []
        if not messages:
            if pq.count == 0:
                # Nothing cached: what the broker skipped (filtered tags) counts as consumed.
                self.offset_store.update(queue, next_offset, increase_only=True)
            return
        pq.put(messages)
        if not self.orderly:
            batch = self.consume_message_batch_max_size
            if batch == 1:
                for message in messages:
                    self._submit(pq, [message])
            else:
                for start in range(0, len(messages), batch):
                    self._submit(pq, messages[start : start + batch])

    def _decode(
        self, body: bytes | bytearray | memoryview | None, tags: frozenset[str] | None
    ) -> list[MessageExt]:
        if not body:
            return []
        retry_topic = self._retry_topic
        messages = []
        for message in decode_records(body):
            if tags is not None and message.tags not in tags:
                continue  # the broker filters by tag hash; collisions are dropped here
            if message.sys_flag & MessageSysFlag.COMPRESSED:
                message.body = decompress_body(message.body)
                message.sys_flag &= ~MessageSysFlag.COMPRESSED
            if message.topic == retry_topic:
                # A redelivery: the listener sees the topic it subscribed to (as in Java).
                origin = message.properties.get(MessageConst.RETRY_TOPIC)
                if origin:
                    message.topic = origin
            messages.append(message)
        return messages
