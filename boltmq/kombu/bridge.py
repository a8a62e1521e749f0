"""The async side of one kombu connection: a client in an event loop of its own thread.

kombu's API blocks; BoltMQ's client is async. Each kombu connection gets one `Bridge`: a
`ClientInstance`, a `Producer`, an `Admin` and a `PopClient` running in a background event
loop (anyio's blocking portal, as `client.blocking` does), called from kombu's thread.

Consuming a queue starts one *pop loop* per source (the queue's topic, and the topic of each
exchange it is bound to) and broker. A loop pops while its consumer holds fewer unacked
messages than its window, waiting up to ``pop_wait`` at the broker when there is nothing, and
hands each message to kombu's thread through one inbox (a thread-safe queue). Every delivered
message gets a delivery tag of its own that names its receipt handle, so ack, reject and
requeue reach the broker. A loop is never cancelled in the middle of a pop (the broker would
hand out messages nobody receives, hidden for the whole visibility timeout): stopping sets a
flag, waits for the pop in flight, and makes what it brought visible again at once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import queue
import re
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.abc
import attrs
from anyio.from_thread import BlockingPortal, start_blocking_portal

from boltmq.kombu.settings import Settings
from client import Admin, ClientInstance, Message, Producer
from client.pop import INIT_MODE_MAX, INIT_MODE_MIN, PopClient, PoppedMessage
from protocol.bodies import MessageQueue, ResetOffsetBody, SubscriptionGroupConfig
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.headers import ResetOffsetRequestHeader, encode_header

__all__ = [
    "INIT_MODE_MAX", "INIT_MODE_MIN", "Bridge", "Delivery", "RegistryUnreachable", "Source",
    "tag_safe",
]  # fmt: skip

log = logging.getLogger("boltmq.kombu")

#: The user property that carries a message's kombu routing key on an exchange topic.
ROUTING_KEY_PROPERTY = "KOMBU_ROUTING_KEY"
#: Shortest invisible time the broker takes: "visible again now".
_NOW_MS = 1
_MASTER_ID = 0


class RegistryUnreachable(ConnectionError):
    """No registry of the URL answered; the message names every address tried."""


@attrs.frozen
class Source:
    """One topic a kombu queue is fed from, the group reading it, and which routing keys
    of it are the queue's (None: all; else the exact keys, or regexes for topic exchanges)."""

    topic: str
    group: str
    init_mode: int = INIT_MODE_MIN
    keys: frozenset[str] | None = None
    patterns: tuple[str, ...] = ()
    expression: str = "*"

    def wants(self, routing_key: str) -> bool:
        """Whether a message published with ``routing_key`` belongs to the queue."""
        if self.keys is None and not self.patterns:
            return True
        if self.keys is not None and routing_key in self.keys:
            return True
        return any(re.match(p, routing_key) for p in self.patterns)


@attrs.frozen
class Delivery:
    """A message handed to kombu: the queue it is for, kombu's payload and its tag."""

    queue: str
    payload: dict[str, Any]
    tag: str


