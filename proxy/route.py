"""QueryRoute: a topic's queues from the registry, each reached through this proxy.

A 5.x client sends every call for a queue to its broker's endpoints; the proxy names itself
there (the access point the client used, else its advertised address), so the clients never
dial a broker. Queue ids and permissions follow the brokers' queue data as RocketMQ's proxy
lays them out: the first min(read, write) queues READ_WRITE, then read-only or write-only.

Which message types a queue accepts comes from the topic's ``message.type`` attribute,
asked of a broker with GET_TOPIC_CONFIG (`topic_message_types`, the one place that asks); a
broker that does not serve that code, or a topic without the attribute, accepts every type
(RocketMQ's MIXED).
"""

from __future__ import annotations

import logging
import time

import orjson

from client.instance import MASTER_ID
from protocol.bodies import PERM_READ, PERM_WRITE, TopicRouteData
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
from protocol.headers import GetTopicConfigRequestHeader, encode_header
from proxy._pb.apache.rocketmq.v2 import definition_pb2 as pb
from proxy._pb.apache.rocketmq.v2 import service_pb2 as spb
from proxy.runtime import Context, ProxyRuntime, client_id
from proxy.status import Code, ProxyError, ok

__all__ = [
    "MIXED",
    "RouteService",
    "message_queues",
    "topic_message_types",
    "validate_topic",
]

log = logging.getLogger("boltmq.proxy.route")

#: The types a topic of type MIXED (or of unknown type) accepts.
MIXED: tuple[pb.MessageType, ...] = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
_TYPES_BY_NAME: dict[str, tuple[pb.MessageType, ...]] = {
    "NORMAL": (pb.NORMAL,),
    "FIFO": (pb.FIFO,),
    "DELAY": (pb.DELAY,),
    "TRANSACTION": (pb.TRANSACTION,),
    "MIXED": MIXED,
}
#: How long a topic's message types are kept before a broker is asked again (seconds).
TYPES_TTL = 30.0
#: RocketMQ's limits on a topic name.
_TOPIC_MAX_BYTES = 127


class RouteService:
    """QueryRoute, and the topic lookups SendMessage shares."""

    def __init__(self, runtime: ProxyRuntime) -> None:
        self.runtime = runtime
        self._types: dict[str, tuple[float, tuple[pb.MessageType, ...]]] = {}

    async def query_route(
        self, request: spb.QueryRouteRequest, context: Context
    ) -> spb.QueryRouteResponse:
        """The topic's queues, or TOPIC_NOT_FOUND."""
        try:
            client_id(context)
            topic = validate_topic(request.topic.name)
            route = await self.route(topic)
            types = await self.message_types(topic, route)
        except ProxyError as exc:
            return spb.QueryRouteResponse(status=exc.status())
        endpoints = self.endpoints(request.endpoints)
        queues = message_queues(topic, route, endpoints, types, request.topic)
        return spb.QueryRouteResponse(status=ok(), message_queues=queues)

    async def route(self, topic: str) -> TopicRouteData:
        """``topic``'s route (cached by the client core, refreshed every 30 s)."""
        try:
            route = await self.runtime.instance.route(topic)
        except RemotingError as exc:
            raise ProxyError(Code.INTERNAL_SERVER_ERROR, f"route of {topic}: {exc}") from exc
        if route is None or not route.queue_datas:
            raise ProxyError(Code.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
        return route

    async def message_types(self, topic: str, route: TopicRouteData) -> tuple[pb.MessageType, ...]:
        """The types ``topic`` accepts, cached for `TYPES_TTL` seconds."""
        now = time.monotonic()
        cached = self._types.get(topic)
        if cached is not None and cached[0] > now:
            return cached[1]
        types = await topic_message_types(self.runtime, topic, route)
        self._types[topic] = (now + TYPES_TTL, types)
        return types

    def endpoints(self, given: pb.Endpoints) -> pb.Endpoints:
        """The endpoints clients reach the brokers at: the access point they used, or ours."""
        if given.addresses:
            return given
        host, port = self.runtime.advertised
        scheme = pb.IPv6 if ":" in host else pb.IPv4
        if not host.replace(".", "").isdigit() and ":" not in host:
            scheme = pb.DOMAIN_NAME
        return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=port)])


