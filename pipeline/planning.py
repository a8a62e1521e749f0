"""Planning a batch read on the driver: which offsets of which queues, in which partitions.

For each topic the registry's route gives the readable queues and each broker's master; one
GET_TOPIC_STATS_INFO per master gives every queue's min and max offset. startingOffsets and
endingOffsets are resolved against those (``earliest`` = min, ``latest`` = max), checked
(failOnDataLoss decides what a start below the min does), and each non-empty [start, end)
becomes a `QueueRange`, split further when minPartitions asks for more partitions than there
are queues with messages.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Sequence

import attrs
from pyspark.sql.datasource import InputPartition

from client import Admin, MQClientError
from client.instance import MASTER_ID, subscribe_queues
from pipeline.errors import DataLossError, OptionError
from pipeline.options import EARLIEST, LATEST, OffsetSpec, QueueKey, ReadOptions
from pipeline.timestamps import offsets_at
from protocol.bodies import MessageQueue, TopicRouteData
from protocol.codes import ResponseCode

log = logging.getLogger("boltmq.pipeline")


@attrs.frozen
class QueueRange(InputPartition):
    """One partition of a read: offsets [start, end) of one queue, pulled from ``address``
    (the broker's master when the read was planned)."""

    topic: str
    broker_name: str
    queue_id: int
    address: str
    start: int
    end: int

    @property
    def size(self) -> int:
        """How many messages the range holds."""
        return self.end - self.start

    def describe(self) -> str:
        """``topic T, broker B, queue Q`` for messages."""
        return f"topic {self.topic}, broker {self.broker_name}, queue {self.queue_id}"


@attrs.frozen
class QueueOffsets:
    """One queue as the driver saw it: where to read it and its min and max offsets."""

    topic: str
    broker_name: str
    queue_id: int
    address: str
    min_offset: int
    max_offset: int

    @property
    def key(self) -> QueueKey:
        """(topic, broker name, queue id)."""
        return (self.topic, self.broker_name, self.queue_id)

    def describe(self) -> str:
        """``topic T, broker B, queue Q`` for messages."""
        return f"topic {self.topic}, broker {self.broker_name}, queue {self.queue_id}"


async def queue_offsets(admin: Admin, topic: str) -> list[QueueOffsets]:
    """Every readable queue of ``topic`` with its master's address and min/max offsets."""
    try:
        route = await admin.route(topic)
    except MQClientError as exc:
        if exc.code == ResponseCode.TOPIC_NOT_EXIST:
            raise OptionError(f"topic {topic} does not exist: no registry has a route for it") \
                from None  # fmt: skip
        raise
    masters = _masters(topic, route)
    stats = (await admin.topic_stats(topic)).offset_table
    found = []
    for queue in subscribe_queues(topic, route):
        offsets = stats.get(queue)
        if offsets is None:
            raise MQClientError(
                ResponseCode.SYSTEM_ERROR,
                f"broker {queue.broker_name} did not report the offsets of {_name(queue)}",
            )
        found.append(QueueOffsets(
            topic, queue.broker_name, queue.queue_id, masters[queue.broker_name],
            offsets.min_offset, offsets.max_offset,
        ))  # fmt: skip
    return found


async def topics_offsets(namesrv_addr: str, topics: Sequence[str]) -> list[QueueOffsets]:
    """`queue_offsets` of each of ``topics``, in order."""
    async with Admin(namesrv_addr=namesrv_addr) as admin:
        return [q for topic in topics for q in await queue_offsets(admin, topic)]


async def plan_ranges(options: ReadOptions) -> list[QueueRange]:
    """The offset ranges a read covers (empty ranges dropped), split per minPartitions."""
    queues = await topics_offsets(options.namesrv_addr, options.topics)
    known = {(q.topic, q.broker_name, q.queue_id) for q in queues}
    for spec in (options.starting, options.ending):
        check_named_queues(spec, known)
    starting, ending = options.starting, options.ending
    if options.starting_timestamp is not None:
        starting = await timestamp_spec(options.namesrv_addr, queues, "startingTimestamp",
                                        options.starting_timestamp)  # fmt: skip
    if options.ending_timestamp is not None:
        ending = await timestamp_spec(options.namesrv_addr, queues, "endingTimestamp",
                                      options.ending_timestamp)  # fmt: skip
    ranges = []
    for queue in queues:
        start, end = resolve(queue, starting, ending, options.fail_on_data_loss)
        if end > start:
            ranges.append(QueueRange(queue.topic, queue.broker_name, queue.queue_id,
                                     queue.address, start, end))  # fmt: skip
    return split_ranges(ranges, options.min_partitions or 1)


async def timestamp_spec(
    namesrv_addr: str, queues: Sequence[QueueOffsets], option: str, timestamp_ms: int
) -> OffsetSpec:
    """``option`` (startingTimestamp / endingTimestamp) as the offsets it stands for: per
    queue, the first message stored at or after ``timestamp_ms`` (SEARCH_OFFSET_BY_TIMESTAMP,
    made exact by `pipeline.timestamps`)."""
    found = await offsets_at(
        namesrv_addr,
        [(q.topic, q.broker_name, q.queue_id, q.address, q.min_offset, q.max_offset)
         for q in queues],
        timestamp_ms,
    )  # fmt: skip
    return OffsetSpec(option, LATEST, found)


def resolve(
    queue: QueueOffsets, starting: OffsetSpec, ending: OffsetSpec, fail_on_data_loss: bool
) -> tuple[int, int]:
    """The [start, end) to read of one queue.

    A start below the min offset means retention deleted messages the read asked for, and a
    start past the max offset asks for messages never written (a queue recreated, an offset
    from another cluster): with failOnDataLoss either fails the read, without it the read
    starts at the min (or max) offset and a warning says what was skipped. An end past the
    max offset always fails: a batch read reads only what is already written.
    """
    low, high = queue.min_offset, queue.max_offset
    where = f"topic {queue.topic}, broker {queue.broker_name}, queue {queue.queue_id}"
    asked_start = starting.requested(queue.topic, queue.broker_name, queue.queue_id)
    asked_end = ending.requested(queue.topic, queue.broker_name, queue.queue_id)
    start = {EARLIEST: low, LATEST: high}.get(asked_start, asked_start)
    end = {EARLIEST: low, LATEST: high}.get(asked_end, asked_end)
    if end > high:
        raise OptionError(
            f"endingOffsets {end} of {where} is past the queue's max offset {high}: a batch "
            "read reads only messages already written"
        )
    if start > high:
        data_loss(fail_on_data_loss,
              f"{where}: startingOffsets {start} is past the queue's max offset {high}; "
              "those messages were never written (was the topic recreated?)",
              f"starting at the max offset {high}")  # fmt: skip
        start = high
    elif start < low:
        data_loss(fail_on_data_loss,
              f"{where}: startingOffsets {start} is below the queue's min offset {low}; "
              f"messages [{start}, {low}) were deleted by retention",
              f"starting at the min offset {low}")  # fmt: skip
        start = low
    if end < low:
        data_loss(fail_on_data_loss,
              f"{where}: endingOffsets {end} is below the queue's min offset {low}; every "
              "message asked for was deleted by retention",
              "reading nothing of this queue")  # fmt: skip
        return start, start
    if start > end:
        raise OptionError(
            f"{where}: {starting.option} {starting.describe(asked_start)} ({start}) is after "
            f"{ending.option} {ending.describe(asked_end)} ({end})"
        )
    return start, end


def split_ranges(ranges: Sequence[QueueRange], min_partitions: int) -> list[QueueRange]:
    """``ranges`` split into at least ``min_partitions`` parts where they hold that many
    messages (a range never splits below one message), larger ranges into more parts."""
    total = sum(r.size for r in ranges)
    target = min(min_partitions, total)
    if target <= len(ranges):
        return list(ranges)
    parts = [1] * len(ranges)
    # Give each extra part to the range whose parts are largest now: the parts end up as
    # even as whole messages allow (a heap of (-messages per part, index)).
    heap: list[tuple[float, int]] = [(-r.size, i) for i, r in enumerate(ranges) if r.size > 1]
    heapq.heapify(heap)
    for _ in range(target - len(ranges)):
        _, i = heapq.heappop(heap)
        parts[i] += 1
        if parts[i] < ranges[i].size:
            heapq.heappush(heap, (-ranges[i].size / parts[i], i))
    split = []
    for whole, count in zip(ranges, parts, strict=True):
        for k in range(count):
            start = whole.start + whole.size * k // count
            end = whole.start + whole.size * (k + 1) // count
            split.append(attrs.evolve(whole, start=start, end=end))
    return split


def _masters(topic: str, route: TopicRouteData) -> dict[str, str]:
    masters = {}
    for broker in route.broker_datas:
        address = broker.broker_addrs.get(MASTER_ID)
        if address is None:
            # Reads follow the master, as the offsets do; a group whose master is down waits.
            raise MQClientError(
                ResponseCode.SYSTEM_ERROR,
                f"broker {broker.broker_name} of topic {topic} has no master in the route "
                "(is its master down?)",
            )
        masters[broker.broker_name] = address
    return masters


def check_named_queues(spec: OffsetSpec, known: set[QueueKey]) -> None:
    """A queue named in startingOffsets / endingOffsets JSON must exist: a misspelt broker
    name would otherwise read the whole queue instead of the range asked for."""
    for key in spec.queues:
        if key not in known:
            topic, broker, queue_id = key
            have = sorted(f"{b}/{q}" for t, b, q in known if t == topic)
            raise OptionError(
                f"option {spec.option} names queue {queue_id} of broker {broker} in topic "
                f"{topic}, which has no such queue; its queues: {', '.join(have) or 'none'}"
            )


def data_loss(fail: bool, what: str, instead: str) -> None:
    """Raise DataLossError saying ``what`` is gone, or (``fail`` false) log it and what the
    read does ``instead``."""
    if fail:
        raise DataLossError(
            f"{what}. Set failOnDataLoss to false to read on, {instead}."
        )
    log.warning("%s; %s (failOnDataLoss is false)", what, instead)


def _name(queue: MessageQueue) -> str:
    return f"topic {queue.topic}, queue {queue.queue_id}"
