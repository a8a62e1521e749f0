"""The pull consumer, lite-pull style: assign or subscribe, poll, seek, commit.

    async with PullConsumer("cg", namesrv_addr="127.0.0.1:9876") as consumer:
        await consumer.subscribe("Orders", "TagA || TagB")  # without await: taken at poll
        for message in await consumer.poll(timeout=5):
            print(message.msg_id, message.body)      # bodies come back inflated
        await consumer.commit()

A queue's start offset is the group's committed offset (QUERY_CONSUMER_OFFSET); a group
without one starts per ``consume_from_where`` (last, first, or a timestamp). From the first
`poll` on, each assigned queue has a pull loop of its own that pulls ahead into a buffer and
long-polls at the broker once it is caught up (RocketMQ's DefaultLitePullConsumer works so):
a message is on its way to the client as soon as it is stored, whatever the other queues do,
and `poll` takes what the loops have buffered, waiting up to its timeout for the first. A
loop stops pulling while its queue has `prefetch` messages buffered. Offsets move as `poll`
returns messages (messages buffered but not yet returned are not consumed); `commit` stores
them (UPDATE_CONSUMER_OFFSET), and with ``auto_commit`` (the default) they are also committed
every 5 s and on close.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Sequence
from types import TracebackType

import anyio
import anyio.abc

from client.instance import MASTER_ID, ClientInstance, subscribe_queues
from client.message import MQClientError
from client.options import ConnectionOptions, connection_options
from client.selector import MessageSelector, selector_of
from client.subscription import Subscription
from protocol.bodies import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    MessageModel,
    MessageQueue,
    SubscriptionData,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.filter import TAG
from protocol.headers import (
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    PullSysFlag,
    UpdateConsumerOffsetRequestHeader,
    decode_header,
    encode_header,
)
from protocol.message import MessageExt, MessageSysFlag, decode_records, decompress_body

log = logging.getLogger("boltmq.client")

_AUTO_COMMIT_INTERVAL = 5.0
_BROKER_SUSPEND_MAX = 15.0
#: A pull loop whose pull failed waits this long before it pulls again (RocketMQ's consumers
#: wait too, so a broker that is down is not asked in a tight loop).
_PULL_RETRY_DELAY = 1.0
#: A pull loop whose answer moved nothing waits this long before it pulls again.
_NO_PROGRESS_DELAY = 0.05
_PULL_ANSWERS = frozenset({
    ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
    ResponseCode.PULL_OFFSET_MOVED,
})  # fmt: skip
# A pull's sysFlag as a plain int: an IntFlag's ``|`` runs enum code on every pull.
_COMPRESSED = MessageSysFlag.COMPRESSED
_PULL_FLAGS = int(PullSysFlag.SUBSCRIPTION)
_HELD_PULL_FLAGS = int(PullSysFlag.SUBSCRIPTION | PullSysFlag.SUSPEND)


def parse_tags(expression: str) -> frozenset[str] | None:
    """Tags of ``TagA || TagB``; None for ``*`` or blank (everything)."""
    tags = frozenset(t.strip() for t in expression.split("||") if t.strip())
    return None if not tags or "*" in tags else tags


class PullConsumer:
    """A lite pull consumer of one group; use as ``async with PullConsumer(group, ...)``."""

    def __init__(
        self,
        group: str,
        *,
        namesrv_addr: str | Sequence[str] | None = None,
        instance: ClientInstance | None = None,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp_ms: int | None = None,
        pull_batch_size: int = 32,
        prefetch: int | None = None,
        auto_commit: bool = True,
        timeout: float = 3.0,
        tls_ca_file: str | None = None,
        tls: bool | None = None,
        tls_cert_file: str = "",
        tls_key_file: str = "",
        access_key: str | None = None,
        secret_key: str | None = None,
        security_token: str | None = None,
        options: ConnectionOptions | None = None,
    ) -> None:
        if instance is None and namesrv_addr is None:
            raise ValueError("give namesrv_addr (or a ClientInstance to share)")
        self.group = group
        # The seven keywords are the record's fields spelled out (client.options).
        options = connection_options(
            options,
            ConnectionOptions(
                tls=tls,
                tls_ca_file=tls_ca_file,
                tls_cert_file=tls_cert_file,
                tls_key_file=tls_key_file,
                access_key=access_key,
                secret_key=secret_key,
                security_token=security_token,
            ),
        )
        self._own_instance = instance is None
        self.instance = instance or ClientInstance(
            namesrv_addr or "",
            options=options,
        )
        self.consume_from_where = consume_from_where
        self.consume_timestamp_ms = consume_timestamp_ms
        self.pull_batch_size = pull_batch_size
        #: A queue's pull loop pauses while this many of its messages wait for `poll`.
        self.prefetch = prefetch if prefetch is not None else 4 * pull_batch_size
        if self.prefetch < 1:
            raise ValueError(f"prefetch must be at least 1, not {prefetch}")
        self.auto_commit = auto_commit
        self.timeout = timeout
        #: Topic -> subscription expression (``*`` for assigned queues).
        self.subscriptions: dict[str, str] = {}
        #: Topic -> expression type of a subscription not by tag (SQL92); absent = TAG.
        self.expression_types: dict[str, str] = {}
        self._tags: dict[str, frozenset[str] | None] = {}
        #: Topics subscribed whose queues are not taken yet (`subscribe` not awaited yet).
        self._unrouted: set[str] = set()
        self._offsets: dict[MessageQueue, int] = {}  # next offset to pull
        self._committed: dict[MessageQueue, int] = {}
        #: Queue -> the broker address its offset was last committed to.
        self._committed_to: dict[MessageQueue, str] = {}
        #: Queue -> the broker id its last pull answer suggested reading from next.
        self._read_from: dict[MessageQueue, int] = {}
        self._assigned: list[MessageQueue] = []
        self._next_commit = 0.0
        # The pull-ahead state (see `poll`): the loops' task group, each running loop's cancel
        # scope, what the loops pulled and `poll` has not returned yet (queue, messages, the
        # offset after them), how many messages of each queue that holds, and each queue's
        # last pull failure since its last answer.
        self._loops: anyio.abc.TaskGroup | None = None
        self._loop_scopes: dict[MessageQueue, anyio.CancelScope] = {}
        self._buffer: deque[tuple[MessageQueue, list[MessageExt], int]] = deque()
        self._buffered: dict[MessageQueue, int] = {}
        self._failures: dict[MessageQueue, RemotingError] = {}
        # Set when a loop buffers or fails, and when `poll` takes: made in `__aenter__` (an
        # event needs the running event loop; a blocking consumer is built outside one).
        self._arrived: anyio.Event
        self._drained: anyio.Event
        #: A loop waits for `_drained`: the next `poll` that takes sets it and makes a new one.
        self._drain_awaited = False

    async def __aenter__(self) -> PullConsumer:
        if self._own_instance:
            await self.instance.__aenter__()
        self.instance.consumers[self.group] = self._consumer_data
        self._next_commit = anyio.current_time() + _AUTO_COMMIT_INTERVAL
        self._arrived = anyio.Event()
        self._drained = anyio.Event()
        self._loops = anyio.create_task_group()
        await self._loops.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._loops is not None:
                loops, self._loops = self._loops, None
                self._loop_scopes.clear()
                loops.cancel_scope.cancel()
                # Raises when the consumer is cancelled from outside: the rest still runs, or
                # the instance's task groups stay open (trio reports its nursery stack
                # corrupted).
                await loops.__aexit__(None, None, None)
        finally:
            try:
                with anyio.CancelScope(shield=True), anyio.move_on_after(2 * self.timeout):
                    if self.auto_commit:
                        try:
                            await self.commit()
                        except RemotingError:
                            pass  # shutting down: the broker keeps the last committed offsets
                    self.instance.consumers.pop(self.group, None)
                    await self.instance.unregister(None, self.group)
            finally:
                if self._own_instance:
                    await self.instance.__aexit__(exc_type, exc, tb)

    # -- assignment ---------------------------------------------------------------------------

    def subscribe(
        self, topic: str, expression: str | MessageSelector = "*"
    ) -> Subscription[list[MessageQueue]]:
        """Take every readable queue of ``topic``, filtered by a tag expression or a
        `MessageSelector` (``MessageSelector.by_sql("a > 5")``: the broker filters).

        Recorded at once; awaiting fetches the route (and has a broker check a SQL92
        selector, CHECK_CLIENT_CONFIG) and gives the queues taken. Not awaited, the next
        `poll` does that (and raises what the await would have).
        """
        if not topic:
            raise ValueError("subscribe needs a topic name")
        selector = selector_of(expression)
        self.subscriptions[topic] = selector.expression
        # SQL92 is filtered by the broker alone: no tags to check again here (as in Java).
        self._tags[topic] = parse_tags(selector.expression) if selector.is_tag else None
        if selector.is_tag:
            self.expression_types.pop(topic, None)
        else:
            self.expression_types[topic] = selector.expression_type
        self._unrouted.add(topic)
        return Subscription(topic, selector.expression, lambda: self._take_queues(topic))

    async def _take_queues(self, topic: str) -> list[MessageQueue]:
        route = await self.instance.update_route(topic)
        try:
            if route is None:
                raise MQClientError(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} has no route")
            for data in self._consumer_data().subscription_data_set:
                if data.topic == topic:
                    await self.instance.check_client_in_broker(self.group, data)
        except MQClientError:
            # As if never subscribed, awaited or found at poll: a later poll does not retry.
            self._unrouted.discard(topic)
            self.subscriptions.pop(topic, None)
            self.expression_types.pop(topic, None)
            self._tags.pop(topic, None)
            raise
        queues = subscribe_queues(topic, route)
        self._unrouted.discard(topic)
        self._assign([*(q for q in self._assigned if q.topic != topic), *queues])
        await self.instance.send_heartbeat_to_all_brokers()
        return queues

    async def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Consume exactly these queues (all messages of their topics)."""
        queues = list(queues)
        for queue in queues:
            self.subscriptions.setdefault(queue.topic, "*")
            self._tags.setdefault(queue.topic, None)
            if self.instance.read_address(queue.broker_name) is None:
                await self.instance.update_route(queue.topic)
        self._assign(queues)

    def assignment(self) -> list[MessageQueue]:
        """The queues this consumer reads."""
        return list(self._assigned)

    def _assign(self, queues: list[MessageQueue]) -> None:
        self._assigned = queues
        keep = set(queues)
        self._offsets = {q: o for q, o in self._offsets.items() if q in keep}
        for queue in [q for q in self._loop_scopes if q not in keep]:
            self._stop_loop(queue)

    # -- offsets ------------------------------------------------------------------------------

    async def seek(self, queue: MessageQueue, offset: int) -> None:
        """Read ``queue`` from ``offset`` next (what was pulled ahead of it is dropped)."""
        self._move(queue, offset)

    async def seek_to_begin(self, queue: MessageQueue) -> None:
        """Read ``queue`` from its min offset next."""
        self._move(queue, await self.min_offset(queue))

    async def seek_to_end(self, queue: MessageQueue) -> None:
        """Read only messages written to ``queue`` from now on."""
        self._move(queue, await self.max_offset(queue))

    def position(self, queue: MessageQueue) -> int | None:
        """The offset of the next message `poll` returns from ``queue`` (None before the first
        poll): messages pulled ahead but not returned yet are not past it."""
        return self._offsets.get(queue)

    def buffered(self, queue: MessageQueue | None = None) -> int:
        """Messages the pull loops hold that `poll` has not returned yet (of ``queue``, or of
        every queue)."""
        if queue is not None:
            return self._buffered.get(queue, 0)
        return sum(self._buffered.values())

    def _move(self, queue: MessageQueue, offset: int) -> None:
        self._stop_loop(queue)
        self._offsets[queue] = offset

    async def commit(self, offsets: dict[MessageQueue, int] | None = None) -> None:
        """Store the group's offsets on the brokers (the current positions by default)."""
        table = dict(self._offsets if offsets is None else offsets)
        for queue, offset in table.items():
            # The master while it is up, a slave while it is down. An offset a slave took is
            # sent again once the master is back: the master never saw it, and the slave's
            # config sync would replace it with the master's older one.
            found = self.instance.read_address(queue.broker_name)
            if self._committed.get(queue) == offset and (
                found is None or self._committed_to.get(queue) == found[0]
            ):
                # Nothing new, or nothing new and the broker gone from the route for now (a
                # commit that did not move has nowhere to go and nothing to say).
                continue
            address, _ = await self.instance.find_read_address(queue)
            header = UpdateConsumerOffsetRequestHeader(
                consumer_group=self.group, topic=queue.topic, queue_id=queue.queue_id,
                commit_offset=offset,
            )  # fmt: skip
            response = await self._invoke(queue, RequestCode.UPDATE_CONSUMER_OFFSET, header)
            if response.code != ResponseCode.SUCCESS:
                raise MQClientError(response.code, f"commit of {queue}: {response.remark}")
            self._committed[queue] = offset
            self._committed_to[queue] = address
        self._next_commit = anyio.current_time() + _AUTO_COMMIT_INTERVAL

    async def committed(self, queue: MessageQueue) -> int | None:
        """The group's stored offset of ``queue`` (QUERY_CONSUMER_OFFSET), None if it has none."""
        return await self.instance.query_consumer_offset(self.group, queue, self.timeout)

    async def min_offset(self, queue: MessageQueue) -> int:
        """The queue's min offset."""
        return await self.instance.min_offset(queue, self.timeout)

    async def max_offset(self, queue: MessageQueue) -> int:
        """The queue's max offset (the offset the next message gets)."""
        return await self.instance.max_offset(queue, self.timeout)

    async def offset_for_timestamp(self, queue: MessageQueue, timestamp_ms: int) -> int:
        """The queue offset of the message stored nearest ``timestamp_ms``."""
        return await self.instance.search_offset(queue, timestamp_ms, self.timeout)

    async def _start_offset(self, queue: MessageQueue) -> int:
        stored = await self.committed(queue)
        if stored is not None and stored >= 0:
            self._committed[queue] = stored
            return stored
        where = self.consume_from_where
        if where in (ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                     ConsumeFromWhere.CONSUME_FROM_MIN_OFFSET):  # fmt: skip
            return await self.min_offset(queue)
        if where == ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
            timestamp = self.consume_timestamp_ms
            if timestamp is None:  # Java's default: half an hour ago
                timestamp = int((time.time() - 1800) * 1000)
            return await self.offset_for_timestamp(queue, timestamp)
        return await self.max_offset(queue)

    # -- polling ------------------------------------------------------------------------------

    async def poll(self, timeout: float = 5.0) -> list[MessageExt]:
        """Messages from the assigned queues, waiting up to ``timeout`` s for the first.

        The first call starts a pull loop per assigned queue; later calls return what the
        loops pulled since (every queue's, in arrival order). When every assigned queue's last
        pull failed and nothing is buffered, the first failure is raised.
        """
        if self._loops is None:
            raise MQClientError(ResponseCode.SYSTEM_ERROR, "poll outside `async with`")
        for topic in sorted(self._unrouted):
            await self._take_queues(topic)
        if not self._assigned:
            raise MQClientError(ResponseCode.SYSTEM_ERROR, "poll before subscribe or assign")
        # Every running loop's queue is assigned and has an offset (`_assign` and `_move` stop
        # the others): as many loops as queues means none to start, and no lookups per poll.
        if len(self._loop_scopes) < len(self._assigned):
            for queue in self._assigned:
                if queue not in self._offsets:
                    self._offsets[queue] = await self._start_offset(queue)
                if queue not in self._loop_scopes:
                    self._start_loop(queue, self._offsets[queue])
        # Events and clock reads cost microseconds under anyio (a backend lookup each): a poll
        # that finds messages buffered makes none, and the deadline is read on the first miss.
        deadline: float | None = None
        while True:
            found = self._take()
            if found:
                break
            failures = [self._failures[q] for q in self._assigned if q in self._failures]
            if failures and len(failures) == len(self._assigned):
                raise failures[0]  # nothing answers: say why rather than wait out the timeout
            now = anyio.current_time()
            if deadline is None:
                deadline = now + timeout
            remaining = deadline - now
            if remaining <= 0:
                break
            # Made after the look with no checkpoint between: a loop that buffers from now on
            # sets this one, so nothing arrives unseen.
            self._arrived = anyio.Event()
            with anyio.move_on_after(remaining):
                await self._arrived.wait()
        if self.auto_commit and anyio.current_time() >= self._next_commit:
            await self.commit()
        return found

    def _take(self) -> list[MessageExt]:
        """Everything buffered; each queue's position moves past what it returns."""
        found: list[MessageExt] = []
        while self._buffer:
            queue, messages, next_offset = self._buffer.popleft()
            found.extend(messages)
            self._offsets[queue] = next_offset
            self._buffered[queue] -= len(messages)
        if found and self._drain_awaited:
            self._drain_awaited = False
            self._drained.set()
            self._drained = anyio.Event()
        return found

    def _start_loop(self, queue: MessageQueue, offset: int) -> None:
        assert self._loops is not None
        scope = anyio.CancelScope()
        self._loop_scopes[queue] = scope
        self._buffered[queue] = 0
        self._loops.start_soon(self._pull_loop, queue, offset, scope)

    def _stop_loop(self, queue: MessageQueue) -> None:
        """Cancel ``queue``'s loop and drop what it buffered (a seek or an unassignment)."""
        scope = self._loop_scopes.pop(queue, None)
        if scope is not None:
            scope.cancel()
        self._buffered.pop(queue, None)
        # Every entry of the queue, those without messages too (a pull whose messages the
        # tag filter dropped still moves the position): none may land after the seek.
        if any(entry[0] == queue for entry in self._buffer):
            self._buffer = deque(entry for entry in self._buffer if entry[0] != queue)
        self._failures.pop(queue, None)

    async def _pull_loop(self, queue: MessageQueue, offset: int, scope: anyio.CancelScope) -> None:
        """Pull ``queue`` from ``offset`` on into the buffer until cancelled.

        Always with the suspend flag: a caught-up queue's pull is held at the broker and
        answered as soon as a message is stored.
        """
        with scope:
            while True:
                while self._buffered.get(queue, 0) >= self.prefetch:
                    self._drain_awaited = True
                    await self._drained.wait()
                if scope.cancel_called:
                    return  # woken by a poll and stopped by a seek in the same pass
                try:
                    messages, next_offset = await self._pull_at(queue, offset, _BROKER_SUSPEND_MAX)
                except Exception as exc:  # a loop that ends would starve its queue silently
                    if scope.cancel_called:
                        return
                    if not isinstance(exc, RemotingError):
                        log.exception("pull loop of %s", queue)
                        exc = MQClientError(ResponseCode.SYSTEM_ERROR, f"pull of {queue}: {exc}")
                    elif queue not in self._failures:
                        log.warning("pull of %s failed: %s", queue, exc)
                    self._failures[queue] = exc
                    self._arrived.set()
                    await anyio.sleep(_PULL_RETRY_DELAY)
                    continue
                if scope.cancel_called:
                    # Stopped (a seek) after its answer came in but before it ran again: the
                    # answer is for the old position.
                    return
                self._failures.pop(queue, None)
                if next_offset != offset:
                    offset = next_offset
                    self._buffer.append((queue, messages, next_offset))
                    self._buffered[queue] += len(messages)
                    self._arrived.set()
                else:
                    # Answered without a hold and without moving (a broker at its held-pull
                    # bound, a slave that may not be read): pull again, but not in a spin.
                    await anyio.sleep(_NO_PROGRESS_DELAY)

    async def pull(self, queue: MessageQueue, suspend: float = 0.0) -> list[MessageExt]:
        """One PULL_MESSAGE of ``queue`` from its position; the position moves past the answer.

        For a reader that runs its own loops instead of `poll` (do not mix the two on one
        queue: `poll`'s loop keeps pulling from where it is).
        """
        offset = self._offsets[queue]
        messages, next_offset = await self._pull_at(queue, offset, suspend)
        if self._offsets.get(queue) != offset:
            return []  # seeked while the pull was in flight: drop the stale answer
        self._offsets[queue] = next_offset
        return messages

    async def _pull_at(
        self, queue: MessageQueue, offset: int, suspend: float
    ) -> tuple[list[MessageExt], int]:
        """One PULL_MESSAGE of ``queue`` at ``offset``: the messages (tag filter applied,
        bodies inflated) and the offset to pull from next."""
        header = PullMessageRequestHeader(
            consumer_group=self.group, topic=queue.topic, queue_id=queue.queue_id,
            queue_offset=offset, max_msg_nums=self.pull_batch_size,
            sys_flag=_HELD_PULL_FLAGS if suspend > 0 else _PULL_FLAGS,
            commit_offset=0, suspend_timeout_millis=int(suspend * 1000),
            subscription=self.subscriptions.get(queue.topic, "*"), sub_version=0,
            expression_type=self.expression_types.get(queue.topic, TAG),
        )  # fmt: skip
        response = await self._invoke(
            queue, RequestCode.PULL_MESSAGE, header, timeout=suspend + self.timeout,
            broker_id=self._read_from.get(queue, MASTER_ID),
        )  # fmt: skip
        code = response.code
        if code in _PULL_ANSWERS:
            answer = decode_header(PullMessageResponseHeader, response.ext_fields)
        else:
            raise MQClientError(code, f"pull of {queue}: {response.remark}")
        # The broker says where to read next: a slave when we read far behind, else the master.
        self._read_from[queue] = answer.suggest_which_broker_id
        if code != ResponseCode.SUCCESS or not response.body:
            # PULL_RETRY_IMMEDIATELY included: nothing matched the filter up to the offset the
            # broker names (RocketMQ's clients move on to it too).
            return [], answer.next_begin_offset
        messages = decode_records(response.body)
        tags = self._tags.get(queue.topic)
        if tags is not None:
            # The broker filters by tag hash; collisions are dropped here.
            messages = [message for message in messages if message.tags in tags]
        # Comprehensions, not one loop with appends: this runs for every message consumed.
        for message in [m for m in messages if m.sys_flag & _COMPRESSED]:
            message.body = decompress_body(message.body)
            message.sys_flag &= ~_COMPRESSED
        return messages, answer.next_begin_offset

    # -- internals ----------------------------------------------------------------------------

    def _consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group,
            consume_type=ConsumeType.CONSUME_ACTIVELY,
            message_model=MessageModel.CLUSTERING,
            consume_from_where=self.consume_from_where,
            subscription_data_set=[
                SubscriptionData(
                    topic=topic,
                    sub_string=expression,
                    tags_set=sorted(self._tags.get(topic) or ()),
                    expression_type=self.expression_types.get(topic, TAG),
                )
                for topic, expression in sorted(self.subscriptions.items())
            ],
        )

    async def _invoke(
        self,
        queue: MessageQueue,
        code: int,
        header: object,
        timeout: float | None = None,
        broker_id: int = MASTER_ID,
    ) -> RemotingCommand:
        address, _ = await self.instance.find_read_address(queue, broker_id)
        request = RemotingCommand.request(code, encode_header(header))
        return await self.instance.invoke_for_queue(
            queue, request, timeout or self.timeout, address
        )
