"""The shared client core (RocketMQ's MQClientInstance): registries, routes, brokers, heartbeats.

One `ClientInstance` owns one pooled `RemotingClient`. It asks the registries for topic routes
(round robin, moving to the next registry when one does not answer), keeps the routes and the
broker address table fresh every 30 s and on demand after an error, and sends HEART_BEAT (Java
JSON form) to every known master every 30 s for the producer groups and consumer groups that
registered with it. Its dispatcher answers the calls brokers make to a consumer
(NOTIFY_CONSUMER_IDS_CHANGED, GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY), handing each
to the push consumer of the named group (`call_targets`). Runs on trio and asyncio (anyio).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Protocol

import anyio
import anyio.abc
import attrs

from client.message import MQClientError
from client.options import ConnectionOptions, connection_options
from client.pop import PopClient
from client.request_reply import ReplyTable
from protocol import names
from protocol.bodies import (
    PERM_READ,
    PERM_WRITE,
    BodyError,
    CheckClientRequestBody,
    ConsumeMessageDirectlyResult,
    ConsumerData,
    ConsumerRunningInfo,
    HeartbeatData,
    MessageQueue,
    ProducerData,
    ResetOffsetBody,
    SubscriptionData,
    TopicRouteData,
)
from protocol.client import RemotingClient
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.connection import Connection
from protocol.filter import is_tag_type
from protocol.headers import (
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    GetRouteInfoRequestHeader,
    NotifyConsumerIdsChangedRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    ResetOffsetRequestHeader,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
    UnregisterClientRequestHeader,
    decode_header,
    encode_header,
)
from protocol.message import MessageExt, MessageFormatError, decode_record
from protocol.websocket_client import split_websocket_url

log = logging.getLogger("boltmq.client")

DEFAULT_TOPIC = names.AUTO_CREATE_TOPIC_KEY_TOPIC
"""The template topic a broker auto-creates unknown topics from (sheet 8.4)."""
MASTER_ID = 0
ROUTE_REFRESH_MIN_INTERVAL = 0.3
"""Seconds between two route refreshes of one topic after failures (`refresh_route_soon`)."""
_instance_counter = itertools.count(1)


def local_ip() -> str:
    """This host's address as clients report it in their client id."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def parse_namesrv_addr(namesrv_addr: str | Sequence[str]) -> list[str]:
    """``"a:9876;b:9876"`` (RocketMQ's form, or ``ws://a:9877/``) or a list -> addresses.

    Blanks are dropped; a malformed websocket address raises ValueError saying what is wrong.
    """
    parts = namesrv_addr.split(";") if isinstance(namesrv_addr, str) else list(namesrv_addr)
    addresses = [p.strip() for p in parts if p.strip()]
    if not addresses:
        raise ValueError(
            "namesrv_addr names no registry: give 'host:port[;host:port...]' or 'ws://host:port/'"
        )
    for address in addresses:
        if "://" in address:
            split_websocket_url(address)
    return addresses


def publish_queues(topic: str, route: TopicRouteData, cap: int | None = None) -> list[MessageQueue]:
    """Writable queues of ``route`` on brokers that have a master, as the Java producer builds.

    With an order-topic config the queue list follows it (sheet 8.6). ``cap`` limits the
    queues per broker (the TBW102 fallback uses the producer's defaultTopicQueueNums).
    """
    masters = {b.broker_name for b in route.broker_datas if MASTER_ID in b.broker_addrs}
    queues: list[MessageQueue] = []
    if route.order_topic_conf:
        for entry in route.order_topic_conf.split(";"):
            name, _, nums = entry.partition(":")
            if name and nums.isdigit():
                queues.extend(
                    MessageQueue(topic=topic, broker_name=name, queue_id=i)
                    for i in range(int(nums))
                )
        return queues
    for data in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if not data.perm & PERM_WRITE or data.broker_name not in masters:
            continue
        count = data.write_queue_nums if cap is None else min(cap, data.write_queue_nums)
        queues.extend(
            MessageQueue(topic=topic, broker_name=data.broker_name, queue_id=i)
            for i in range(count)
        )
    return queues


