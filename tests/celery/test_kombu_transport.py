"""The kombu transport without Celery: names, URLs, acks and rejects, exchanges, size, purge.

A real cluster process; kombu's blocking API in the test's thread.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import anyio
import pytest
from kombu import Connection, Consumer, Exchange, Producer, Queue
from kombu.message import Message

from boltmq.kombu import NameTooLong, exchange_topic, queue_group, queue_topic
from boltmq.kombu.names import GROUP_MAX, TOPIC_MAX
from boltmq.kombu.settings import settings_from_connection
from client import Admin
from tests.celery.helpers import unique_queue
from tests.client.helpers import ROOT, RunningCluster
from tests.ports import free_port
from tests.support.waiting import wait_until_sync


def test_kombu_names_map_to_valid_distinct_stable_names() -> None:
    pidbox = "celery@worker-1.example.celery.pidbox"
    reply = "6a7d1e3c-0e0b-3c9d-a1f4-1b9a3c2d4e5f.reply.celery.pidbox"
    names = [pidbox, reply, "celeryev.0c7a7d8e-5d7a-4c3e-9e55-3a1f0c2b7d11", "celery"]
    exchanges = ["celery.pidbox", "reply.celery.pidbox", "celeryev", "celery"]
    for exchange in exchanges:
        assert exchange_topic(exchange).replace("-", "").replace("_", "").isalnum()
    for name in names:
        for mapped in (queue_topic(name), queue_group(name)):
            assert mapped.replace("-", "").replace("_", "").isalnum(), mapped
        assert len(queue_topic(name)) <= TOPIC_MAX and len(queue_group(name)) <= GROUP_MAX
        # %RETRY%<group>_<topic> fits RocketMQ's 127 characters.
        assert len("%RETRY%" + queue_group(name) + "_" + queue_topic(name)) <= 127
    assert queue_topic("celery") == "celery" and exchange_topic("celery") == "exchange-celery"
    assert queue_topic(pidbox).startswith("celery-worker-1-example-celery-pidbox_")
    # Names that differ only in replaced characters stay apart; the map is a function.
    assert queue_topic("a.b") != queue_topic("a@b") != queue_topic("a-b")
    assert queue_topic(reply) == queue_topic(reply)
    with pytest.raises(NameTooLong, match=r"at most 71 are allowed"):
        queue_topic("x" * 72)


def test_urls_give_every_registry_tls_and_credentials() -> None:
    settings = settings_from_connection(
        "10.0.0.5", 9876, ["boltmq://10.0.0.6:9877", "10.0.0.7"], "ak", "s%2Fk", None,
        {"visibility_timeout": 30}, tls_scheme=True,
    )  # fmt: skip
    assert settings.namesrv_addr == "10.0.0.5:9876;10.0.0.6:9877;10.0.0.7:9876"
    assert settings.options.tls is True
    assert settings.options.access_key == "ak" and settings.options.secret_key == "s/k"
    assert settings.invisible_ms == 30_000
    with pytest.raises(ValueError, match="visibility_timeout"):
        settings_from_connection("h", None, [], None, None, None,
                                 {"visibility_timeout": "soon"}, tls_scheme=False)  # fmt: skip


@pytest.fixture
def connection(cluster: RunningCluster) -> Iterator[Connection]:
    options = {"visibility_timeout": 60, "pop_wait": 0.3}
    with Connection(f"boltmq://{cluster.registry}", transport_options=options) as conn:
        yield conn


def _receive(connection: Connection, queue: Queue, timeout: float = 10.0) -> Message:
    got: list[Message] = []
    with Consumer(connection, [queue], callbacks=[lambda _body, m: got.append(m)]):
        deadline = time.monotonic() + timeout
        while not got and time.monotonic() < deadline:
            try:
                connection.drain_events(timeout=0.5)
            except TimeoutError:
                pass
    assert got, f"nothing received from {queue.name} in {timeout} s"
    return got[0]


def test_ack_requeue_and_dead_letter(connection: Connection, cluster: RunningCluster) -> None:
    queue = Queue(unique_queue("acks"), durable=True)
    producer = Producer(connection, routing_key=queue.name)
    producer.publish({"n": 1}, declare=[queue])
    first = _receive(connection, queue)
    assert first.payload == {"n": 1} and not first.delivery_info.get("redelivered")
    first.reject(requeue=True)
    # Visible again at once, far inside the 60 s visibility timeout.
    again = _receive(connection, queue, timeout=10)
    assert again.payload == {"n": 1} and again.delivery_info["redelivered"]
    again.reject(requeue=False)  # to %DLQ%<group>
    dlq = "%DLQ%" + queue_group(queue.name)

    async def dead_letters() -> int:
        async with Admin(namesrv_addr=cluster.registry) as admin:
            table = (await admin.topic_stats(dlq)).offset_table
            return sum(o.max_offset for o in table.values())

    wait_until_sync(lambda: anyio.run(dead_letters) == 1, 10, f"one message in {dlq}")
    assert connection.default_channel.queue_declare(queue.name, passive=True).message_count == 0


def test_size_and_purge(connection: Connection) -> None:
    queue = Queue(unique_queue("purge"))
    producer = Producer(connection, routing_key=queue.name)
    for n in range(5):
        producer.publish({"n": n}, declare=[queue])
    channel = connection.default_channel
    assert channel.queue_declare(queue.name, passive=True).message_count == 5
    assert channel.queue_purge(queue.name) == 5
    assert channel.queue_declare(queue.name, passive=True).message_count == 0
    producer.publish({"n": 5})
    assert _receive(connection, queue).payload == {"n": 5}


def test_topic_exchange_routes_by_pattern_across_connections(
    connection: Connection, cluster: RunningCluster
) -> None:
    exchange = Exchange(unique_queue("events"), type="topic")
    tasks = Queue(unique_queue("tasks"), exchange, routing_key="task.#", auto_delete=True)
    workers = Queue(unique_queue("workers"), exchange, routing_key="worker.*", auto_delete=True)
    for bound in (tasks, workers):
        bound(connection.default_channel).declare()
    # Another connection, which knows no binding, publishes: the broker routes.
    with Connection(f"boltmq://{cluster.registry}") as other:
        producer = Producer(other, exchange=exchange)
        producer.publish({"e": "task-sent"}, routing_key="task.sent.now")
        producer.publish({"e": "worker-online"}, routing_key="worker.online")
        producer.publish({"e": "nobody"}, routing_key="other.thing")
    got = _receive(connection, tasks)
    assert got.payload == {"e": "task-sent"}
    got.ack()
    got = _receive(connection, workers)
    assert got.payload == {"e": "worker-online"}
    got.ack()


def test_closing_a_connection_ends_its_loop_thread(cluster: RunningCluster) -> None:
    before = set(threading.enumerate())
    with Connection(f"boltmq://{cluster.registry}") as conn:
        queue = conn.SimpleQueue(unique_queue("close"))
        queue.put({"n": 1})
        queue.get(timeout=10).ack()
        assert set(threading.enumerate()) - before, "the connection runs a loop thread"
        queue.close()
    wait_until_sync(lambda: not set(threading.enumerate()) - before, 10,
                    "the connection's threads to end")  # fmt: skip


def test_the_transport_by_class_path_needs_no_import(cluster: RunningCluster) -> None:
    # Celery's broker_transport names the class; kombu imports it, no alias is needed.
    script = (
        "import sys\n"
        "from celery import Celery\n"
        f"app = Celery(broker='boltmq://{cluster.registry}', "
        "broker_transport='boltmq.kombu:Transport')\n"
        "assert 'boltmq.kombu' not in sys.modules\n"
        "with app.connection_for_write() as connection:\n"
        "    connection.ensure_connection(max_retries=1)\n"
        "    print(connection.transport.driver_type)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "boltmq"


def test_several_registries_in_the_url_all_serve(cluster: RunningCluster) -> None:
    # The first registry of the URL is down: the client asks the next one.
    dead = f"127.0.0.1:{free_port()}"
    with Connection(f"boltmq://{dead};boltmq://{cluster.registry}") as conn:
        queue = conn.SimpleQueue(unique_queue("two-registries"))
        assert conn.transport.bridge.settings.namesrv_addr == f"{dead};{cluster.registry}"
        queue.put({"n": 2})
        message = queue.get(timeout=10)
        assert message.payload == {"n": 2}
        message.ack()
        queue.close()