def validate_topic(name: str) -> str:
    """``name`` if it is a usable topic name; `ProxyError` ILLEGAL_TOPIC otherwise."""
    if not name or not name.strip():
        raise ProxyError(Code.ILLEGAL_TOPIC, "topic name is empty")
    if len(name.encode()) > _TOPIC_MAX_BYTES:
        raise ProxyError(
            Code.ILLEGAL_TOPIC, f"topic name {name[:40]!r}... exceeds {_TOPIC_MAX_BYTES} bytes"
        )
    if not all(c.isascii() and (c.isalnum() or c in "%|-_") for c in name):
        raise ProxyError(
            Code.ILLEGAL_TOPIC,
            f"topic name {name!r} may hold only letters, digits and the characters %|-_",
        )
    return name


def message_queues(
    topic: str,
    route: TopicRouteData,
    endpoints: pb.Endpoints,
    types: tuple[pb.MessageType, ...],
    resource: pb.Resource | None = None,
) -> list[pb.MessageQueue]:
    """The v2 queues of ``route``: on brokers with a master, all reached at ``endpoints``."""
    masters = {b.broker_name for b in route.broker_datas if MASTER_ID in b.broker_addrs}
    topic_resource = pb.Resource(
        name=topic, resource_namespace=resource.resource_namespace if resource else ""
    )
    queues: list[pb.MessageQueue] = []
    for data in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if data.broker_name not in masters:
            continue
        broker = pb.Broker(name=data.broker_name, id=MASTER_ID, endpoints=endpoints)
        readable, writable = bool(data.perm & PERM_READ), bool(data.perm & PERM_WRITE)
        read = data.read_queue_nums if readable else 0
        write = data.write_queue_nums if writable else 0
        both = min(read, write)
        layout = [(both, pb.READ_WRITE), (read - both, pb.READ), (write - both, pb.WRITE)]
        queue_id = 0
        for count, permission in layout:
            for _ in range(count):
                queues.append(
                    pb.MessageQueue(
                        topic=topic_resource,
                        id=queue_id,
                        permission=permission,
                        broker=broker,
                        accept_message_types=types,
                    )
                )
                queue_id += 1
    return queues


async def topic_message_types(
    runtime: ProxyRuntime, topic: str, route: TopicRouteData
) -> tuple[pb.MessageType, ...]:
    """The message types ``topic`` accepts, from its ``message.type`` attribute.

    Asks the first master of the route with GET_TOPIC_CONFIG; MIXED (every type) when no
    broker answers that code, the answer has no such attribute, or its value is unknown.
    """
    for broker in route.broker_datas:
        address = broker.broker_addrs.get(MASTER_ID)
        if address is None:
            continue
        request = RemotingCommand.request(
            RequestCode.GET_TOPIC_CONFIG, encode_header(GetTopicConfigRequestHeader(topic=topic))
        )
        try:
            response = await runtime.instance.invoke_broker(address, request)
        except RemotingError as exc:
            log.debug("GET_TOPIC_CONFIG of %s at %s failed: %s", topic, address, exc)
            continue
        if response.code != ResponseCode.SUCCESS or not response.body:
            return MIXED
        return _types_of(topic, bytes(response.body))
    return MIXED


def _types_of(topic: str, body: bytes) -> tuple[pb.MessageType, ...]:
    try:
        config = orjson.loads(body)
    except orjson.JSONDecodeError:
        log.warning("GET_TOPIC_CONFIG of %s answered a body that is not JSON", topic)
        return MIXED
    # RocketMQ answers the config itself or wrapped as {"topicConfig": {...}, ...}.
    if isinstance(config, dict) and isinstance(config.get("topicConfig"), dict):
        config = config["topicConfig"]
    attributes = config.get("attributes") if isinstance(config, dict) else None
    if not isinstance(attributes, dict):
        return MIXED
    value = attributes.get("message.type") or attributes.get("+message.type")
    return _TYPES_BY_NAME.get(str(value).upper(), MIXED) if value else MIXED
