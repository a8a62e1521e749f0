"""Telemetry, Heartbeat and NotifyClientTermination: the clients the proxy stands in for.

A 5.x client opens a telemetry stream and sends its `Settings` (what it publishes to, or its
group and subscriptions); the proxy answers with the full settings the client runs by
(`merged_settings`) and keeps the stream in a `ClientSession` for commands from the server
side. The session lives as long as the stream: nothing is stored, and a client whose stream
broke opens another and sends its settings again.

Heartbeat registers the client with every master broker through remoting HEART_BEAT, under
the client's own id: a producer under each topic it publishes to (v2 producers have no group;
the topic stands for it, as in RocketMQ's proxy), a consumer under its group with
consumeType CONSUME_POP and messageModel CLUSTERING. NotifyClientTermination unregisters it.

When a broker asks about an unresolved half message (CHECK_TRANSACTION_STATE, sent to the
proxy's connection because the proxy heartbeats for the topic's producers), the proxy pushes a
RecoverOrphanedTransactionCommand to a producer of that topic on its telemetry stream; the
client's EndTransaction (source SERVER_CHECK) comes back through SendService.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import attrs
from google.protobuf import duration_pb2, timestamp_pb2

from client.instance import MASTER_ID
from client.message import MQClientError
from protocol.bodies import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    HeartbeatData,
    MessageModel,
    ProducerData,
    SubscriptionData,
    SubscriptionGroupConfig,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.connection import Connection
from protocol.headers import (
    CheckTransactionStateRequestHeader,
    UnregisterClientRequestHeader,
    decode_header,
    encode_header,
)
from protocol.message import (
    MessageConst,
    MessageExt,
    MessageFormatError,
    decode_record,
    tag_hash_code,
)
from protocol.names import TRANS_HALF_TOPIC
from proxy._pb.apache.rocketmq.v2 import definition_pb2 as pb
from proxy._pb.apache.rocketmq.v2 import service_pb2 as spb
from proxy.runtime import Context, ProxyRuntime, client_id
from proxy.send import TransactionHandle
from proxy.status import Code, ProxyError, ok, status

__all__ = ["ClientSession", "TelemetryService", "merged_settings", "to_v2_message"]

log = logging.getLogger("boltmq.proxy.telemetry")

#: The producer's retry policy the proxy hands out (RocketMQ's proxy defaults).
PRODUCER_MAX_ATTEMPTS = 3
#: A consumer's deliveries before a message goes to the dead-letter queue (16 retries).
CONSUMER_MAX_ATTEMPTS = 17

#: (group, one of its topics) -> the group's config at a broker of that topic, None if none.
GroupConfigLookup = Callable[[str, str], Awaitable[SubscriptionGroupConfig | None]]
#: The retry delays of a non-FIFO consumer: RocketMQ's delay levels 1s .. 2h.
RETRY_DELAYS = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800,
                3600, 7200)  # fmt: skip
RECEIVE_BATCH_SIZE = 32
LONG_POLLING_TIMEOUT = 20
#: How many server commands may wait for one client's stream before older ones are dropped.
OUTBOX_SIZE = 1024


@attrs.define(eq=False)
class ClientSession:
    """One client's telemetry stream: its settings and the commands waiting to go out."""

    client_id: str
    settings: pb.Settings = attrs.field(factory=pb.Settings)
    outbox: asyncio.Queue[spb.TelemetryCommand] = attrs.field(
        factory=lambda: asyncio.Queue(OUTBOX_SIZE)
    )

    def topics(self) -> list[str]:
        """The topics the client publishes to (a producer) or subscribes to (a consumer)."""
        if self.settings.HasField("publishing"):
            return [t.name for t in self.settings.publishing.topics]
        if self.settings.HasField("subscription"):
            return [e.topic.name for e in self.settings.subscription.subscriptions]
        return []

    def push(self, command: spb.TelemetryCommand) -> bool:
        """Queue a command for the client; False when its stream is backed up."""
        try:
            self.outbox.put_nowait(command)
        except asyncio.QueueFull:
            return False
        return True


