"""One write task's sends: messages batched per topic, a queue chosen per batch, retries.

A batch (SEND_BATCH_MESSAGE) goes to one queue, which this module picks rather than the
producer: a producer starts its round robin at the topic's first queue, and a write runs many
short tasks, each with a producer of its own, so the first batch of every task would land on
the same queue. Each task of a write starts at its partition id plus an offset the write drew
once (so a write's tasks spread over every queue, and writes do not all favour the first
queues; Java's producers start at a random index for the same reason) and moves one queue on
per batch. A send named to a queue is tried
once by the producer, so a failed one is tried again here, on a queue of another broker when
the topic has one, as the producer would.

An exactly-once write (``pinned``) chooses its queues from the partition id instead, and
tries a failed send again on the same queue: a broker's dedup index knows only what that
broker stored, so a retried task must send each message to the broker its first attempt
chose. A message with a delay level or a delivery time goes alone (brokers refuse them in a
batch).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import time

import attrs
from anyio.from_thread import BlockingPortal, start_blocking_portal

from client import Message, Producer, SendResult, SendStatus
from pipeline.errors import WriteError
from protocol.bodies import MessageQueue
from protocol.command import RemotingError

log = logging.getLogger("boltmq.pipeline")

WRITER_GROUP = "boltmq-spark-writer"
"""The producer group every writer task sends as."""
BATCH_MESSAGES = 128
"""Most messages in one batch send."""
BATCH_BYTES = 512 * 1024
"""Most body and property bytes in one batch send (brokers take 4 MiB per request)."""
SEND_ATTEMPTS = 3
"""Tries of one batch, the producer's default (one send and two retries)."""


@attrs.define
class _Batch:
    messages: list[Message] = attrs.Factory(list)
    size: int = 0


class Sender:
    """Sends one task's messages; ``with Sender(...)``, `add` each, then `flush`.

    The producer (with its event loop in a thread: Spark calls from a plain thread) is opened
    at the first send, so a partition with no rows opens no connection.
    """

    def __init__(
        self, namesrv_addr: str, pinned: int | None = None, start: int | None = None
    ) -> None:
        self.namesrv_addr = namesrv_addr
        #: The partition id an exactly-once write starts its queues at (None: not pinned).
        self.pinned = pinned
        #: Where a plain write starts its round robin (None: a random queue).
        self.start = start
        #: Messages sent per topic.
        self.counts: dict[str, int] = {}
        self.body_bytes = 0
        #: Sends made (a batch or a lone message each) and those not answered SEND_OK.
        self.sends = 0
        self.not_ok = 0
        self._pending: dict[str, _Batch] = {}
        self._next_queue: dict[str, int] = {}
        self._stack = contextlib.ExitStack()
        self._portal: BlockingPortal | None = None
        self._producer: Producer | None = None

    def __enter__(self) -> Sender:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stack.close()

    def add(self, message: Message) -> None:
        """Queue ``message`` in its topic's batch; send the batch first if it is full."""
        size = _encoded_size(message)
        if message.delay_level > 0 or message.deliver_time_ms is not None:
            self.body_bytes += len(message.body)
            self._send(message.topic, _Batch([message], size))
            return
        batch = self._pending.get(message.topic)
        if batch is not None and (len(batch.messages) >= BATCH_MESSAGES
                                  or batch.size + size > BATCH_BYTES):  # fmt: skip
            self._send(message.topic, self._pending.pop(message.topic))
            batch = None
        if batch is None:
            batch = self._pending[message.topic] = _Batch()
        batch.messages.append(message)
        batch.size += size
        self.body_bytes += len(message.body)

    def flush(self) -> None:
        """Send every batch not sent yet."""
        while self._pending:
            topic = next(iter(self._pending))
            self._send(topic, self._pending.pop(topic))

    def _open(self) -> tuple[BlockingPortal, Producer]:
        if self._portal is None or self._producer is None:
            portal = self._stack.enter_context(start_blocking_portal("trio"))
            producer = Producer(WRITER_GROUP, namesrv_addr=self.namesrv_addr)
            self._stack.enter_context(portal.wrap_async_context_manager(producer))
            self._portal, self._producer = portal, producer
        return self._portal, self._producer

    def _send(self, topic: str, batch: _Batch) -> None:
        portal, producer = self._open()
        count = len(batch.messages)
        what = f"send of {count} message(s) to topic {topic}"
        failures: list[str] = []
        avoid: str | None = None
        queue: MessageQueue | None = None
        for attempt in range(SEND_ATTEMPTS):
            if queue is None or self.pinned is None:
                try:
                    queue = self._queue(portal, producer, topic, avoid)
                except RemotingError as exc:  # no route, no writable queue: nothing to retry
                    raise WriteError(f"{what} failed: {exc}") from exc
            elif attempt:
                time.sleep(0.2 * attempt)  # the same queue: give the broker a moment
            try:
                result = portal.call(functools.partial(_send_to, producer, batch.messages, queue))
            except ValueError as exc:  # the message itself (too large, ...)
                raise WriteError(f"{what} failed: {exc}") from exc
            except RemotingError as exc:
                failures.append(f"{queue.broker_name}/{queue.queue_id}: {exc}")
                avoid = queue.broker_name
                continue
            break
        else:
            raise WriteError(f"{what} failed {SEND_ATTEMPTS} times: {'; '.join(failures)}")
        self.sends += 1
        if result.status != SendStatus.SEND_OK:
            self.not_ok += 1
            log.warning("%s stored with status %s", what, result.status.value)
        self.counts[topic] = self.counts.get(topic, 0) + count

    def _queue(
        self, portal: BlockingPortal, producer: Producer, topic: str, avoid: str | None
    ) -> MessageQueue:
        """The next queue of ``topic`` in this task's round robin, on another broker than
        ``avoid`` (the one that just failed) when the topic has one."""
        queues: list[MessageQueue] = portal.call(producer.queues, topic)
        first = self.pinned if self.pinned is not None else self.start
        if first is not None:  # the same order in every task (and every attempt of one)
            queues = sorted(queues, key=lambda q: (q.broker_name, q.queue_id))
        index = self._next_queue.get(topic)
        if index is None:
            # Not the random module's shared state: Spark forks its Python workers, which
            # would all draw the same "random" queue.
            index = first if first is not None else random.SystemRandom().randrange(len(queues))
        chosen = index
        if avoid is not None:
            for step in range(len(queues)):
                if queues[(index + step) % len(queues)].broker_name != avoid:
                    chosen = index + step
                    break
        self._next_queue[topic] = chosen + 1
        return queues[chosen % len(queues)]


async def _send_to(producer: Producer, messages: list[Message], queue: MessageQueue) -> SendResult:
    if len(messages) == 1:
        # Alone: a plain send compresses a large body, which a batch send does not.
        return await producer.send(messages[0], queue=queue)
    return await producer.send_batch(messages, queue=queue)


def _encoded_size(message: Message) -> int:
    # Body, properties as sent (name, value, two separators) and the UNIQ_KEY the producer adds.
    props = message.wire_properties()
    text = sum(len(k.encode()) + len(v.encode()) + 2 for k, v in props.items())
    return len(message.body) + text + 64
