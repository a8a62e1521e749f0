"""Reading stored messages by queue offset for operator tools (mqadmin's TOOLS_CONSUMER).

    async with QueueBrowser(admin.instance) as browser:
        for queue in await browser.queues("Orders"):
            for message in await browser.read(queue, 0, await browser.max_offset(queue)):
                print(message.msg_id)

A browser pulls with the tools group and never commits an offset, so reading a topic leaves
every consumer group's progress as it was.
"""

from __future__ import annotations

from types import TracebackType

from client.instance import ClientInstance, subscribe_queues
from client.message import MQClientError
from client.pull_consumer import PullConsumer, parse_tags
from protocol import names
from protocol.bodies import MessageQueue
from protocol.codes import ResponseCode
from protocol.message import MessageExt

#: The group operator tools pull with, as RocketMQ's tools do.
TOOLS_CONSUMER_GROUP = names.TOOLS_CONSUMER_GROUP


class QueueBrowser:
    """Reads any queue's messages between two offsets without touching consumer offsets."""

    def __init__(
        self,
        instance: ClientInstance,
        *,
        group: str = TOOLS_CONSUMER_GROUP,
        timeout: float = 5.0,
        batch_size: int = 32,
    ) -> None:
        self.instance = instance
        self._consumer = PullConsumer(
            group, instance=instance, auto_commit=False, timeout=timeout,
            pull_batch_size=batch_size,
        )  # fmt: skip

    async def __aenter__(self) -> QueueBrowser:
        await self._consumer.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._consumer.__aexit__(exc_type, exc, tb)

    async def queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic``; MQClientError(TOPIC_NOT_EXIST) when it has no route."""
        route = await self.instance.update_route(topic)
        if route is None:
            raise MQClientError(ResponseCode.TOPIC_NOT_EXIST, f"no route for topic {topic}")
        return subscribe_queues(topic, route)

    async def min_offset(self, queue: MessageQueue) -> int:
        """The queue's first offset still stored."""
        return await self._consumer.min_offset(queue)

    async def max_offset(self, queue: MessageQueue) -> int:
        """The offset the queue's next message gets."""
        return await self._consumer.max_offset(queue)

    async def offset_at(self, queue: MessageQueue, timestamp_ms: int) -> int:
        """The offset of the queue's message stored nearest ``timestamp_ms``."""
        return await self._consumer.offset_for_timestamp(queue, timestamp_ms)

    async def read(
        self,
        queue: MessageQueue,
        begin: int,
        end: int,
        *,
        expression: str = "*",
        limit: int | None = None,
    ) -> list[MessageExt]:
        """Messages of ``queue`` with offsets in ``[begin, end)`` matching a tag expression.

        At most ``limit`` of them (the oldest first); bodies come back inflated.
        """
        consumer = self._consumer
        await consumer.assign([queue])
        # The broker filters by the expression's tag hashes; exact tags are checked below.
        consumer.subscriptions[queue.topic] = expression
        tags = parse_tags(expression)
        await consumer.seek(queue, begin)
        found: list[MessageExt] = []
        position = begin
        while position < end and (limit is None or len(found) < limit):
            batch = await consumer.pull(queue)
            found.extend(
                m for m in batch if m.queue_offset < end and (tags is None or m.tags in tags)
            )
            after = consumer.position(queue)
            if after is None or after <= position:
                break  # the queue ends here (or the broker has nothing past this offset)
            position = after
        return found if limit is None else found[:limit]

    async def read_one(self, queue: MessageQueue, offset: int) -> MessageExt | None:
        """The message at ``offset`` of ``queue``, None when the queue holds none there."""
        found = await self.read(queue, offset, offset + 1)
        return found[0] if found and found[0].queue_offset == offset else None
