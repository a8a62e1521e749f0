"""`SimpleConsumer`: RocketMQ 5's simple consumer over the broker's pop codes.

    async with SimpleConsumer("OrderConsumers", namesrv_addr="127.0.0.1:9876",
                              subscriptions={"Orders": "*"}, await_duration=20) as consumer:
        for popped in await consumer.receive(16, invisible_duration=30):
            handle(popped.message)
            await consumer.ack(popped)

Each `receive` pops from one readable broker of one subscribed topic, taking them in turn
(round robin), and waits up to ``await_duration`` seconds for a message there (long polling);
it answers an empty list when none came. A message not acked within its invisible duration
comes back (``delivery_attempt`` one higher); `change_invisible_duration` moves that time,
`forward_to_dead_letter` sends it to ``%DLQ%<group>`` at once. A FIFO group (its
subscription group config has ``consumeMessageOrderly``) hands out a queue's next message
only after the last one was acked. Runs on trio and asyncio (anyio), as the rest of client/.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from types import TracebackType

import attrs

from client.instance import ClientInstance
from client.message import MQClientError
from client.options import ConnectionOptions
from client.pop import INIT_MODE_MIN, PopClient, PoppedMessage
from client.selector import MessageSelector, selector_of
from protocol.bodies import PERM_READ, SubscriptionGroupWrapper, TopicRouteData
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError

__all__ = ["SimpleConsumer"]

#: A pop hands out at most this many messages (the broker's limit, and RocketMQ 5's).
MAX_RECEIVE = 32
#: Invisible durations accepted, in seconds (RocketMQ 5's proxy: up to 12 hours).
MIN_INVISIBLE_DURATION = 0.001
MAX_INVISIBLE_DURATION = 12 * 3600.0


class SimpleConsumer:
    """Receive, ack, change invisible duration and dead-letter messages of one consumer group
    (RocketMQ 5's SimpleConsumer); an async context manager."""

    def __init__(
        self,
        group: str,
        namesrv_addr: str | Sequence[str] | None = None,
        *,
        subscriptions: Mapping[str, MessageSelector | str],
        registry_address: str | Sequence[str] | None = None,
        await_duration: float = 30.0,
        instance: ClientInstance | None = None,
        fifo: bool | None = None,
        init_mode: int = INIT_MODE_MIN,
        timeout: float = 3.0,
        options: ConnectionOptions | None = None,
    ) -> None:
        """``namesrv_addr`` (or its other name ``registry_address``) are the registries;
        ``subscriptions`` maps each topic to a tag expression or a `MessageSelector`;
        ``await_duration`` (s) is how long a receive waits for a message; ``fifo`` None asks
        the group's config (consumeMessageOrderly) on start; ``init_mode`` is where the
        group's first pop of a queue starts (`client.pop.INIT_MODE_MIN`: its first message)."""
        if namesrv_addr is not None and registry_address is not None:
            raise ValueError("give namesrv_addr or registry_address, not both")
        namesrv_addr = namesrv_addr if namesrv_addr is not None else registry_address
        if instance is None and namesrv_addr is None:
            raise ValueError("give namesrv_addr (or a ClientInstance to share)")
        if not subscriptions:
            raise ValueError("subscriptions is empty: name at least one topic")
        if await_duration < 0:
            raise ValueError(f"await_duration must be >= 0 s, not {await_duration}")
        self.group = group
        self.subscriptions = {topic: selector_of(e) for topic, e in subscriptions.items()}
        self.await_duration = await_duration
        self.fifo = fifo
        self.init_mode = init_mode
        self._owns_instance = instance is None
        self.instance = instance or ClientInstance(
            namesrv_addr or [], timeout=timeout, options=options
        )
        self.pop_client = PopClient(self.instance)
        self._turn = 0
        self._started = False

    async def __aenter__(self) -> SimpleConsumer:
        if self._owns_instance:
            await self.instance.__aenter__()
        try:
            await self._start()
        except BaseException:
            if self._owns_instance:
                await self.instance.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._started = False
        if self._owns_instance:
            await self.instance.__aexit__(None, None, None)

    async def receive(
        self, max_messages: int = 16, invisible_duration: float = 30.0
    ) -> list[PoppedMessage]:
        """Up to ``max_messages`` (1..32) messages, invisible to others for
        ``invisible_duration`` s; waits up to ``await_duration`` for one, else []."""
        self._check_started()
        if not 1 <= max_messages <= MAX_RECEIVE:
            raise ValueError(f"max_messages must be 1..{MAX_RECEIVE}, not {max_messages}")
        _check_invisible(invisible_duration)
        targets = await self._targets()
        if not targets:
            raise MQClientError(
                ResponseCode.TOPIC_NOT_EXIST,
                f"no readable broker serves {', '.join(self.subscriptions)}; check the topics' "
                "routes and permissions",
            )
        topic, _, address = targets[self._turn % len(targets)]
        self._turn += 1
        selector = self.subscriptions[topic]
        try:
            result = await self.pop_client.pop(
                address, self.group, topic, max_messages=max_messages,
                invisible_ms=_ms(invisible_duration), poll_ms=_ms(self.await_duration),
                expression_type=selector.expression_type, expression=selector.expression,
                order=bool(self.fifo), init_mode=self.init_mode,
            )  # fmt: skip
        except RemotingError:
            # The broker may have moved or gone: the next receive reads the route afresh.
            with contextlib.suppress(RemotingError):
                await self.instance.update_route(topic)
            raise
        return result.messages

    async def ack(self, message: PoppedMessage) -> None:
        """The message is done with; MQClientError when its handle no longer holds it (acked,
        changed, or come back after its invisible duration)."""
        self._check_started()
        await self.pop_client.ack(message, group=self.group, topic=message.message.topic)

    async def change_invisible_duration(
        self, message: PoppedMessage, invisible_duration: float
    ) -> PoppedMessage:
        """Invisible ``invisible_duration`` s from now; the message under its new receipt
        handle (the old one acks no more)."""
        self._check_started()
        _check_invisible(invisible_duration)
        handle = await self.pop_client.change_invisible(
            message, _ms(invisible_duration), group=self.group, topic=message.message.topic
        )
        popped = attrs.evolve(message, receipt_handle=handle)
        return attrs.evolve(popped, invisible_until_ms=popped.handle.invisible_until_ms)

    async def forward_to_dead_letter(self, message: PoppedMessage) -> None:
        """Send the message to ``%DLQ%<group>`` now and ack it."""
        self._check_started()
        await self.pop_client.forward_to_dead_letter(message, self.group)

    # -- helpers ------------------------------------------------------------------------------

    async def _start(self) -> None:
        routes: dict[str, TopicRouteData] = {}
        for topic in self.subscriptions:
            route = await self.instance.update_route(topic)
            if route is None:
                raise MQClientError(ResponseCode.TOPIC_NOT_EXIST,
                                    f"topic {topic} has no route; create it first")  # fmt: skip
            routes[topic] = route
        if self.fifo is None:
            self.fifo = await self._group_is_fifo(routes)
        self._started = True

    async def _group_is_fifo(self, routes: Mapping[str, TopicRouteData]) -> bool:
        """consumeMessageOrderly of the group at the first broker that knows it."""
        request = RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        for route in routes.values():
            for broker in route.broker_datas:
                address = self.instance.master_address(broker.broker_name)
                if address is None:
                    continue
                response = await self.instance.invoke_broker(address, request)
                if response.code != ResponseCode.SUCCESS:
                    continue
                table = SubscriptionGroupWrapper.from_json(response.body or b"{}")
                config = table.subscription_group_table.get(self.group)
                if config is not None:
                    return bool(config.consume_message_orderly)
        return False

    async def _targets(self) -> list[tuple[str, str, str]]:
        """(topic, broker name, master address) of every readable broker of each topic."""
        targets = []
        for topic in self.subscriptions:
            route = await self.instance.route(topic)
            if route is None:
                continue
            readable = {q.broker_name for q in route.queue_datas
                        if q.perm & PERM_READ and q.read_queue_nums > 0}  # fmt: skip
            for broker_name in sorted(readable):
                address = self.instance.master_address(broker_name)
                if address is not None:
                    targets.append((topic, broker_name, address))
        return targets

    def _check_started(self) -> None:
        if not self._started:
            raise RuntimeError("the SimpleConsumer is not started: use it in `async with`")


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))


def _check_invisible(seconds: float) -> None:
    if not MIN_INVISIBLE_DURATION <= seconds <= MAX_INVISIBLE_DURATION:
        raise ValueError(
            f"invisible_duration {seconds} s is out of range: give "
            f"{MIN_INVISIBLE_DURATION}..{MAX_INVISIBLE_DURATION:.0f} s"
        )