class TelemetryService:
    """The live client sessions, heartbeats to the brokers, and transaction check-backs."""

    def __init__(
        self, runtime: ProxyRuntime, group_config: GroupConfigLookup | None = None
    ) -> None:
        self.runtime = runtime
        #: A consumer group's config, which decides its FIFO mode and attempts (as RocketMQ's
        #: proxy takes them from the group, not from the client).
        self.group_config = group_config
        #: Client id -> its sessions (a client opens one stream per endpoint it uses).
        self.sessions: dict[str, list[ClientSession]] = {}
        runtime.instance.remoting.dispatcher.register(
            RequestCode.CHECK_TRANSACTION_STATE, self._check_transaction_state
        )

    # -- RPCs --------------------------------------------------------------------------------

    async def telemetry(
        self, requests: AsyncIterator[spb.TelemetryCommand], context: Context
    ) -> AsyncIterator[spb.TelemetryCommand]:
        """The telemetry stream: settings in, merged settings and server commands out."""
        try:
            cid = client_id(context)
        except ProxyError as exc:
            yield spb.TelemetryCommand(status=exc.status())
            return
        session = ClientSession(cid)
        self.sessions.setdefault(cid, []).append(session)
        reader = asyncio.ensure_future(self._read(session, requests))
        getter: asyncio.Future[spb.TelemetryCommand] | None = None
        try:
            while True:
                getter = asyncio.ensure_future(session.outbox.get())
                done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield getter.result()
                    continue
                break  # the client closed its side: send what is queued, then end
            while not session.outbox.empty():
                yield session.outbox.get_nowait()
        finally:
            for task in (getter, reader):
                if task is not None:
                    task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            if reader.done() and not reader.cancelled() and reader.exception() is not None:
                log.warning("telemetry stream of client %s ended on an error: %r",
                            cid, reader.exception())  # fmt: skip
            sessions = self.sessions.get(cid, [])
            if session in sessions:
                sessions.remove(session)
            if not sessions:
                self.sessions.pop(cid, None)

    async def heartbeat(
        self, request: spb.HeartbeatRequest, context: Context
    ) -> spb.HeartbeatResponse:
        """Register the client's producer topics or consumer group with every master."""
        try:
            cid = client_id(context)
            data = await self._heartbeat_data(cid, request.group if request.HasField("group")
                                              else None, request.client_type)  # fmt: skip
        except ProxyError as exc:
            return spb.HeartbeatResponse(status=exc.status())
        if data.producer_data_set or data.consumer_data_set:
            await self._to_masters(RequestCode.HEART_BEAT, None, data.to_json(), "heartbeat")
        return spb.HeartbeatResponse(status=ok())

    async def notify_client_termination(
        self, request: spb.NotifyClientTerminationRequest, context: Context
    ) -> spb.NotifyClientTerminationResponse:
        """UNREGISTER_CLIENT at every master for the client's groups no other client uses."""
        try:
            cid = client_id(context)
        except ProxyError as exc:
            return spb.NotifyClientTerminationResponse(status=exc.status())
        producer_groups = set()
        consumer_group = request.group.name if request.HasField("group") else ""
        for session in self.sessions.get(cid, []):
            if session.settings.HasField("publishing"):
                producer_groups.update(session.topics())
            elif session.settings.subscription.group.name:
                consumer_group = consumer_group or session.settings.subscription.group.name
        # The brokers know the proxy's one connection per group, not each client behind it:
        # a group another live client of this proxy still uses stays registered.
        others = [s for c, ss in self.sessions.items() if c != cid for s in ss]
        producer_groups -= {t for s in others if s.settings.HasField("publishing")
                            for t in s.topics()}  # fmt: skip
        if any(s.settings.subscription.group.name == consumer_group for s in others):
            consumer_group = ""
        headers = [
            UnregisterClientRequestHeader(client_id=cid, producer_group=group)
            for group in sorted(producer_groups)
        ]
        if consumer_group:
            headers.append(
                UnregisterClientRequestHeader(client_id=cid, consumer_group=consumer_group)
            )
        for header in headers:
            await self._to_masters(
                RequestCode.UNREGISTER_CLIENT, encode_header(header), None, "unregister"
            )
        return spb.NotifyClientTerminationResponse(status=ok())

    def producer_sessions(self, topic: str) -> list[ClientSession]:
        """Live sessions of producers that publish to ``topic``."""
        return [
            session
            for sessions in self.sessions.values()
            for session in sessions
            if session.settings.HasField("publishing") and topic in session.topics()
        ]

    # -- internals ---------------------------------------------------------------------------

    async def _subscription_group(self, settings: pb.Settings) -> SubscriptionGroupConfig | None:
        """The config of the consumer group ``settings`` name (None: a producer's, or unknown)."""
        if self.group_config is None or not settings.HasField("subscription"):
            return None
        subscription = settings.subscription
        topics = [entry.topic.name for entry in subscription.subscriptions]
        if not subscription.group.name or not topics:
            return None
        try:
            return await self.group_config(subscription.group.name, topics[0])
        except (RemotingError, MQClientError) as exc:
            log.info("config of group %s not read (%s): the client's own settings stand",
                     subscription.group.name, exc)  # fmt: skip
            return None

    async def _read(
        self, session: ClientSession, requests: AsyncIterator[spb.TelemetryCommand]
    ) -> None:
        async for command in requests:
            kind = command.WhichOneof("command")
            if kind == "settings":
                session.settings = command.settings
                group = await self._subscription_group(command.settings)
                merged = merged_settings(command.settings, self.runtime, group)
                session.push(spb.TelemetryCommand(status=ok(), settings=merged))
                # Register at once, so a broker's check-back finds the producer before its
                # first periodic heartbeat.
                await self._heartbeat_session(session)
            elif kind in ("thread_stack_trace", "verify_message_result"):
                pass  # answers to commands this proxy never sends
            else:
                session.push(
                    spb.TelemetryCommand(
                        status=status(Code.UNRECOGNIZED_CLIENT_TYPE,
                                      f"telemetry command {kind!r} is not understood here")
                    )
                )  # fmt: skip

    async def _heartbeat_session(self, session: ClientSession) -> None:
        settings = session.settings
        group = settings.subscription.group if settings.HasField("subscription") else None
        try:
            data = await self._heartbeat_data(session.client_id, group, settings.client_type)
        except ProxyError as exc:
            log.info("client %s not registered with the brokers: %s", session.client_id, exc)
            return
        if data.producer_data_set or data.consumer_data_set:
            await self._to_masters(RequestCode.HEART_BEAT, None, data.to_json(), "heartbeat")

    async def _heartbeat_data(
        self, cid: str, group: pb.Resource | None, client_type: int
    ) -> HeartbeatData:
        sessions = self.sessions.get(cid, [])
        settings = next((s.settings for s in reversed(sessions) if s.settings.ByteSize()), None)
        if client_type == pb.PRODUCER or (settings is not None and
                                           settings.HasField("publishing")):  # fmt: skip
            topics = sorted({t for s in sessions for t in s.topics()})
            await self._load_routes(topics)
            return HeartbeatData(
                client_id=cid, producer_data_set=[ProducerData(group_name=t) for t in topics]
            )
        if client_type in (pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER) or (
            settings is not None and settings.HasField("subscription")
        ):
            name = group.name if group is not None and group.name else ""
            if not name and settings is not None:
                name = settings.subscription.group.name
            if not name:
                raise ProxyError(Code.ILLEGAL_CONSUMER_GROUP, "a consumer must name its group")
            entries = settings.subscription.subscriptions if settings is not None else []
            subscriptions = [_subscription(entry) for entry in entries]
            await self._load_routes([s.topic for s in subscriptions])
            consumer = ConsumerData(
                group_name=name,
                consume_type=ConsumeType.CONSUME_POP,
                message_model=MessageModel.CLUSTERING,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                subscription_data_set=subscriptions,
            )
            return HeartbeatData(client_id=cid, consumer_data_set=[consumer])
        if client_type == pb.CLIENT_TYPE_UNSPECIFIED and settings is None:
            return HeartbeatData(client_id=cid)  # settings not seen yet: nothing to register
        raise ProxyError(
            Code.UNRECOGNIZED_CLIENT_TYPE, f"client type {client_type} is not served by this proxy"
        )

    async def _load_routes(self, topics: list[str]) -> None:
        # The brokers to heartbeat are those of the client's topics: learn them first.
        for topic in topics:
            try:
                await self.runtime.instance.route(topic)
            except RemotingError as exc:
                log.warning("route of %s not loaded for a heartbeat: %s", topic, exc)

    async def _to_masters(
        self, code: int, fields: dict[str, str] | None, body: bytes | None, what: str
    ) -> None:
        instance = self.runtime.instance
        for name, addrs in list(instance.broker_addrs.items()):
            address = addrs.get(MASTER_ID)
            if address is None:
                continue
            request = RemotingCommand.request(code, fields, body)
            try:
                response = await instance.invoke_broker(address, request)
            except RemotingError as exc:
                log.warning("%s to broker %s (%s) failed: %s", what, name, address, exc)
                continue
            if response.code != ResponseCode.SUCCESS:
                log.warning("%s refused by broker %s: %s", what, name, response.remark)

    def _check_transaction_state(self, connection: Connection, request: RemotingCommand) -> None:
        header = decode_header(CheckTransactionStateRequestHeader, request.ext_fields)
        try:
            half = decode_record(request.body or b"")
        except MessageFormatError as exc:
            log.warning("CHECK_TRANSACTION_STATE from %s with an undecodable message: %s",
                        connection.peer, exc)  # fmt: skip
            return
        topic = half.properties.get(MessageConst.REAL_TOPIC) if half.topic == TRANS_HALF_TOPIC \
            else half.topic  # fmt: skip
        topic = topic or half.properties.get(MessageConst.PGROUP, "")
        broker_name = self._broker_name(connection.peer)
        sessions = self.producer_sessions(topic)
        if broker_name is None or not sessions:
            log.info("check of half message %s of topic %s from %s: no producer of the topic is "
                     "connected; the broker will ask again", half.msg_id, topic,
                     connection.peer)  # fmt: skip
            return
        handle = TransactionHandle(
            broker_name=broker_name,
            commit_log_offset=header.commit_log_offset,
            queue_offset=header.tran_state_table_offset,
            transaction_id=header.transaction_id or half.msg_id,
        )
        command = spb.TelemetryCommand(
            status=ok(),
            recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                message=to_v2_message(half, topic), transaction_id=handle.encode()
            ),
        )
        # One producer of the topic answers, as a broker asks one producer of a group.
        session = sessions[hash(half.msg_id) % len(sessions)]
        if not session.push(command):
            log.warning("check of half message %s not pushed: client %s's telemetry stream is "
                        "backed up", half.msg_id, session.client_id)  # fmt: skip

    def _broker_name(self, peer: str) -> str | None:
        for name, addrs in self.runtime.instance.broker_addrs.items():
            if peer in addrs.values():
                return name
        return None


