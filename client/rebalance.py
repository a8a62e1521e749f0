"""Rebalance of the push consumer: queue allocation, start offsets, broker locks.

`allocate_averagely` is RocketMQ's AllocateMessageQueueAveragely (sheet 9.2): the readable
queues of a topic, sorted, are cut into contiguous blocks over the group's consumer ids,
sorted; the first ``queues % consumers`` consumers get one more (8 over 3 is 3/3/2).

`RebalancePush` (RocketMQ's RebalancePushImpl) is the part of `PushConsumer` that decides
which queues it consumes: it asks a broker for the group's consumer ids, allocates, drops the
queues that went elsewhere (commit, and unlock when orderly), and starts new ones at the
group's stored offset or per consumeFromWhere, taking the broker lock first when orderly.

Each assigned queue gets a `ProcessQueue` (process_queue.py); the pulling and consuming of
it are the other parts of `PushConsumer` (pull_service.py, consume_service.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import anyio

from client.instance import ClientInstance, subscribe_queues
from client.offset_store import OffsetStore
from client.process_queue import ProcessQueue, now_ms
from protocol import names
from protocol.bodies import (
    ConsumeFromWhere,
    GetConsumerListByGroupResponseBody,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageModel,
    MessageQueue,
    TopicRouteData,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.headers import (
    GetConsumerListByGroupRequestHeader,
    encode_header,
)

log = logging.getLogger("boltmq.client")

#: ``%RETRY%<group>`` topics start so (push_consumer imports it).
RETRY_PREFIX = names.RETRY_GROUP_TOPIC_PREFIX


def allocate_averagely(
    queues: Sequence[MessageQueue], consumer_ids: Sequence[str], client_id: str
) -> list[MessageQueue]:
    """The queues ``client_id`` takes of ``queues`` shared among ``consumer_ids``."""
    all_queues = sorted(queues, key=lambda q: (q.topic, q.broker_name, q.queue_id))
    cids = sorted(set(consumer_ids))
    if client_id not in cids or not all_queues:
        return []
    n, c, index = len(all_queues), len(cids), cids.index(client_id)
    mod = n % c
    if n <= c:
        average = 1
    elif mod > 0 and index < mod:
        average = n // c + 1
    else:
        average = n // c
    start = index * average if mod > 0 and index < mod else index * average + mod
    count = min(average, n - start)
    return [all_queues[(start + k) % n] for k in range(max(count, 0))]


class RebalancePush:
    """Queue assignment of a push consumer; `PushConsumer` supplies the state and the hooks."""

    group: str
    instance: ClientInstance
    orderly: bool
    message_model: MessageModel
    consume_from_where: ConsumeFromWhere
    consume_timestamp_ms: int | None
    offset_store: OffsetStore
    #: Topic -> (expression, tags or None for all, subVersion).
    subscriptions: dict[str, tuple[str, frozenset[str] | None, int]]
    _process_queues: dict[MessageQueue, ProcessQueue]
    _incomplete: bool
    _retry_delay: float

    def _start_queue(self, pq: ProcessQueue) -> None:
        """Start pulling (and, orderly, consuming) a newly assigned queue."""
        raise NotImplementedError

    @property
    def _retry_topic(self) -> str:
        return names.retry_topic(self.group)

    @property
    def _locks_queues(self) -> bool:
        return self.orderly and self.message_model == MessageModel.CLUSTERING

    # -- rebalance ----------------------------------------------------------------------------

    async def _rebalance(self) -> None:
        wanted: set[MessageQueue] = set()
        missing = False
        for topic in list(self.subscriptions):
            try:
                route = await self.instance.route(topic)
                if route is None:
                    log.debug("rebalance of %s: topic %s has no route yet", self.group, topic)
                    missing = True
                    continue
                queues = subscribe_queues(topic, route)
                if self.message_model == MessageModel.BROADCASTING:
                    wanted.update(queues)
                    continue
                consumer_ids = await self._consumer_ids(topic, route)
                if self.instance.client_id not in consumer_ids:
                    # Our heartbeat has not reached the broker yet (its route was learnt just
                    # now, so the heartbeat that goes with it may still be on its way): send
                    # one and ask again rather than wait a whole rebalance interval.
                    await self.instance.send_heartbeat_to_all_brokers()
                    consumer_ids = await self._consumer_ids(topic, route)
                if self.instance.client_id not in consumer_ids:
                    log.info("rebalance of %s: the brokers of %s do not list this consumer yet"
                             " (%d others); keeping its queues and asking again soon",
                             self.group, topic, len(consumer_ids))  # fmt: skip
                    wanted.update(q for q in self._process_queues if q.topic == topic)
                    missing = True
                    continue
                wanted.update(allocate_averagely(queues, consumer_ids, self.instance.client_id))
            except RemotingError as exc:
                log.warning("rebalance of %s for topic %s failed, keeping its queues: %s",
                            self.group, topic, exc)  # fmt: skip
                wanted.update(q for q in self._process_queues if q.topic == topic)
        skipped = await self._update_process_queues(wanted)
        incomplete = missing or skipped
        if incomplete and not self._incomplete:
            self._retry_delay = 0.1
        self._incomplete = incomplete

    async def _consumer_ids(self, topic: str, route: TopicRouteData) -> list[str]:
        brokers = sorted(b.broker_name for b in route.broker_datas)
        for name in brokers:
            found = self.instance.read_address(name)
            if found is None:
                continue
            header = GetConsumerListByGroupRequestHeader(consumer_group=self.group)
            request = RemotingCommand.request(
                RequestCode.GET_CONSUMER_LIST_BY_GROUP, encode_header(header)
            )
            try:
                response = await self.instance.invoke_broker(found[0], request)
            except RemotingError as exc:
                log.info("consumer list of %s from %s failed: %s", self.group, name, exc)
                continue
            if response.code == ResponseCode.SUCCESS and response.body:
                return GetConsumerListByGroupResponseBody.from_json(response.body).consumer_id_list
        return []

    async def _update_process_queues(self, wanted: set[MessageQueue]) -> bool:
        """Drop what is no longer wanted, start what is new; True if a new queue had to wait."""
        skipped = False
        for queue, pq in list(self._process_queues.items()):
            if (queue not in wanted or pq.dropped) and not await self._drop(queue, pq):
                skipped = True
        new = sorted(
            (q for q in wanted if q not in self._process_queues),
            key=lambda q: (q.topic, q.broker_name, q.queue_id),
        )
        if not new:
            return False
        locked: set[MessageQueue] = set(new)
        if self._locks_queues:
            locked = await self._lock(new)
        for queue in new:
            if queue not in locked:
                log.info("%s: queue %s is locked by another consumer; trying again later",
                         self.group, queue)  # fmt: skip
                skipped = True
                continue
            self.offset_store.remove(queue)
            try:
                offset = await self._compute_pull_from_where(queue)
            except RemotingError as exc:
                log.warning("%s: start offset of %s unknown, trying again later: %s",
                            self.group, queue, exc)  # fmt: skip
                skipped = True
                continue
            pq = ProcessQueue(queue)
            pq.next_offset = offset
            if self._locks_queues:
                pq.locked = True
                pq.last_lock_time = anyio.current_time()
                pq.last_lock_timestamp = now_ms()
            self._process_queues[queue] = pq
            log.info("%s: consuming %s from offset %d", self.group, queue, offset)
            self._start_queue(pq)
        return skipped

    async def _drop(self, queue: MessageQueue, pq: ProcessQueue) -> bool:
        """Stop ``queue``, commit its offset (orderly: unlock it); False if it must wait."""
        pq.dropped = True
        if pq.pull_scope is not None:
            pq.pull_scope.cancel()
        pq.arrived.set()
        if not self._locks_queues:
            await self.offset_store.persist([queue])
            self.offset_store.remove(queue)
            del self._process_queues[queue]
            log.info("%s: dropped %s", self.group, queue)
            return True
        # Orderly: wait for the batch in hand so the next owner does not run it twice.
        acquired = False
        with anyio.move_on_after(1.0):
            await pq.consume_lock.acquire()
            acquired = True
        if not acquired:
            pq.try_unlock_times += 1  # still consuming: the next rebalance tries again
            return False
        try:
            await self.offset_store.persist([queue])
            self.offset_store.remove(queue)
            await self._unlock([queue])
            del self._process_queues[queue]
            log.info("%s: dropped and unlocked %s", self.group, queue)
        finally:
            pq.consume_lock.release()
        return True

    async def _compute_pull_from_where(self, queue: MessageQueue) -> int:
        # RebalancePushImpl.computePullFromWhere: a stored offset wins; without one (the
        # broker answers QUERY_NOT_FOUND) the policy decides. A RocketMQ broker answers 0, not
        # "not found", for a queue whose first message is still held, so a new group starts
        # such a queue at 0 even with CONSUME_FROM_LAST_OFFSET.
        stored = await self.offset_store.read_stored(queue)
        if stored is not None and stored >= 0:
            return stored
        where = self.consume_from_where
        is_retry = queue.topic.startswith(RETRY_PREFIX)
        if where in (ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                     ConsumeFromWhere.CONSUME_FROM_MIN_OFFSET):  # fmt: skip
            return 0
        if where == ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
            if is_retry:
                return await self.instance.max_offset(queue)
            timestamp = self.consume_timestamp_ms
            if timestamp is None:  # Java's default: half an hour ago
                timestamp = int((time.time() - 1800) * 1000)
            return await self.instance.search_offset(queue, timestamp)
        return 0 if is_retry else await self.instance.max_offset(queue)

    # -- broker locks -------------------------------------------------------------------------

    async def _lock(self, queues: Sequence[MessageQueue]) -> set[MessageQueue]:
        """LOCK_BATCH_MQ per broker; marks the process queues; returns the queues granted."""
        granted: set[MessageQueue] = set()
        for broker_name, group in _by_broker(queues).items():
            body = LockBatchRequestBody(
                consumer_group=self.group, client_id=self.instance.client_id, mq_set=group
            )
            request = RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=body.to_json())
            try:
                address = await self.instance.find_master(group[0])
                response = await self.instance.invoke_broker(address, request)
            except RemotingError as exc:
                log.warning("%s: lock at %s failed: %s", self.group, broker_name, exc)
                continue
            if response.code != ResponseCode.SUCCESS or not response.body:
                log.warning("%s: lock at %s refused: %s", self.group, broker_name,
                            response.remark)  # fmt: skip
                continue
            granted.update(LockBatchResponseBody.from_json(response.body).lock_ok_mq_set)
        now, stamp = anyio.current_time(), now_ms()
        for queue in queues:
            pq = self._process_queues.get(queue)
            if pq is None:
                continue
            if queue in granted:
                pq.locked, pq.last_lock_time, pq.last_lock_timestamp = True, now, stamp
            elif pq.locked:
                log.warning("%s: lost the lock of %s", self.group, queue)
                pq.locked = False
        return granted

    async def _unlock(self, queues: Sequence[MessageQueue]) -> None:
        for broker_name, group in _by_broker(queues).items():
            body = LockBatchRequestBody(
                consumer_group=self.group, client_id=self.instance.client_id, mq_set=group
            )
            request = RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, body=body.to_json())
            try:
                address = await self.instance.find_master(group[0])
                await self.instance.invoke_broker(address, request)
            except RemotingError as exc:
                log.info("%s: unlock at %s failed (the lease expires): %s", self.group,
                         broker_name, exc)  # fmt: skip
            for queue in group:
                pq = self._process_queues.get(queue)
                if pq is not None:
                    pq.locked = False


def _by_broker(queues: Sequence[MessageQueue]) -> dict[str, list[MessageQueue]]:
    grouped: dict[str, list[MessageQueue]] = {}
    for queue in queues:
        grouped.setdefault(queue.broker_name, []).append(queue)
    return grouped
