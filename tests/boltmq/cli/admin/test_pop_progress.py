"""consumerProgress of a group that pops (RocketMQ 5): its queues with the messages in flight,
and a second block of its popped, acked, in-flight, retried and dead-lettered figures."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from protocol import RemotingClient, ResponseCode
from tests.actors.broker.delays import send
from tests.actors.broker.pop_helpers import ack_request, pop
from tests.boltmq.cli.admin.helpers import admin_json, make_topic, run_admin
from tests.support.remoting import call


def test_progress_of_a_pop_group_shows_in_flight_and_its_figures(
    cluster: Any, unique: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, group = unique("PopProgT"), unique("CG_popprog")
    make_topic(cluster.namesrv, topic, 1)

    async def traffic() -> None:
        with trio.fail_after(30):
            async with RemotingClient() as client:
                for i in range(3):
                    await send(client, cluster.broker, topic, f"m{i}".encode(), queue_id=0)
                popped = await pop(client, cluster.broker, topic, group, invisible_ms=60_000)
                assert len(popped) == 3
                answer = await call(client, cluster.broker, ack_request(topic, popped[0], group))
                assert answer.code == ResponseCode.SUCCESS, answer.remark

    trio.run(traffic)
    document = admin_json(capsys, cluster.namesrv, "consumerProgress", "-g", group, "-t", topic)
    [queue] = [q for q in document["queues"] if q["topic"] == topic]
    assert (queue["brokerOffset"], queue["consumerOffset"], queue["inFlight"]) == (3, 3, 2)
    assert document["pop"] == [
        {"topic": topic, "popped": 3, "acked": 1, "inFlight": 2, "retried": 0, "deadLettered": 0}
    ]
    code, out, _ = run_admin(capsys, cluster.namesrv, "consumerProgress", "-g", group)
    assert code == 0
    for title in ("In Flight", "Popped", "Acked", "Retried", "DLQ"):
        assert title in out
