"""Shared by the pipeline tests: one Spark session and one BoltMQ cluster for the whole run.

Spark's calls block the test's thread, so the cluster cannot run in the test's event loop: the
launcher runs in a thread of its own (``trio.run``), each node in its own process. The spec
has one registry and two broker groups for the data (broker-a and broker-b, ASYNC_MASTERs),
plus broker-r, whose retention deletes every commit-log file but the one being written, so
that a queue whose min offset is above 0 can be made for real (failOnDataLoss). broker-r
creates no topics on sends, so the other tests' topics never land there.

Every wait polls a condition under a deadline.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import attrs
import pytest
import trio
from pyspark.sql import DataFrame, SparkSession

import boltmq
import pipeline
from boltmq.launcher import RunningCluster
from client import Admin, Message, Producer
from pipeline.source import PUSHDOWN_CONF
from protocol.bodies import MessageQueue
from tests.actors.broker.ha.helpers import free_port_pair
from tests.client.helpers import free_port
from tests.support.waiting import wait_until_sync

T = TypeVar("T")

ORDERS = "PipeOrders"
"""The main read topic: queues on both brokers, some empty, some longer than a pull."""
EVENTS = "PipeEvents"
"""A second topic, on broker-b only, for reads of several topics."""
AGED = "PipeAged"
"""broker-r's one-queue topic whose oldest messages retention deletes."""

# Messages per queue of ORDERS: (broker, queue id) -> count. broker-a/1 stays empty; broker-a/3
# needs two pulls at the default pullBatchSize of 32.
ORDERS_LAYOUT = {
    ("broker-a", 0): 7, ("broker-a", 1): 0, ("broker-a", 2): 12, ("broker-a", 3): 40,
    ("broker-b", 0): 5, ("broker-b", 1): 9, ("broker-b", 2): 1,
}  # fmt: skip
EVENTS_LAYOUT = {("broker-b", 0): 3, ("broker-b", 1): 4}
AGED_MESSAGES = 160
AGED_BODY = 1024  # 160 x ~1.2 KiB records fill three 64 KiB commit-log files and part of a fourth
RETENTION_ROUND = 10.0  # s between a broker's retention rounds (not a broker.conf key)
BIG_BODY = b"big:" + b"0123456789abcdef" * 512  # 8 KiB: the producer compresses it


@attrs.frozen
class Sent:
    """A message the tests sent, where the broker stored it."""

    topic: str
    broker_name: str
    queue_id: int
    queue_offset: int
    msg_id: str
    body: bytes
    keys: str | None
    tags: str | None
    properties: dict[str, str]

    def key(self) -> tuple[str, str, int, int]:
        """Where it is: (topic, broker, queue, offset)."""
        return (self.topic, self.broker_name, self.queue_id, self.queue_offset)


def run(function: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run async client code from a (synchronous) test."""
    return trio.run(function, *args)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` s."""
    wait_until_sync(condition, timeout, what, interval=0.1)


def write_spec(root: Path) -> Path:
    """The test cluster's spec on free loopback ports."""
    registry = free_port_pair()
    ports = {name: free_port_pair() for name in ("broker-a", "broker-b", "broker-r")}
    if len({registry, *ports.values()}) < 4:
        pytest.fail(f"free ports collided: {ports}")
    hours = ";".join(f"{h:02d}" for h in range(24))
    registry_websocket = free_port()
    nodes = "".join(
        f"""
[[broker.{name}.node]]
brokerId = 0
brokerRole = "ASYNC_MASTER"
listenPort = {port}
haListenPort = {port + 1}
websocketListenPort = {free_port()}
"""
        for name, port in ports.items()
    )
    text = f"""
dataDir = "data"
logDir = "logs"
[defaults]
fastPortEnable = false
bindAddress = "127.0.0.1"
mapedFileSizeCommitLog = {1 << 20}
[[registry]]
listenPort = {registry}
websocketListenPort = {registry_websocket}
bindAddress = "127.0.0.1"
{nodes}"""
    # broker-r: 64 KiB files, none kept (fileReservedTime 0, every hour a delete hour), and
    # no topics made by sends.
    text = text.replace(
        f"listenPort = {ports['broker-r']}\n",
        f"listenPort = {ports['broker-r']}\nmapedFileSizeCommitLog = {64 << 10}\n"
        f'fileReservedTime = 0\ndeleteWhen = "{hours}"\nautoCreateTopicEnable = false\n',
    )
    path = root / "cluster.toml"
    path.write_text(text)
    return path


class ClusterThread:
    """`boltmq.launch` of a spec in a thread of its own; `stop` ends it in order."""

    def __init__(self, spec: Path) -> None:
        self.spec = spec
        self.cluster: RunningCluster | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="boltmq-cluster", daemon=True)

    def start(self, timeout: float = 120.0) -> RunningCluster:
        """Start the nodes; the running cluster once every node answers."""
        self._thread.start()
        if not self._ready.wait(timeout):
            pytest.fail(f"the test cluster did not start within {timeout:.0f} s")
        if self._error is not None or self.cluster is None:
            raise RuntimeError("the test cluster did not start") from self._error
        return self.cluster

    def stop(self) -> None:
        """Stop every node (reverse order) and the thread."""
        if self._token is not None and self._stop is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(90)

    def _main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:
            self._error = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with boltmq.launch(self.spec) as cluster:
            self.cluster = cluster
            self._ready.set()
            await self._stop.wait()