def merged_settings(
    given: pb.Settings, runtime: ProxyRuntime, group: SubscriptionGroupConfig | None = None
) -> pb.Settings:
    """The settings a client runs by: its own, completed and bounded by the proxy's; a
    consumer's FIFO mode and attempts come from its ``group``'s config when known."""
    settings = pb.Settings()
    settings.CopyFrom(given)
    config = runtime.config
    if not settings.HasField("request_timeout"):
        settings.request_timeout.CopyFrom(_duration(config.request_timeout))
    settings.metric.CopyFrom(pb.Metric(on=False))
    if given.HasField("publishing"):
        settings.backoff_policy.CopyFrom(
            pb.RetryPolicy(
                max_attempts=PRODUCER_MAX_ATTEMPTS,
                exponential_backoff=pb.ExponentialBackoff(
                    initial=_duration(0.01), max=_duration(1.0), multiplier=2.0
                ),
            )
        )
        settings.publishing.max_body_size = config.max_message_size
        settings.publishing.validate_message_type = True
    elif given.HasField("subscription"):
        subscription = settings.subscription
        if group is not None and group.consume_message_orderly is not None:
            fifo = group.consume_message_orderly
        else:
            fifo = subscription.fifo if subscription.HasField("fifo") else False
        subscription.fifo = fifo
        attempts = CONSUMER_MAX_ATTEMPTS if group is None else group.retry_max_times + 1
        if not subscription.HasField("receive_batch_size"):
            subscription.receive_batch_size = RECEIVE_BATCH_SIZE
        if not subscription.HasField("long_polling_timeout"):
            subscription.long_polling_timeout.CopyFrom(_duration(LONG_POLLING_TIMEOUT))
        if fifo:
            policy = pb.RetryPolicy(
                max_attempts=attempts,
                exponential_backoff=pb.ExponentialBackoff(
                    initial=_duration(1.0), max=_duration(1.0), multiplier=1.0
                ),
            )
        else:
            policy = pb.RetryPolicy(
                max_attempts=attempts,
                customized_backoff=pb.CustomizedBackoff(next=[_duration(s) for s in RETRY_DELAYS]),
            )
        settings.backoff_policy.CopyFrom(policy)
    return settings


