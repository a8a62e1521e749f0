"""startingTimestamp / endingTimestamp: the first offset of a queue stored at or after a time.

The broker's SEARCH_OFFSET_BY_TIMESTAMP answers the offset whose store time is nearest (a
RocketMQ 4.x broker does the same), which may sit just before the time or, among messages
stored in the same millisecond, after the first of them. The offset is then made exact with
pulls near it: a queue's store times never go down, so the first offset stored at or after
the time is found by stepping forward or back a pull at a time (one pull, nearly always).
"""

from __future__ import annotations

from collections.abc import Iterable

import anyio

from client import ClientInstance, MQClientError
from pipeline.pulls import pull
from protocol.bodies import MessageQueue
from protocol.codes import ResponseCode
from protocol.headers import PullMessageResponseHeader, decode_header
from protocol.message import decode_records

QueueAt = tuple[str, str, int, str, int, int]
"""(topic, broker name, queue id, master address, min offset, max offset) of one queue."""

_STEP = 32  # messages per pull while stepping: a broker answers at most 32


async def offsets_at(
    namesrv_addr: str, queues: Iterable[QueueAt], timestamp_ms: int
) -> dict[tuple[str, str, int], int]:
    """Each queue's first offset whose message was stored at or after ``timestamp_ms``; the
    max offset for a queue with none, the min offset when all are."""
    found: dict[tuple[str, str, int], int] = {}
    async with ClientInstance(namesrv_addr) as instance:
        for topic, broker, queue_id, address, low, high in queues:
            found[(topic, broker, queue_id)] = await first_offset_at(
                instance, topic, broker, queue_id, address, low, high, timestamp_ms
            )
    return found


async def first_offset_at(
    instance: ClientInstance,
    topic: str,
    broker: str,
    queue_id: int,
    address: str,
    low: int,
    high: int,
    timestamp_ms: int,
) -> int:
    """One queue's first offset in [low, high) stored at or after ``timestamp_ms`` (``high``
    when none is)."""
    if high <= low:
        return high
    queue = MessageQueue(topic=topic, broker_name=broker, queue_id=queue_id)
    guess = min(max(await instance.search_offset(queue, timestamp_ms), low), high - 1)
    times = await _store_times(instance, address, queue, guess, 1)
    if not times or times[0][1] < timestamp_ms:
        # Forward: the first message at or after the time comes later (or never).
        offset = guess + 1 if times else guess
        while offset < high:
            batch = await _store_times(instance, address, queue, offset, _STEP)
            if not batch:
                return high
            for message_offset, stored in batch:
                if stored >= timestamp_ms:
                    return message_offset
            offset = batch[-1][0] + 1
        return high
    # Back: earlier messages may have been stored at or after the time too.
    first = guess
    while first > low:
        start = max(low, first - _STEP)
        batch = await _store_times(instance, address, queue, start, first - start)
        later = [offset for offset, stored in batch if stored >= timestamp_ms]
        if not later:
            return first
        first = later[0]
        if first > start:
            return first
    return first


async def _store_times(
    instance: ClientInstance, address: str, queue: MessageQueue, offset: int, count: int
) -> list[tuple[int, int]]:
    """(queue offset, store timestamp) of up to ``count`` messages from ``offset`` on; empty
    when there are none there (deleted by retention, or past the end)."""
    for _ in range(100):
        response = await pull(instance, address, queue.topic, queue.queue_id, offset, count)
        if response.code == ResponseCode.SUCCESS and response.body:
            return [(m.queue_offset, m.store_timestamp) for m in decode_records(response.body)
                    if m.queue_offset >= offset][:count]  # fmt: skip
        if response.code != ResponseCode.PULL_RETRY_IMMEDIATELY:
            if response.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED):
                return []
            raise MQClientError(
                response.code, f"pull of {queue} at offset {offset} from {address} while "
                f"searching by timestamp refused: {response.remark}",
            )  # fmt: skip
        answer = decode_header(PullMessageResponseHeader, response.ext_fields)
        if answer.next_begin_offset > offset:
            return []  # nothing readable there any more
        await anyio.sleep(0.05)
    raise MQClientError(
        ResponseCode.PULL_RETRY_IMMEDIATELY,
        f"pull of {queue} at offset {offset} from {address}: the broker kept answering 'retry'",
    )
