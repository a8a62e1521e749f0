"""A taskiq broker on BoltMQ (extra ``boltmq[taskiq]``): kick sends, listen pops.

    from boltmq.taskiq import BoltMQBroker

    broker = BoltMQBroker("127.0.0.1:9876", topic="taskiq-tasks")

    @broker.task
    async def add(a: int, b: int) -> int:
        return a + b

    # client: await broker.startup(); await add.kiq(1, 2)
    # worker: taskiq worker my_module:broker

Tasks are messages of one topic (created with ``queue_nums`` queues at first start when no
registry routes it), consumed by one consumer group (``group``, by default the topic's name)
through RocketMQ 5's pop: a popped message stays invisible to other workers for
``invisible_seconds`` and is acked once taskiq has run it (taskiq's ack). A worker that dies
before the ack leaves its messages to come back after that time, on any worker; a message
delivered ``max_retries`` + 1 times without an ack goes to ``%DLQ%<group>``. taskiq 0.13 has
no reject hook, so a task that fails is acked like one that succeeds (taskiq's own retry
middleware sends a new message). The task id is the message key, so ``boltmq admin
queryMsgByKey`` finds a task's message. The client runs on the worker's own asyncio loop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncGenerator
from typing import Any

import anyio
from taskiq import AckableMessage, AsyncBroker, BrokerMessage

from client import Admin, ClientInstance, ConnectionOptions, Message, Producer
from client.pop import PopClient, PoppedMessage
from protocol.bodies import SubscriptionGroupConfig
from protocol.command import RemotingError

__all__ = ["BoltMQBroker"]

log = logging.getLogger("boltmq.taskiq")

_MASTER_ID = 0


class BoltMQBroker(AsyncBroker):
    """taskiq's AsyncBroker over a BoltMQ (or RocketMQ 5) cluster; see the module docstring."""

    def __init__(
        self,
        namesrv_addr: str = "127.0.0.1:9876",
        *,
        topic: str = "taskiq",
        group: str | None = None,
        queue_nums: int = 8,
        invisible_seconds: float = 1800.0,
        max_retries: int = 16,
        pop_batch: int = 32,
        pop_wait_seconds: float = 5.0,
        options: ConnectionOptions | None = None,
    ) -> None:
        super().__init__()
        if not 1 <= pop_batch <= 32:
            raise ValueError(f"pop_batch={pop_batch}: a pop takes 1 to 32 messages")
        if not 1 <= invisible_seconds <= 12 * 3600:
            raise ValueError(f"invisible_seconds={invisible_seconds}: the broker takes 1 s to 12 h")
        self.namesrv_addr = namesrv_addr
        self.topic = topic
        self.group = group or topic
        self.queue_nums = queue_nums
        self.invisible_ms = int(invisible_seconds * 1000)
        self.max_retries = max_retries
        self.pop_batch = pop_batch
        self.pop_wait_ms = int(pop_wait_seconds * 1000)
        self.options = options or ConnectionOptions()
        self._life: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._instance: ClientInstance | None = None
        self._producer: Producer | None = None
        self._pop: PopClient | None = None

    async def startup(self) -> None:
        """Connect; create the topic (and, in a worker, the group) when missing."""
        await super().startup()
        # taskiq may call startup and shutdown from different tasks; the client's task
        # groups must be entered and left in one, so the client lives in a task of its own.
        started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._life = asyncio.create_task(self._run(started, self._stop))
        try:
            await started
        except BaseException:
            self._life = None
            raise

    async def shutdown(self) -> None:
        """Disconnect (messages popped and not acked come back after their invisible time)."""
        life, self._life = self._life, None
        if life is not None:
            self._stop.set()
            await life
        await super().shutdown()

    async def _run(self, started: asyncio.Future[None], stop: asyncio.Event) -> None:
        try:
            instance = ClientInstance(self.namesrv_addr, options=self.options)
            producer = Producer(f"{self.group}_PRODUCER", instance=instance)
            async with instance, producer:
                await self._prepare(instance)
                self._instance, self._producer = instance, producer
                self._pop = PopClient(instance)
                started.set_result(None)
                try:
                    await stop.wait()
                finally:
                    self._instance = self._producer = self._pop = None
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
                return
            raise

    async def _prepare(self, instance: ClientInstance) -> None:
        admin = Admin(instance=instance)
        if await instance.update_route(self.topic) is None:
            await admin.create_topic(self.topic, queue_nums=self.queue_nums)
            with anyio.fail_after(10):
                while await instance.update_route(self.topic) is None:
                    await anyio.sleep(0.05)
        if self.is_worker_process:
            await admin.create_group(
                SubscriptionGroupConfig(group_name=self.group, retry_max_times=self.max_retries)
            )

    async def kick(self, message: BrokerMessage) -> None:
        """Send the task's message to the topic."""
        if self._producer is None:
            raise RuntimeError("call 'await broker.startup()' before kicking tasks")
        await self._producer.send(Message(self.topic, message.message, keys=message.task_id))

    async def listen(self) -> AsyncGenerator[bytes | AckableMessage, None]:
        """Pop the topic's messages for ever, each with its ack."""
        if self._instance is None or self._pop is None:
            raise RuntimeError("call 'await broker.startup()' before listening")
        instance, pop = self._instance, self._pop
        failing = False
        while True:
            route = await instance.update_route(self.topic)
            addresses = [] if route is None else [
                b.broker_addrs[_MASTER_ID] for b in route.broker_datas
                if _MASTER_ID in b.broker_addrs
            ]  # fmt: skip
            if not addresses:
                await anyio.sleep(1.0)
                continue
            wait = self.pop_wait_ms // len(addresses)
            for address in addresses:
                try:
                    result = await pop.pop(
                        address, self.group, self.topic, max_messages=self.pop_batch,
                        invisible_ms=self.invisible_ms, poll_ms=wait,
                    )  # fmt: skip
                except RemotingError as exc:
                    if not failing:
                        log.warning("pop of %s at %s failed: %s; retrying every second",
                                    self.topic, address, exc.remark or exc)  # fmt: skip
                    failing = True
                    await anyio.sleep(1.0)
                    continue
                failing = False
                for popped in result.messages:
                    yield AckableMessage(data=popped.message.body, ack=self._acker(popped))

    def _acker(self, popped: PoppedMessage) -> Any:
        assert self._pop is not None
        return functools.partial(self._ack, self._pop, popped)

    async def _ack(self, pop: PopClient, popped: PoppedMessage) -> None:
        try:
            await pop.ack(popped, group=self.group, topic=self.topic)
        except RemotingError as exc:
            # Its invisible time ran out first: it comes back, and runs again.
            log.warning("ack of task message %s failed: %s", popped.message.msg_id,
                        exc.remark or exc)  # fmt: skip
