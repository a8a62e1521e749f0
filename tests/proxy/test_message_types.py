"""A topic's RocketMQ 5 ``message.type`` attribute, set as mqadmin's ``updateTopic -a`` sets
it, is what the proxy's QueryRoute says the topic's queues accept (MIXED when unset), so an
official client refuses to send a FIFO message to a NORMAL topic before it reaches a broker.
"""

from __future__ import annotations

import uuid

import grpc
import pytest

from client import Admin, ClientInstance
from tests.client.helpers import BoltProcess, wait_for_route

from .helpers import V2Stub, pb, running_proxy, spb

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

EVERY_TYPE = {pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION}


@pytest.fixture
def anyio_backend() -> str:
    """grpc.aio runs on asyncio only."""
    return "asyncio"


async def test_route_types_follow_the_topic_attribute(proxy_cluster: BoltProcess) -> None:
    namesrv = proxy_cluster.registry
    topics = {kind: f"Typed{kind}_{uuid.uuid4().hex[:8]}" for kind in ("FIFO", "NORMAL", "none")}
    async with Admin(namesrv_addr=namesrv) as admin:
        for kind, topic in topics.items():
            attributes = None if kind == "none" else f"+message.type={kind}"
            await admin.create_topic(topic, queue_nums=2, attributes=attributes)
    async with ClientInstance(namesrv) as instance:
        for topic in topics.values():
            await wait_for_route(instance, topic)
    async with (
        running_proxy(namesrv) as proxy,
        grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}") as channel,
    ):
        stub = V2Stub(channel)
        accepted = {}
        for kind, topic in topics.items():
            answer = await stub.unary(
                "QueryRoute", spb.QueryRouteRequest(topic=pb.Resource(name=topic))
            )
            assert answer.status.code == pb.OK, answer.status
            accepted[kind] = {t for q in answer.message_queues for t in q.accept_message_types}
    assert accepted == {"FIFO": {pb.FIFO}, "NORMAL": {pb.NORMAL}, "none": EVERY_TYPE}
