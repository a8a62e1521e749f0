"""Planning a streaming read on the driver: offsets per micro-batch, and the ranges between two.

A streaming query's offset is one queue offset per queue, the next one to read, as JSON:
``{"topic": {"brokerName": {"queueId": offset}}}`` (the form startingOffsets takes). Spark
keeps each micro-batch's end offsets in the query's checkpoint and hands them back as the
next batch's start, so everything here is a function of the offsets it is given and of what
the brokers hold: `ranges_between` plans the same ranges for the same start and end however
often it is asked, which is what lets a restarted query re-run an unfinished batch exactly.

- `initial_offsets`: startingOffsets resolved against the queues' min and max offsets, for a
  query started without a checkpoint.
- `next_offsets`: a batch's end: every queue up to its max offset (or the AvailableNow
  target), at most ``max_rows`` messages in all (`allocate`). A queue the start does not
  have (the topic grew, a broker joined) first appears at its min offset, so that it is read
  from its earliest message on in the batches after.
- `ranges_between`: the `QueueRange` partitions of one batch.
- `commit_offsets`: a finished batch's end as a consumer group's offsets on the brokers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from client import ClientInstance
from client.offset_store import RemoteOffsetStore
from pipeline.errors import OptionError
from pipeline.options import LATEST, OffsetSpec, QueueKey, StreamOptions
from pipeline.planning import (
    QueueOffsets,
    QueueRange,
    check_named_queues,
    data_loss,
    resolve,
    split_ranges,
    timestamp_spec,
    topics_offsets,
)
from protocol.bodies import MessageQueue

log = logging.getLogger("boltmq.pipeline")

Offsets = dict[QueueKey, int]
"""The next offset to read of each queue."""
OffsetsJson = dict[str, dict[str, dict[str, int]]]
"""`Offsets` as Spark stores them: topic, then broker name, then queue id as a string."""


def to_json(offsets: Mapping[QueueKey, int]) -> OffsetsJson:
    """``offsets`` as JSON, sorted (Spark compares offsets by their JSON text)."""
    document: OffsetsJson = {}
    for (topic, broker, queue_id), offset in sorted(offsets.items()):
        document.setdefault(topic, {}).setdefault(broker, {})[str(queue_id)] = offset
    return document


def from_json(document: Mapping[str, Any]) -> Offsets:
    """The offsets of a JSON document `to_json` made (kept in a checkpoint)."""
    offsets: Offsets = {}
    try:
        for topic, brokers in document.items():
            for broker, ids in brokers.items():
                for queue_id, offset in ids.items():
                    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                        raise ValueError(f"offset {offset!r} of {topic}/{broker}/{queue_id}")
                    offsets[(topic, broker, int(queue_id))] = offset
    except (AttributeError, TypeError, ValueError) as exc:
        raise OptionError(
            f"a streaming offset must be {{\"topic\": {{\"broker\": {{\"queueId\": offset}}}}}} "
            f"with offsets >= 0, not {document!r} ({exc})"
        ) from None
    return offsets


async def current_queues(options: StreamOptions) -> list[QueueOffsets]:
    """Every readable queue of the read's topics with its min and max offset now."""
    return await topics_offsets(options.namesrv_addr, options.topics)


async def initial_offsets(options: StreamOptions) -> Offsets:
    """startingOffsets resolved per queue: ``earliest`` the min offset, ``latest`` the max;
    or startingTimestamp's offsets."""
    queues = await current_queues(options)
    check_named_queues(options.starting, {q.key for q in queues})
    starting = options.starting
    if options.starting_timestamp is not None:
        starting = await timestamp_spec(options.namesrv_addr, queues, "startingTimestamp",
                                        options.starting_timestamp)  # fmt: skip
    ending = OffsetSpec("endingOffsets", LATEST)
    return {q.key: resolve(q, starting, ending, options.fail_on_data_loss)[0]
            for q in queues}  # fmt: skip


def available(start: Mapping[QueueKey, int], end: Mapping[QueueKey, int]) -> int:
    """Messages between two offsets of a query (queues new in ``end`` count nothing)."""
    return sum(offset - start[key] for key, offset in end.items() if key in start)


def target_offsets(queues: Iterable[QueueOffsets]) -> Offsets:
    """Each queue's max offset: where a Trigger.AvailableNow query stops."""
    return {q.key: q.max_offset for q in queues}