def subscribe_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """Readable queues of ``route``, sorted by (broker name, queue id)."""
    queues = [
        MessageQueue(topic=topic, broker_name=data.broker_name, queue_id=i)
        for data in route.queue_datas
        if data.perm & PERM_READ
        for i in range(data.read_queue_nums)
    ]
    return sorted(queues, key=lambda q: (q.broker_name, q.queue_id))


@attrs.frozen
class ClientInstanceStatistics:
    """Route lookups of one instance: every GET_ROUTEINFO_BY_TOPIC asked, and how many of
    them were refreshes after a failure (`ClientInstance.refresh_route_soon`)."""

    route_fetches: int
    route_refreshes_after_failure: int


class BrokerCallTarget(Protocol):
    """A consumer that answers the calls a broker makes to a client (sheet 2.3)."""

    def consumer_ids_changed(self) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED: rebalance soon."""

    def running_info(self, jstack: bool) -> ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO: this consumer's state."""
        ...

    async def consume_directly(
        self, message: MessageExt, broker_name: str | None
    ) -> ConsumeMessageDirectlyResult:
        """CONSUME_MESSAGE_DIRECTLY: hand one message to the listener, say how it went."""
        ...

    def reset_offset(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: restart these queues at these offsets."""


class ClientInstance:
    """Registries, routes, broker addresses and heartbeats shared by producers and consumers."""

    def __init__(
        self,
        namesrv_addr: str | Sequence[str],
        *,
        instance_name: str | None = None,
        timeout: float = 3.0,
        poll_name_server_interval: float = 30.0,
        heartbeat_broker_interval: float = 30.0,
        tls_ca_file: str | None = None,
        tls: bool | None = None,
        tls_cert_file: str = "",
        tls_key_file: str = "",
        access_key: str | None = None,
        secret_key: str | None = None,
        security_token: str | None = None,
        options: ConnectionOptions | None = None,
    ) -> None:
        self.registries = parse_namesrv_addr(namesrv_addr)
        name = instance_name or f"{next(_instance_counter)}"
        self.client_id = f"{local_ip()}@{os.getpid()}#{name}"
        self.timeout = timeout
        self.poll_name_server_interval = poll_name_server_interval
        self.heartbeat_broker_interval = heartbeat_broker_interval
        # Registries named ws:// answer routes with the brokers' ws:// addresses, so the
        # same pool reaches brokers over websocket too; tls_ca_file verifies wss:// peers.
        # tls (implied by tls_ca_file) dials host:port registries and brokers with TLS;
        # tls_cert_file/tls_key_file are the certificate shown to listeners that require one
        # (tlsServerNeedClientAuth).
        # ACL: every request to registries and brokers is signed with the credentials
        # (docs/security.md).
        #: The TLS and ACL settings, however they were given.
        self.options = connection_options(
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
        self.credentials = self.options.credentials()
        self.remoting = RemotingClient(
            tls_ca_file=self.options.tls_ca_file,
            tls=self.options.tls,
            tls_cert_file=self.options.tls_cert_file,
            tls_key_file=self.options.tls_key_file,
            rpc_hook=self.credentials.sign if self.credentials is not None else None,
        )
        self.routes: dict[str, TopicRouteData] = {}
        self.broker_addrs: dict[str, dict[int, str]] = {}
        self.producer_groups: set[str] = set()
        #: Consumer group -> callable giving its ConsumerData for the heartbeat.
        self.consumers: dict[str, Callable[[], ConsumerData]] = {}
        #: Consumer group -> the push consumer that answers the broker's calls for it.
        self.call_targets: dict[str, BrokerCallTarget] = {}
        dispatcher = self.remoting.dispatcher
        dispatcher.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._consumer_ids_changed)
        dispatcher.register(RequestCode.GET_CONSUMER_RUNNING_INFO, self._get_running_info)
        dispatcher.register(RequestCode.CONSUME_MESSAGE_DIRECTLY, self._consume_directly)
        dispatcher.register(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, self._reset_offset)
        #: Requests of this client's producers waiting for their reply (request_reply.py).
        self.replies = ReplyTable(self.client_id)
        dispatcher.register(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, self.replies.receive)
        self._registry_index = 0
        self._task_group: anyio.abc.TaskGroup | None = None
        self._route_locks: dict[str, anyio.Lock] = {}
        #: Topic -> (when the last refresh after a failure started, done when it ended).
        self._soon_refresh: dict[str, tuple[float, anyio.Event]] = {}
        #: Seconds between two refreshes of one topic's route after failures.
        self.route_refresh_min_interval = ROUTE_REFRESH_MIN_INTERVAL
        self._counters = {"route_fetches": 0, "route_refreshes_after_failure": 0}

    async def __aenter__(self) -> ClientInstance:
        await self.remoting.__aenter__()
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        self._task_group.start_soon(self._periodic)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._task_group is not None
        self._task_group.cancel_scope.cancel()
        # The body's own exception is not handed to the task groups, which would wrap it in
        # an ExceptionGroup: it propagates unchanged once they have closed. The remoting
        # client's group is closed even when ours raises (a cancellation from outside), or
        # trio finds a nursery left open and reports its nursery stack corrupted.
        try:
            await self._task_group.__aexit__(None, None, None)
        finally:
            await self.remoting.__aexit__(None, None, None)

    # -- registries and routes ---------------------------------------------------------------

    async def invoke_registry(self, request: RemotingCommand) -> RemotingCommand:
        """Send ``request`` to a registry: round robin, the next one when one does not answer."""
        errors: list[str] = []
        count = len(self.registries)
        start = self._registry_index
        for step in range(count):
            address = self.registries[(start + step) % count]
            try:
                response = await self.remoting.invoke(address, request, self.timeout)
            except RemotingError as exc:
                errors.append(f"{address}: {exc.remark}")
                self.remoting.close(address)
                continue
            self._registry_index = (start + step + 1) % count
            return response
        raise MQClientError(ResponseCode.SYSTEM_ERROR, "no registry answered: " + "; ".join(errors))

    async def fetch_route(self, topic: str) -> TopicRouteData | None:
        """Ask a registry for ``topic``'s route; None when the registry does not know it."""
        self._counters["route_fetches"] += 1
        header = GetRouteInfoRequestHeader(topic=topic, accept_standard_json_only=True)
        request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, encode_header(header))
        response = await self.invoke_registry(request)
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if response.code != ResponseCode.SUCCESS or not response.body:
            raise MQClientError(response.code, f"route of {topic}: {response.remark}")
        return TopicRouteData.from_json(response.body)

    async def update_route(self, topic: str) -> TopicRouteData | None:
        """Refresh ``topic``'s route from a registry and remember its brokers."""
        lock = self._route_locks.setdefault(topic, anyio.Lock())
        async with lock:
            route = await self.fetch_route(topic)
            previous = self.routes.get(topic)
            if route is None:
                self.routes.pop(topic, None)
            else:
                self.routes[topic] = route
            if previous is not None:
                self._forget_unrouted_brokers(previous)
            if route is None:
                return None
            new_broker = False
            for broker in route.broker_datas:
                new_broker |= broker.broker_name not in self.broker_addrs
                self.broker_addrs[broker.broker_name] = dict(broker.broker_addrs)
            if new_broker and self._task_group is not None:
                # A broker seen for the first time learns of our groups now, not in 30 s.
                self._task_group.start_soon(self.send_heartbeat_to_all_brokers)
            return route

    def _forget_unrouted_brokers(self, previous: TopicRouteData) -> None:
        # A broker name that no route names any more (its group has no broker registered: a
        # master gone, no other yet) loses its addresses, so readers and senders look the
        # route up again instead of dialling the address of a broker that has gone.
        named = {b.broker_name for route in self.routes.values() for b in route.broker_datas}
        for broker in previous.broker_datas:
            if broker.broker_name not in named:
                self.broker_addrs.pop(broker.broker_name, None)

    async def refresh_route_soon(self, topic: str) -> TopicRouteData | None:
        """Re-read ``topic``'s route after a failure that may mean its broker's master moved.

        A broker that is gone, or a master that lost its role (controller mode elects another
        and it registers as broker id 0), is found at once rather than at the next poll.
        Concurrent callers share one lookup, and one topic is looked up at most once per
        ``route_refresh_min_interval`` seconds, so a burst of failing sends does not flood
        the registry; within that window the cached route is returned. A registry that does
        not answer raises as `update_route` does.
        """
        now = anyio.current_time()
        last = self._soon_refresh.get(topic)
        if last is not None:
            started, done = last
            if not done.is_set():
                await done.wait()  # a lookup is under way: its answer serves this caller too
                return self.routes.get(topic)
            if now - started < self.route_refresh_min_interval:
                return self.routes.get(topic)
        done = anyio.Event()
        self._soon_refresh[topic] = (now, done)
        self._counters["route_refreshes_after_failure"] += 1
        try:
            return await self.update_route(topic)
        finally:
            done.set()

    def statistics(self) -> ClientInstanceStatistics:
        """A snapshot of this instance's route lookups."""
        return ClientInstanceStatistics(**self._counters)

    async def route(self, topic: str) -> TopicRouteData | None:
        """``topic``'s cached route, fetched on first use."""
        route = self.routes.get(topic)
        if route is None:
            route = await self.update_route(topic)
        return route

    def master_address(self, broker_name: str) -> str | None:
        """The master address of ``broker_name`` as last seen in a route."""
        return self.broker_addrs.get(broker_name, {}).get(MASTER_ID)

    async def find_master(self, queue: MessageQueue) -> str:
        """The master address serving ``queue``, refreshing its topic's route if unknown."""
        address = self.master_address(queue.broker_name)
        if address is None:
            # Rate-limited: while a group has no master (an election under way) every send
            # lands here, and one lookup per interval is enough to see the new master.
            await self.refresh_route_soon(queue.topic)
            address = self.master_address(queue.broker_name)
        if address is None:
            raise MQClientError(
                ResponseCode.SYSTEM_ERROR,
                f"broker {queue.broker_name} has no master in the route of {queue.topic}",
            )
        return address

    def read_address(self, broker_name: str, broker_id: int = MASTER_ID) -> tuple[str, int] | None:
        """Where to read ``broker_name``'s queues: ``(address, broker id)``.

        The asked broker id (a pull answer's suggestWhichBrokerId) when the route lists it,
        else the master, else the lowest-numbered slave, so consumers keep reading from a
        slave while the master is down (RocketMQ's findBrokerAddressInSubscribe).
        """
        addrs = self.broker_addrs.get(broker_name)
        if not addrs:
            return None
        address = addrs.get(broker_id)
        if address is not None:
            return address, broker_id
        first = min(addrs)  # the master (0) when listed
        return addrs[first], first

    async def find_read_address(
        self, queue: MessageQueue, broker_id: int = MASTER_ID
    ) -> tuple[str, int]:
        """`read_address` for ``queue``, refreshing its topic's route if the broker is unknown."""
        found = self.read_address(queue.broker_name, broker_id)
        if found is None:
            await self.refresh_route_soon(queue.topic)
            found = self.read_address(queue.broker_name, broker_id)
        if found is None:
            raise MQClientError(
                ResponseCode.SYSTEM_ERROR,
                f"broker {queue.broker_name} is not in the route of {queue.topic}",
            )
        return found

    async def invoke_for_queue(
        self,
        queue: MessageQueue,
        request: RemotingCommand,
        timeout: float | None = None,
        address: str | None = None,
    ) -> RemotingCommand:
        """Send ``request`` about ``queue`` to ``address`` (by default `find_read_address`'s
        choice: the master, a slave while it is down, so reading and offset bookkeeping go on
        through a master's outage). A failure re-reads the topic's route (`refresh_route_soon`)
        before it propagates: the broker may have moved, gone down or lost its master role."""
        if address is None:
            address, _ = await self.find_read_address(queue)
        try:
            return await self.invoke_broker(address, request, timeout)
        except RemotingError:
            with contextlib.suppress(RemotingError):
                await self.refresh_route_soon(queue.topic)
            raise

    async def queue_request(
        self, queue: MessageQueue, code: int, header: object, timeout: float | None = None
    ) -> RemotingCommand:
        """`invoke_for_queue` of a request built from ``header``; raises unless SUCCESS."""
        request = RemotingCommand.request(code, encode_header(header))
        response = await self.invoke_for_queue(queue, request, timeout)
        if response.code != ResponseCode.SUCCESS:
            raise MQClientError(response.code, f"{queue}: {response.remark}")
        return response

    async def min_offset(self, queue: MessageQueue, timeout: float | None = None) -> int:
        """``queue``'s min offset (GET_MIN_OFFSET)."""
        header = GetMinOffsetRequestHeader(topic=queue.topic, queue_id=queue.queue_id)
        response = await self.queue_request(queue, RequestCode.GET_MIN_OFFSET, header, timeout)
        return decode_header(GetMinOffsetResponseHeader, response.ext_fields).offset

    async def max_offset(self, queue: MessageQueue, timeout: float | None = None) -> int:
        """``queue``'s max offset, the one its next message gets (GET_MAX_OFFSET)."""
        header = GetMaxOffsetRequestHeader(topic=queue.topic, queue_id=queue.queue_id)
        response = await self.queue_request(queue, RequestCode.GET_MAX_OFFSET, header, timeout)
        return decode_header(GetMaxOffsetResponseHeader, response.ext_fields).offset

    async def search_offset(
        self, queue: MessageQueue, timestamp_ms: int, timeout: float | None = None
    ) -> int:
        """The offset of ``queue``'s message stored nearest ``timestamp_ms``."""
        header = SearchOffsetRequestHeader(
            topic=queue.topic, queue_id=queue.queue_id, timestamp=timestamp_ms
        )
        response = await self.queue_request(
            queue, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header, timeout
        )
        return decode_header(SearchOffsetResponseHeader, response.ext_fields).offset

    async def query_consumer_offset(
        self, group: str, queue: MessageQueue, timeout: float | None = None
    ) -> int | None:
        """``group``'s stored offset of ``queue`` (QUERY_CONSUMER_OFFSET); None if it has none."""
        header = QueryConsumerOffsetRequestHeader(
            consumer_group=group, topic=queue.topic, queue_id=queue.queue_id
        )
        request = RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, encode_header(header))
        response = await self.invoke_for_queue(queue, request, timeout)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        if response.code != ResponseCode.SUCCESS:
            raise MQClientError(response.code, f"offset of {queue}: {response.remark}")
        return decode_header(QueryConsumerOffsetResponseHeader, response.ext_fields).offset

    def pop_client(self) -> PopClient:
        """RocketMQ 5's pop codes over this instance's connections (client.pop)."""
        return PopClient(self)

    async def invoke_broker(
        self, address: str, request: RemotingCommand, timeout: float | None = None
    ) -> RemotingCommand:
        """Send ``request`` to the broker at ``address`` and return its response."""
        return await self.remoting.invoke(address, request, timeout or self.timeout)

    async def check_client_in_broker(self, group: str, subscription: SubscriptionData) -> None:
        """CHECK_CLIENT_CONFIG of a subscription not by tag at a broker of its topic, as Java's
        consumers ask before they start: `MQClientError` with the broker's code and remark
        when it refuses (its filter is off, or the expression does not parse). Tag
        subscriptions, and topics without a route yet, are not asked about."""
        if is_tag_type(subscription.expression_type):
            return
        route = await self.route(subscription.topic)
        addresses = [
            broker.broker_addrs.get(MASTER_ID) or next(iter(broker.broker_addrs.values()))
            for broker in (route.broker_datas if route is not None else [])
            if broker.broker_addrs
        ]
        if not addresses:
            return
        # One broker of the topic speaks for its cluster, as in Java.
        address = addresses[0]
        body = CheckClientRequestBody(
            client_id=self.client_id, group=group, subscription_data=subscription
        )
        request = RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, body=body.to_json())
        response = await self.invoke_broker(address, request)
        if response.code != ResponseCode.SUCCESS:
            raise MQClientError(
                response.code,
                f"broker {address} refuses the {subscription.expression_type} subscription "
                f"{subscription.sub_string!r} of {group} to {subscription.topic}: "
                f"{response.remark}",
            )

    # -- heartbeats ---------------------------------------------------------------------------

    def heartbeat_data(self) -> HeartbeatData:
        """The HEART_BEAT body for every registered producer and consumer group."""
        return HeartbeatData(
            client_id=self.client_id,
            producer_data_set=[ProducerData(group_name=g) for g in sorted(self.producer_groups)],
            consumer_data_set=[data() for _, data in sorted(self.consumers.items())],
        )

    async def send_heartbeat_to_all_brokers(self) -> None:
        """HEART_BEAT to every known master, and to slaves too when a consumer group is
        registered (as RocketMQ's clients do: a consumer that turns to a slave when its
        master is down finds its group's members there); a broker that does not answer is
        logged, not fatal."""
        if not self.producer_groups and not self.consumers:
            return
        body = self.heartbeat_data().to_json()
        targets = [
            (name, address)
            for name, addrs in list(self.broker_addrs.items())
            for broker_id, address in sorted(addrs.items())
            if broker_id == MASTER_ID or self.consumers
        ]
        for name, address in targets:
            request = RemotingCommand.request(RequestCode.HEART_BEAT, body=body)
            try:
                response = await self.invoke_broker(address, request)
            except RemotingError as exc:
                log.warning("heartbeat to %s (%s) failed: %s", name, address, exc)
                continue
            if response.code != ResponseCode.SUCCESS:
                log.warning("heartbeat to %s refused: %s", name, response.remark)

    async def unregister(self, producer_group: str | None, consumer_group: str | None) -> None:
        """UNREGISTER_CLIENT at every known master, for one group that is shutting down."""
        header = UnregisterClientRequestHeader(
            client_id=self.client_id, producer_group=producer_group, consumer_group=consumer_group
        )
        for addrs in list(self.broker_addrs.values()):
            address = addrs.get(MASTER_ID)
            if address is None:
                continue
            request = RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, encode_header(header))
            try:
                await self.invoke_broker(address, request)
            except RemotingError as exc:
                log.info("unregister at %s failed: %s", address, exc)

    # -- calls from brokers (sheet 2.3) ------------------------------------------------------

    def _consumer_ids_changed(self, connection: Connection, request: RemotingCommand) -> None:
        header = decode_header(NotifyConsumerIdsChangedRequestHeader, request.ext_fields)
        target = self.call_targets.get(header.consumer_group)
        if target is not None:
            log.info("consumer ids of group %s changed (%s): rebalancing",
                     header.consumer_group, connection.peer)  # fmt: skip
            target.consumer_ids_changed()

    def _reset_offset(self, connection: Connection, request: RemotingCommand) -> None:
        # Oneway from a broker after an operator's offset reset (resetOffsetByTime).
        header = decode_header(ResetOffsetRequestHeader, request.ext_fields)
        target = self.call_targets.get(header.group)
        if target is None or not request.body:
            return
        try:
            offsets = ResetOffsetBody.from_json(request.body).offset_table
        except BodyError as exc:
            log.warning("offset reset of %s from %s not applied: %s",
                        header.group, connection.peer, exc)  # fmt: skip
            return
        log.info("offsets of %s on %s reset by %s: %s", header.group, header.topic,
                 connection.peer, {q.queue_id: o for q, o in offsets.items()})  # fmt: skip
        target.reset_offset(header.topic, offsets)

    def _get_running_info(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(GetConsumerRunningInfoRequestHeader, request.ext_fields)
        target = self.call_targets.get(header.consumer_group)
        if target is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer Group <{header.consumer_group}> not exist in this consumer",
            )
        info = target.running_info(header.jstack_enable)
        return request.response(body=info.to_json())

    async def _consume_directly(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(ConsumeMessageDirectlyResultRequestHeader, request.ext_fields)
        target = self.call_targets.get(header.consumer_group)
        if target is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer Group <{header.consumer_group}> not exist in this consumer",
            )
        try:
            message = decode_record(request.body or b"")
        except MessageFormatError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad message body: {exc}")
        result = await target.consume_directly(message, header.broker_name)
        return request.response(body=result.to_json())

    async def _periodic(self) -> None:
        next_route = anyio.current_time() + self.poll_name_server_interval
        next_heartbeat = anyio.current_time() + self.heartbeat_broker_interval
        while True:
            await anyio.sleep(max(0.0, min(next_route, next_heartbeat) - anyio.current_time()))
            now = anyio.current_time()
            if now >= next_route:
                next_route = now + self.poll_name_server_interval
                for topic in list(self.routes):
                    try:
                        await self.update_route(topic)
                    except RemotingError as exc:
                        log.warning("route refresh of %s failed: %s", topic, exc)
            if now >= next_heartbeat:
                next_heartbeat = now + self.heartbeat_broker_interval
                await self.send_heartbeat_to_all_brokers()