@attrs.define
class _Consumer:
    """One consumed kombu queue: its loops, its window and its messages not yet settled."""

    queue: str
    window: Callable[[], int]
    no_ack: bool
    in_flight: int = 0
    stopping: bool = False
    changed: anyio.Event = attrs.field(factory=anyio.Event)
    done: list[anyio.Event] = attrs.field(factory=list)

    def settle(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        self.changed.set()
        self.changed = anyio.Event()


@attrs.define
class _Unsettled:
    popped: PoppedMessage
    group: str
    topic: str
    consumer: _Consumer | None


class Bridge:
    """One kombu connection's client, its event loop thread and its consumers."""

    def __init__(self, settings: Settings, *, encode: Callable[[Any], str],
                 decode: Callable[[bytes], Any]) -> None:  # fmt: skip
        self.settings = settings
        self.inbox: queue.Queue[Delivery] = queue.Queue()
        self._encode, self._decode = encode, decode
        self._stack: contextlib.ExitStack | None = None
        self._portal: BlockingPortal | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._consumers: dict[str, _Consumer] = {}
        self._unsettled: dict[str, _Unsettled] = {}
        # Tags acked by kombu's thread, sent by the loop (see ack_soon).
        self._acks: collections.deque[str] = collections.deque()
        self._ack_scheduled = False
        self._topics: set[str] = set()
        self._groups: set[str] = set()
        self.instance = ClientInstance(
            settings.namesrv_addr, timeout=settings.send_timeout, options=settings.options
        )
        self.producer = Producer("KOMBU_PRODUCER", instance=self.instance,
                                 send_msg_timeout=settings.send_timeout)  # fmt: skip
        self.admin = Admin(instance=self.instance, timeout=settings.send_timeout)
        self.pop = PopClient(self.instance)

    # -- life ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the loop thread and the client; `RegistryUnreachable` when no registry answers."""
        stack = contextlib.ExitStack()
        try:
            portal = stack.enter_context(start_blocking_portal("asyncio"))
            stack.enter_context(portal.wrap_async_context_manager(self._running()))
        except BaseException:
            stack.close()
            raise
        self._stack, self._portal = stack, portal

    def close(self) -> None:
        """Stop every consumer (their messages visible again), then the client and the loop."""
        stack, self._stack = self._stack, None
        if stack is None:
            return
        try:
            self.call(self._stop_all)
        finally:
            self._portal = None
            stack.close()

    @contextlib.asynccontextmanager
    async def _running(self) -> AsyncIterator[None]:
        async with self.instance, self.producer:
            quiet = _QuietConnectFailures(self.instance.registries)
            remoting_log = logging.getLogger("boltmq.remoting")
            remoting_log.addFilter(quiet)
            try:
                await self.admin.cluster_info()
            except RemotingError as exc:
                # One line says it all: the remark names every registry and its reason.
                reason = (exc.remark or str(exc)).removeprefix("no registry answered: ")
                for address in self.instance.registries:
                    reason = reason.replace(f"{address}: cannot connect to {address}: ",
                                            f"{address}: ")  # fmt: skip
                raise RegistryUnreachable(
                    f"no BoltMQ registry answers at {self.settings.namesrv_addr} ({reason})"
                ) from None
            finally:
                remoting_log.removeFilter(quiet)
            async with anyio.create_task_group() as tasks:
                self._task_group = tasks
                self._loop = asyncio.get_running_loop()
                try:
                    yield
                finally:
                    tasks.cancel_scope.cancel()

    @property
    def is_open(self) -> bool:
        """Whether the loop and the client run."""
        return self._portal is not None

    def call(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``func(*args, **kwargs)`` (a coroutine function) in the loop; its result."""
        loop = self._loop
        if self._portal is None or loop is None:
            raise RemotingError(ResponseCode.SYSTEM_ERROR, "the BoltMQ connection is closed")
        # One hand-over to the loop and one back (the portal's call takes two each way; on a
        # busy machine every hand-over is a thread switch that waits for the GIL).
        return asyncio.run_coroutine_threadsafe(func(*args, **kwargs), loop).result()

    # -- topics and groups ----------------------------------------------------------------------

    async def ensure_topic(self, topic: str) -> None:
        """Create ``topic`` on every master (unless a registry routes it already) and wait
        until a registry routes it."""
        if topic in self._topics:
            return
        if await self.instance.update_route(topic) is None:
            await self.admin.create_topic(topic, queue_nums=self.settings.queue_nums)
            with anyio.fail_after(10):
                while await self.instance.update_route(topic) is None:
                    await anyio.sleep(0.05)
        self._topics.add(topic)

    async def ensure_group(self, group: str) -> None:
        """Create the consumer group on every master (its retry limit from the settings)."""
        if group in self._groups:
            return
        config = SubscriptionGroupConfig(
            group_name=group, retry_max_times=self.settings.max_retries
        )
        await self.admin.create_group(config)
        self._groups.add(group)

    async def drop(self, topic: str | None, group: str) -> None:
        """Delete a queue's group (and its topic when given): kombu deleted the queue."""
        self._groups.discard(group)
        with contextlib.suppress(RemotingError):
            await self.admin.delete_group(group)
        if topic is not None:
            self._topics.discard(topic)
            with contextlib.suppress(RemotingError):
                await self.admin.delete_topic(topic)

    async def move_to_end(self, group: str, topic: str) -> int:
        """Move ``group`` to the end of every queue of ``topic``; the messages skipped."""
        stats = await self.admin.topic_stats(topic)
        backlog = await self.backlog(group, topic)
        by_broker: dict[str, dict[MessageQueue, int]] = {}
        for mq, offsets in stats.offset_table.items():
            by_broker.setdefault(mq.broker_name, {})[mq] = offsets.max_offset
        for broker_name, table in by_broker.items():
            address = self.instance.master_address(broker_name)
            if address is None:
                continue
            header = ResetOffsetRequestHeader(topic=topic, group=group, timestamp=0, is_force=True)
            request = RemotingCommand.request(
                RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                encode_header(header),
                ResetOffsetBody(offset_table=table).to_json(),
            )
            response = await self.instance.invoke_broker(address, request, self.instance.timeout)
            if response.code != ResponseCode.SUCCESS:
                raise RemotingError(response.code, f"move {group} to the end of {topic} at "
                                    f"{address}: {response.remark}")  # fmt: skip
        return backlog

    async def has_offsets(self, group: str, topic: str) -> bool:
        """Whether ``group`` has consumed ``topic`` before (an offset above 0 somewhere)."""
        # The broker reports 0 for a queue the group has no offset on.
        stats = await self.admin.consume_stats(group, topic)
        return any(w.consumer_offset > 0 for w in stats.offset_table.values())

    async def backlog(self, group: str, topic: str) -> int:
        """Messages of ``topic`` the group has not popped yet."""
        stats = await self.admin.consume_stats(group, topic)
        if stats.offset_table:
            return stats.lag
        # A group that never popped has no offsets: everything kept is its backlog.
        table = (await self.admin.topic_stats(topic)).offset_table
        return sum(o.max_offset - o.min_offset for o in table.values())

    # -- sending --------------------------------------------------------------------------------

    async def send(self, topic: str, payload: dict[str, Any], *, routing_key: str | None,
                   deliver_time_ms: int | None, keys: str | None) -> None:  # fmt: skip
        """Send kombu's payload to ``topic`` (at ``deliver_time_ms`` when given)."""
        properties = {} if routing_key is None else {ROUTING_KEY_PROPERTY: routing_key}
        tags = routing_key if routing_key and tag_safe(routing_key) else None
        message = Message(
            topic, self._encode(payload).encode(), tags=tags, keys=keys,
            properties=properties, deliver_time_ms=deliver_time_ms,
        )  # fmt: skip
        await self.producer.send(message)

    # -- consuming ----------------------------------------------------------------------------

    async def consume(self, queue_name: str, sources: list[Source], window: Callable[[], int],
                      no_ack: bool) -> None:  # fmt: skip
        """Start the pop loops of ``queue_name``."""
        assert self._task_group is not None
        await self.cancel(queue_name)
        consumer = _Consumer(queue_name, window, no_ack)
        self._consumers[queue_name] = consumer
        for source in sources:
            route = await self.instance.update_route(source.topic)
            if route is None:
                raise RemotingError(ResponseCode.TOPIC_NOT_EXIST,
                                    f"no registry routes topic {source.topic}")  # fmt: skip
            for broker in route.broker_datas:
                address = broker.broker_addrs.get(_MASTER_ID)
                if address is not None:
                    done = anyio.Event()
                    consumer.done.append(done)
                    self._task_group.start_soon(self._pop_loop, consumer, source, address, done)

    async def cancel(self, queue_name: str) -> None:
        """Stop consuming ``queue_name``: its loops end after their pop in flight, and its
        messages not delivered yet become visible again."""
        consumer = self._consumers.pop(queue_name, None)
        if consumer is None:
            return
        consumer.stopping = True
        consumer.changed.set()
        for done in consumer.done:
            await done.wait()
        await self._release(lambda u: u.consumer is consumer and u.popped is not None,
                            undelivered_only=True)  # fmt: skip

    async def _stop_all(self) -> None:
        await self._flush_acks()
        for name in list(self._consumers):
            await self.cancel(name)

    async def _pop_loop(self, consumer: _Consumer, source: Source, address: str,
                        done: anyio.Event) -> None:  # fmt: skip
        failures = 0
        try:
            while not consumer.stopping:
                room = min(32, consumer.window() - consumer.in_flight)
                if room <= 0:
                    await consumer.changed.wait()
                    continue
                try:
                    result = await self.pop.pop(
                        address, source.group, source.topic, max_messages=room,
                        invisible_ms=self.settings.invisible_ms,
                        poll_ms=int(self.settings.pop_wait * 1000),
                        expression=source.expression, init_mode=source.init_mode,
                    )  # fmt: skip
                except RemotingError as exc:
                    failures += 1
                    if failures == 1:
                        log.warning("pop of %s (group %s) at %s failed: %s; retrying every "
                                    "second", source.topic, source.group, address,
                                    exc.remark or exc)  # fmt: skip
                    with anyio.move_on_after(1.0):
                        await consumer.changed.wait()
                    continue
                if failures:
                    log.info("pop of %s at %s works again", source.topic, address)
                    failures = 0
                for popped in result.messages:
                    await self._hand_over(consumer, source, popped)
        finally:
            done.set()

    async def _hand_over(self, consumer: _Consumer, source: Source, popped: PoppedMessage) -> None:
        delivery = await self._delivery(consumer, consumer.queue, source, popped)
        if delivery is not None:
            self.inbox.put(delivery)

    async def _delivery(self, consumer: _Consumer | None, queue_name: str, source: Source,
                        popped: PoppedMessage) -> Delivery | None:  # fmt: skip
        message = popped.message
        routing_key = message.properties.get(ROUTING_KEY_PROPERTY, "")
        if not source.wants(routing_key):
            # Another queue's routing key on a shared exchange topic: not ours to deliver.
            await self._settle_quietly(popped, source.group, source.topic)
            return None
        try:
            payload = self._decode(message.body)
            if not isinstance(payload, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            log.error("message %s of %s is not a kombu message (%s); sent to the dead-letter "
                      "queue of %s", message.msg_id, source.topic, exc, source.group)  # fmt: skip
            with contextlib.suppress(RemotingError):
                await self.pop.forward_to_dead_letter(popped, source.group, topic=source.topic)
            return None
        tag = uuid.uuid4().hex
        properties = payload.setdefault("properties", {})
        properties["delivery_tag"] = tag
        if popped.delivery_attempt > 1:
            # Where Celery looks (delivery_info) and where kombu's own restore puts it.
            properties.setdefault("delivery_info", {})["redelivered"] = True
            payload["redelivered"] = True
        if consumer is not None and consumer.no_ack:
            await self._settle_quietly(popped, source.group, source.topic)
        else:
            if consumer is not None:
                consumer.in_flight += 1
            self._unsettled[tag] = _Unsettled(popped, source.group, source.topic, consumer)
        return Delivery(queue_name, payload, tag)

    async def get_one(self, queue_name: str, sources: list[Source]) -> Delivery | None:
        """One message of ``queue_name`` without waiting (kombu's basic_get), or None."""
        for source in sources:
            route = await self.instance.update_route(source.topic)
            for broker in route.broker_datas if route is not None else []:
                address = broker.broker_addrs.get(_MASTER_ID)
                if address is None:
                    continue
                result = await self.pop.pop(
                    address, source.group, source.topic, max_messages=1,
                    invisible_ms=self.settings.invisible_ms, expression=source.expression,
                    init_mode=source.init_mode,
                )  # fmt: skip
                for popped in result.messages:
                    delivery = await self._delivery(None, queue_name, source, popped)
                    if delivery is not None:
                        return delivery
        return None

    # -- settling -------------------------------------------------------------------------------

    async def ack(self, tag: str) -> None:
        """The message under ``tag`` is done with."""
        entry = self._unsettled.pop(tag, None)
        if entry is None:
            return
        self._settled(entry)
        await self.pop.ack(entry.popped, group=entry.group, topic=entry.topic)

    def ack_soon(self, tag: str) -> None:
        """Ack without waiting (from kombu's thread): acks gathered while one batch is on its
        way go out together, one BATCH_ACK_MESSAGE per broker and group."""
        self._acks.append(tag)
        if not self._ack_scheduled and self._loop is not None:
            self._ack_scheduled = True
            asyncio.run_coroutine_threadsafe(self._flush_acks(), self._loop)

    async def _flush_acks(self) -> None:
        self._ack_scheduled = False
        by_group: dict[str, list[PoppedMessage]] = {}
        while self._acks:
            entry = self._unsettled.pop(self._acks.popleft(), None)
            if entry is not None:
                self._settled(entry)
                by_group.setdefault(entry.group, []).append(entry.popped)
        for group, messages in by_group.items():
            try:
                await self.pop.batch_ack(messages, group=group)
            except RemotingError as exc:
                # Not acked: those messages come back after their visibility timeout.
                log.warning("ack of %d message(s) of group %s failed: %s", len(messages),
                            group, exc.remark or exc)  # fmt: skip

    async def flush_acks(self) -> None:
        """Send the acks still gathered (before a close)."""
        await self._flush_acks()

    async def requeue(self, tag: str) -> None:
        """The message under ``tag`` becomes visible again now (kombu's reject with requeue)."""
        entry = self._unsettled.pop(tag, None)
        if entry is None:
            return
        self._settled(entry)
        await self.pop.change_invisible(entry.popped, _NOW_MS, group=entry.group,
                                        topic=entry.topic)  # fmt: skip

    async def dead_letter(self, tag: str) -> None:
        """The message under ``tag`` goes to its group's dead-letter queue (reject, no requeue)."""
        entry = self._unsettled.pop(tag, None)
        if entry is None:
            return
        self._settled(entry)
        await self.pop.forward_to_dead_letter(entry.popped, entry.group, topic=entry.topic)

    async def requeue_all(self, tags: list[str]) -> int:
        """Make the messages under ``tags`` visible again; how many the broker took back."""
        count = 0
        for tag in tags:
            with contextlib.suppress(RemotingError):
                await self.requeue(tag)
                count += 1
        return count

    def _settled(self, entry: _Unsettled) -> None:
        if entry.consumer is not None:
            entry.consumer.settle()

    async def _settle_quietly(self, popped: PoppedMessage, group: str, topic: str) -> None:
        try:
            await self.pop.ack(popped, group=group, topic=topic)
        except RemotingError as exc:
            log.warning("ack of %s on %s failed: %s", popped.message.msg_id, topic, exc)

    async def _release(self, which: Callable[[_Unsettled], bool], *,
                       undelivered_only: bool) -> None:  # fmt: skip
        """Make messages visible again: those of a stopped consumer still in the inbox."""
        if undelivered_only:
            kept: list[Delivery] = []
            while True:
                try:
                    delivery = self.inbox.get_nowait()
                except queue.Empty:
                    break
                entry = self._unsettled.get(delivery.tag)
                if entry is not None and which(entry):
                    await self.requeue_all([delivery.tag])
                else:
                    kept.append(delivery)
            for delivery in kept:
                self.inbox.put(delivery)


class _QuietConnectFailures(logging.Filter):
    """Drops the client's per-attempt warnings about the registries while the connection is
    first checked: kombu reports that failure itself, once per retry, as one line."""

    def __init__(self, addresses: list[str]) -> None:
        super().__init__()
        self.addresses = set(addresses)

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        return not (
            isinstance(args, tuple)
            and args
            and args[0] in self.addresses
            and str(record.msg).startswith("cannot connect to")
        )


def tag_safe(routing_key: str) -> bool:
    """Whether ``routing_key`` can be a message's tag and a pop's tag expression."""
    # A tag is matched by hash at the broker and split on '||' in expressions.
    return (
        bool(routing_key)
        and "||" not in routing_key
        and routing_key.strip() == routing_key
        and routing_key != "*"
    )