def next_offsets(
    start: Mapping[QueueKey, int],
    queues: Sequence[QueueOffsets],
    *,
    max_rows: int | None,
    target: Mapping[QueueKey, int] | None,
    fail_on_data_loss: bool,
) -> Offsets:
    """The end of the micro-batch that begins at ``start``.

    Each queue goes up to its max offset, or to ``target``'s when there is one (queues the
    target lacks are left out), at most ``max_rows`` messages in all. Queues the start has
    and the route no longer does keep their offset. A queue the start lacks gets its min
    offset (capped by the target): the batch reads nothing of it, the next ones from there on.
    A queue whose max offset is now below the start (recreated) holds at the start, after
    `data_loss` (which fails with failOnDataLoss).
    """
    end = dict(start)
    backlog: dict[QueueKey, int] = {}
    for queue in queues:
        key = queue.key
        high = queue.max_offset
        if target is not None:
            if key not in target:
                continue
            high = min(high, target[key])
        offset = start.get(key)
        if offset is None:
            end[key] = min(queue.min_offset, high)
            continue
        if offset > queue.max_offset:
            data_loss(
                fail_on_data_loss,
                f"{queue.describe()}: the query has read up to offset {offset} but the queue's "
                f"max offset is now {queue.max_offset} (was the topic recreated?)",
                f"waiting until the queue passes offset {offset}",
            )
            continue
        if high > offset:
            backlog[key] = high - offset
    taken = backlog if max_rows is None else allocate(backlog, max_rows, sum(start.values()))
    for key, count in taken.items():
        end[key] = start[key] + count
    return end


def allocate(backlog: Mapping[QueueKey, int], limit: int, rotation: int) -> dict[QueueKey, int]:
    """How many of each queue's ``backlog`` messages a batch of at most ``limit`` takes.

    Everything when it fits. Otherwise exactly ``limit``: each queue with a backlog one
    message, the rest in proportion to what each has left (largest remainders get the odd
    ones, ties in queue order), never more than a queue has. With fewer messages than queues,
    ``limit`` queues get one each, starting ``rotation`` queues into the sorted list (the
    caller passes the sum of the start offsets, which moves on with every batch, so each queue
    gets its turn).
    """
    total = sum(backlog.values())
    if total <= limit:
        return dict(backlog)
    keys = sorted(key for key, count in backlog.items() if count > 0)
    if limit < len(keys):
        turn = rotation % len(keys)
        return dict.fromkeys((keys[turn:] + keys[:turn])[:limit], 1)
    spare = limit - len(keys)
    rest = total - len(keys)  # > spare, since total > limit
    shares: dict[QueueKey, int] = {}
    remainders: list[tuple[int, QueueKey]] = []
    for key in keys:
        part = spare * (backlog[key] - 1)
        shares[key] = 1 + part // rest
        remainders.append((-(part % rest), key))
    for _, key in sorted(remainders)[: limit - sum(shares.values())]:
        shares[key] += 1
    return shares


async def ranges_between(
    options: StreamOptions, start: Mapping[QueueKey, int], end: Mapping[QueueKey, int]
) -> list[QueueRange]:
    """The partitions of the micro-batch [start, end): one `QueueRange` per queue that moved
    (more with minPartitions), read from the queue's master as the route has it now.

    A queue the start lacks reads nothing (`next_offsets` put it at its min offset). Messages
    retention deleted since the batch was planned, or a queue gone from the route, are
    `data_loss`: the batch fails, or, with failOnDataLoss false, reads what is left.
    """
    wanted = {key: (start[key], offset) for key, offset in end.items()
              if key in start and offset > start[key]}  # fmt: skip
    if not wanted:
        return []
    topics = sorted({topic for topic, _, _ in wanted})
    found = {q.key: q for q in await topics_offsets(options.namesrv_addr, topics)}
    ranges = []
    for key, (first, last) in sorted(wanted.items()):
        topic, broker, queue_id = key
        queue = found.get(key)
        if queue is None:
            data_loss(
                options.fail_on_data_loss,
                f"topic {topic}, broker {broker}, queue {queue_id} is no longer in the topic's "
                f"route; messages [{first}, {last}) of this micro-batch cannot be read",
                "skipping them",
            )
            continue
        if first < queue.min_offset:
            data_loss(
                options.fail_on_data_loss,
                f"{queue.describe()}: messages [{first}, {min(queue.min_offset, last)}) of "
                f"this micro-batch were deleted by retention (min offset now "
                f"{queue.min_offset})",
                "reading on from the min offset",
            )
            first = min(queue.min_offset, last)
            if first == last:
                continue
        ranges.append(QueueRange(topic, broker, queue_id, queue.address, first, last))
    return split_ranges(ranges, options.min_partitions or 1)


async def commit_offsets(namesrv_addr: str, group: str, offsets: Mapping[QueueKey, int]) -> None:
    """UPDATE_CONSUMER_OFFSET of every queue of ``offsets`` under ``group``, at the queue's
    broker: the group's lag then shows what the query has still to read. A broker that
    refuses or does not answer is logged and skipped; the next batch's commit tries again."""
    async with ClientInstance(namesrv_addr) as instance:
        store = RemoteOffsetStore(instance, group)
        queues = []
        for (topic, broker, queue_id), offset in sorted(offsets.items()):
            queue = MessageQueue(topic=topic, broker_name=broker, queue_id=queue_id)
            store.update(queue, offset)
            queues.append(queue)
        await store.persist(queues)