def to_v2_message(message: MessageExt, topic: str) -> pb.Message:
    """A stored message as a v2 Message (body decompressed: IDENTITY encoding)."""
    properties = dict(message.properties)
    system = pb.SystemProperties(
        message_id=properties.get(MessageConst.UNIQ_KEY) or message.offset_msg_id,
        body_encoding=pb.IDENTITY,
        message_type=pb.TRANSACTION if properties.get(MessageConst.TRAN_MSG) == "true"
        else pb.NORMAL,
        born_timestamp=_timestamp(message.born_timestamp),
        born_host=str(message.born_host),
        store_timestamp=_timestamp(message.store_timestamp),
        store_host=str(message.store_host),
        queue_id=message.queue_id,
        queue_offset=message.queue_offset,
    )  # fmt: skip
    tag = properties.get(MessageConst.TAGS)
    if tag:
        system.tag = tag
    keys = properties.get(MessageConst.KEYS)
    if keys:
        system.keys.extend(k for k in keys.split(MessageConst.KEY_SEPARATOR) if k)
    user = {k: v for k, v in properties.items() if k not in _SYSTEM_KEYS}
    return pb.Message(
        topic=pb.Resource(name=topic),
        user_properties=user,
        system_properties=system,
        body=message.decompressed_body(),
    )


# Properties shown in system_properties or of the system's own, not a user's.
_SYSTEM_KEYS = frozenset(
    {value for name, value in vars(MessageConst).items() if name.isupper() and value.strip()}
    | {"__SHARDINGKEY", "TIMER_DELIVER_MS", "TRACE_CONTEXT", "__BORNHOST"}
)


def _subscription(entry: pb.SubscriptionEntry) -> SubscriptionData:
    expression = entry.expression.expression or "*"
    if entry.expression.type == pb.SQL:
        return SubscriptionData(
            topic=entry.topic.name, sub_string=expression, expression_type="SQL92"
        )
    tags = sorted({t.strip() for t in expression.split("||") if t.strip()} - {"*"})
    return SubscriptionData(
        topic=entry.topic.name,
        sub_string=expression,
        tags_set=tags,
        code_set=[tag_hash_code(t) for t in tags],
    )


def _duration(seconds: float) -> duration_pb2.Duration:
    whole = int(seconds)
    return duration_pb2.Duration(seconds=whole, nanos=round((seconds - whole) * 1e9))


def _timestamp(millis: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=millis // 1000, nanos=(millis % 1000) * 1_000_000)
