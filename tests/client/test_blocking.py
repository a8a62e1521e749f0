"""The blocking facades from plain threads (the way scripts and Spark executors use them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from client import BlockingProducer, BlockingPullConsumer, Message
from protocol.bodies import ConsumeFromWhere

pytestmark = pytest.mark.timeout(60)
Unique = Callable[[str], str]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_blocking_producer_and_pull_consumer(cluster: Any, unique: Unique, backend: str) -> None:
    topic, group = unique("BlockingTopic"), unique("CG")
    with BlockingProducer(unique("PG"), namesrv_addr=cluster.namesrv, backend=backend) as p:
        single = p.send(Message(topic, b"one", tags="T"))
        batch = p.send_batch([Message(topic, f"b{i}".encode()) for i in range(3)])
        p.send_oneway(Message(topic, b"oneway"))
        ordered = p.send_orderly(Message(topic, b"ordered"), "key")
    assert single.queue_offset >= 0 and len(batch.msg_id.split(",")) == 3
    with BlockingPullConsumer(group, namesrv_addr=cluster.namesrv, backend=backend,
                              consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                              auto_commit=False) as consumer:  # fmt: skip
        queues = consumer.subscribe(topic)
        got: list[bytes] = []
        for _ in range(50):  # each poll waits up to 1 s at the broker
            got.extend(m.body for m in consumer.poll(timeout=1.0))
            if len(got) >= 6:
                break
        assert sorted(got) == sorted([b"one", b"b0", b"b1", b"b2", b"oneway", b"ordered"])
        consumer.commit()
        assert consumer.committed(ordered.queue) is not None
        consumer.seek(queues[0], 0)
    with pytest.raises(RuntimeError):
        consumer.poll(0.1)