# -- the data the reads find ---------------------------------------------------------------------


async def wait_for_brokers(namesrv: str, names: set[str]) -> None:
    """Until the registry lists every broker of ``names``."""
    async with Admin(namesrv_addr=namesrv) as admin:
        # Generous: brokers start in processes of their own on a machine that may be busy.
        with trio.fail_after(180):
            while not names <= set((await admin.cluster_info()).broker_addr_table):
                await trio.sleep(0.1)


async def create_topic(namesrv: str, topic: str, queues: dict[str, int]) -> None:
    """``topic`` with ``queues[broker]`` queues on each named broker, once the route has them."""
    async with Admin(namesrv_addr=namesrv) as admin:
        masters = await admin.masters()
        for broker, count in queues.items():
            await admin.create_topic(topic, broker_addr=masters[broker], queue_nums=count)
        with trio.fail_after(60):
            while True:
                try:
                    route = await admin.route(topic)
                except Exception:
                    route = None
                if route is not None and {q.broker_name for q in route.queue_datas} == set(queues):
                    return
                await trio.sleep(0.1)


async def send_layout(namesrv: str, topic: str, layout: dict[tuple[str, int], int]) -> list[Sent]:
    """Messages with keys, tags and properties into each queue of ``layout``: the first of a
    queue alone (broker-a/2's is 8 KiB, stored compressed), the rest as one batch."""
    sent: list[Sent] = []
    async with Producer("pipeline-test-producer", namesrv_addr=namesrv) as producer:
        for (broker, queue_id), count in layout.items():
            queue = MessageQueue(topic=topic, broker_name=broker, queue_id=queue_id)
            messages = [_message(topic, broker, queue_id, i) for i in range(count)]
            if not messages:
                continue
            if (broker, queue_id) == ("broker-a", 2):
                messages[0].body = BIG_BODY
            first = await producer.send(messages[0], queue=queue)
            results = [(first.queue_offset, first.msg_id, messages[0])]
            if len(messages) > 1:
                batch = await producer.send_batch(messages[1:], queue=queue)
                ids = batch.msg_id.split(",")
                results += [(batch.queue_offset + k, ids[k], m)
                            for k, m in enumerate(messages[1:])]  # fmt: skip
            for offset, msg_id, message in results:
                keys = message.keys if isinstance(message.keys, str) else None
                sent.append(Sent(topic, broker, queue_id, offset, msg_id, message.body, keys,
                                 message.tags, dict(message.properties)))  # fmt: skip
    return sent


def _message(topic: str, broker: str, queue_id: int, i: int) -> Message:
    # Tags and properties vary: some messages have none, so nulls and empty maps are read too.
    tags = ("TagA", "TagB", None)[i % 3]
    properties = {"seq": str(i), "origin": f"{broker}/{queue_id}"} if i % 4 else {}
    keys = f"order-{queue_id}-{i} customer-{i % 5}" if i % 5 else None
    body = f"{topic}|{broker}|{queue_id}|{i}".encode()
    return Message(topic, body, tags=tags, keys=keys, properties=properties)


async def send_aged(namesrv: str) -> None:
    """AGED_MESSAGES messages of ~1 KiB into broker-r's topic, one queue."""
    queue = MessageQueue(topic=AGED, broker_name="broker-r", queue_id=0)
    async with Producer("pipeline-test-producer", namesrv_addr=namesrv) as producer:
        for start in range(0, AGED_MESSAGES, 40):
            batch = [Message(AGED, b"%05d" % i + b"." * AGED_BODY) for i in
                     range(start, start + 40)]  # fmt: skip
            await producer.send_batch(batch, queue=queue)


async def queue_offsets(namesrv: str, topic: str) -> dict[tuple[str, int], tuple[int, int]]:
    """(broker, queue id) -> (min offset, max offset) of every queue of ``topic``."""
    async with Admin(namesrv_addr=namesrv) as admin:
        table = (await admin.topic_stats(topic)).offset_table
    return {(q.broker_name, q.queue_id): (o.min_offset, o.max_offset) for q, o in table.items()}


# -- Spark ---------------------------------------------------------------------------------------


def spark_session() -> SparkSession:
    """The run's one session: local[2] on loopback, no UI, two shuffle partitions, quiet logs,
    the boltmq format registered the standard way (filter pushdown left at Spark's default,
    off; the tests that need it on say so with `filter_pushdown`)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    pipeline.use_current_python()
    session = (
        SparkSession.builder.master("local[2]")
        .appName("boltmq-pipeline-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(pipeline.BoltMQDataSource)
    return session


@contextmanager
def session_conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    """``key`` set to ``value`` in ``spark`` for the block, then as it was (or unset)."""
    before = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def filter_pushdown(spark: SparkSession, enabled: bool) -> AbstractContextManager[None]:
    """Spark's filter pushdown into Python data sources on or off for the block."""
    return session_conf(spark, PUSHDOWN_CONF, "true" if enabled else "false")


def read(spark: SparkSession, namesrv: str, **options: str) -> DataFrame:
    """``spark.read.format("boltmq")`` with ``namesrvAddr`` and ``options``."""
    reader = spark.read.format("boltmq").option("namesrvAddr", namesrv)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def rows_by_key(df: DataFrame) -> dict[tuple[str, str, int, int], dict[str, Any]]:
    """The rows, each as a dict, by (topic, broker, queue, offset); fails on a duplicate."""
    found: dict[tuple[str, str, int, int], dict[str, Any]] = {}
    for row in df.collect():
        item = row.asDict()
        key = (item["topic"], item["brokerName"], item["queueId"], item["queueOffset"])
        assert key not in found, f"read twice: {key}"
        found[key] = item
    return found


@attrs.frozen
class ClusterData:
    """What the session cluster holds for the tests."""

    namesrv: str
    #: The same registry over websocket (ws://host:port/).
    namesrv_websocket: str
    orders: list[Sent]
    events: list[Sent]
    #: time.monotonic() when the last of AGED's messages was stored.
    aged_sent_at: float


@contextmanager
def start_cluster(root: Path) -> Iterator[ClusterData]:
    """The session's cluster with its data sent; stopped when the block ends."""
    thread = ClusterThread(write_spec(root))
    cluster = thread.start()
    try:
        namesrv = cluster.namesrv_addr
        run(wait_for_brokers, namesrv, {"broker-a", "broker-b", "broker-r"})
        run(create_topic, namesrv, ORDERS, {"broker-a": 4, "broker-b": 3})
        run(create_topic, namesrv, EVENTS, {"broker-b": 2})
        run(create_topic, namesrv, AGED, {"broker-r": 1})
        # First, so that broker-r's retention (a round every 10 s) is done by the time the
        # data-loss test looks.
        run(send_aged, namesrv)
        aged_sent_at = time.monotonic()
        orders = run(send_layout, namesrv, ORDERS, ORDERS_LAYOUT)
        events = run(send_layout, namesrv, EVENTS, EVENTS_LAYOUT)
        [registry] = cluster.spec.registries
        websocket = f"ws://127.0.0.1:{registry.properties['websocketListenPort']}/"
        yield ClusterData(namesrv, websocket, orders, events, aged_sent_at)
    finally:
        thread.stop()
