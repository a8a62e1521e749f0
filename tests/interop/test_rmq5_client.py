"""The official RocketMQ 5 Python client (rocketmq-python-client 5.1.2) through `boltmq proxy`.

A real cluster process and the proxy on loopback (ephemeral ports); the official client runs
as a program of its own venv (tests/interop/rmq5_client.py) against the proxy's endpoint, and
what it sent is read back with BoltMQ's own 4.x client, straight from the broker. Each test
runs its asyncio part with ``asyncio.run`` (grpc.aio needs asyncio) under a deadline.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from actors.acl import AccessValidator
from boltmq.cli.proxy import PlainAclBook
from client import PullConsumer
from protocol.bodies import ConsumeFromWhere
from protocol.message import MessageConst, MessageExt
from proxy import ProxyServer
from tests.client.helpers import BoltProcess, poll_until
from tests.proxy.helpers import create_topic, proxy_cluster, running_proxy

from .rmq5_client import rmq5_python, run_rmq5

__all__ = ["proxy_cluster", "rmq5_python"]

pytestmark = [pytest.mark.timeout(180)]
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def _with_proxy(
    cluster: BoltProcess, topic: str, queues: int, body: Callable[[ProxyServer], Awaitable[None]]
) -> None:
    async def main() -> None:
        with anyio.fail_after(150):
            await create_topic(cluster.registry, topic, queues)
            async with running_proxy(cluster.registry) as proxy:
                await body(proxy)

    asyncio.run(main())


def _consumer(cluster: BoltProcess) -> PullConsumer:
    return PullConsumer(_unique("CG"), namesrv_addr=cluster.registry, consume_from_where=FIRST)


def test_official_producer_sends_200_messages_read_back_intact(
    proxy_cluster: BoltProcess, rmq5_python: Path, tmp_path: Path
) -> None:
    topic = _unique("Rmq5Normal")

    async def body(proxy: ProxyServer) -> None:
        lines = await run_rmq5(
            rmq5_python, tmp_path, "producer.py", f"127.0.0.1:{proxy.port}", "normal", topic,
            "200",
        )  # fmt: skip
        sent = {line["sent"]: line["i"] for line in lines}
        assert len(sent) == 200
        async with _consumer(proxy_cluster) as consumer:
            await consumer.subscribe(topic)
            stored = await poll_until(consumer, 200, timeout=30)
        by_id = {m.properties[MessageConst.UNIQ_KEY]: m for m in stored}
        assert set(by_id) == set(sent)
        for message_id, i in sent.items():
            message = by_id[message_id]
            assert message.body == f"normal-{i}".encode()
            assert message.tags == f"Tag{i % 3}"
            assert message.keys == [f"key-{i}"]
            assert message.properties["order"] == str(i)
        assert len({m.queue_id for m in stored}) == 4  # spread over every queue

    _with_proxy(proxy_cluster, topic, 4, body)


def test_official_fifo_sends_keep_each_message_group_in_one_queue(
    proxy_cluster: BoltProcess, rmq5_python: Path, tmp_path: Path
) -> None:
    topic = _unique("Rmq5Fifo")

    async def body(proxy: ProxyServer) -> None:
        lines = await run_rmq5(
            rmq5_python, tmp_path, "producer.py", f"127.0.0.1:{proxy.port}", "fifo", topic, "30"
        )
        assert len(lines) == 30
        async with _consumer(proxy_cluster) as consumer:
            await consumer.subscribe(topic)
            stored = await poll_until(consumer, 30, timeout=30)
        queues: dict[str, set[int]] = {}
        for message in stored:
            group = message.body.decode().split(":")[0]
            assert message.properties["__SHARDINGKEY"] == group
            queues.setdefault(group, set()).add(message.queue_id)
        assert sorted(queues) == ["group-0", "group-1", "group-2"]
        assert all(len(ids) == 1 for ids in queues.values()), queues
        for group in queues:  # and in send order within the queue
            order = [
                int(m.body.split(b":")[1]) for m in stored if m.body.startswith(group.encode())
            ]
            assert order == sorted(order)

    _with_proxy(proxy_cluster, topic, 8, body)


def test_official_delay_message_is_not_delivered_before_its_time(
    proxy_cluster: BoltProcess, rmq5_python: Path, tmp_path: Path
) -> None:
    topic = _unique("Rmq5Delay")

    async def body(proxy: ProxyServer) -> None:
        async with _consumer(proxy_cluster) as consumer:
            await consumer.subscribe(topic)
            (line,) = await run_rmq5(
                rmq5_python, tmp_path, "producer.py", f"127.0.0.1:{proxy.port}", "delay", topic,
                "4",
            )  # fmt: skip
            due = line["due"]
            got: list[MessageExt] = []
            with anyio.fail_after(due - time.time() + 20):
                while not got:
                    got = await consumer.poll(timeout=0.5)
                    if not got:
                        continue
                    # Seen only once due (the client's delivery time has whole seconds).
                    assert time.time() >= due - 0.05, (time.time(), due)
        (message,) = got
        assert message.body == b"delayed"
        assert message.properties[MessageConst.UNIQ_KEY] == line["sent"]
        assert int(message.properties[MessageConst.START_DELIVER_TIME]) == due * 1000

    _with_proxy(proxy_cluster, topic, 2, body)


def test_official_transactions_commit_roll_back_and_resolve_by_check_back(
    proxy_cluster: BoltProcess, rmq5_python: Path, tmp_path: Path
) -> None:
    topic = _unique("Rmq5Tx")

    async def body(proxy: ProxyServer) -> None:
        lines = await run_rmq5(
            rmq5_python, tmp_path, "producer.py", f"127.0.0.1:{proxy.port}", "transaction", topic
        )
        sent = {line["outcome"]: line["sent"] for line in lines if "outcome" in line}
        checked = [line["checked"] for line in lines if "checked" in line]
        # The server asked about the unresolved one (and only it), and the checker committed.
        assert set(checked) == {sent["check"]}, lines
        async with _consumer(proxy_cluster) as consumer:
            await consumer.subscribe(topic)
            stored = await poll_until(consumer, 2, timeout=30)
            assert await consumer.poll(timeout=1.5) == []  # the rolled back one never shows
        ids = {m.properties[MessageConst.UNIQ_KEY]: m.body for m in stored}
        assert ids == {sent["commit"]: b"commit", sent["check"]: b"check"}

    _with_proxy(proxy_cluster, topic, 2, body)


def test_official_client_signatures_pass_the_proxy_acl(
    proxy_cluster: BoltProcess, rmq5_python: Path, tmp_path: Path
) -> None:
    topic = _unique("Rmq5Acl")
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(
        "accounts:\n"
        "  - accessKey: rmq5-producer\n"
        "    secretKey: rmq5-secret\n"
        "    defaultTopicPerm: DENY\n"
        f"    topicPerms: [{topic}=PUB]\n"
    )
    validator = AccessValidator(acl_file)
    validator.load()

    async def main() -> None:
        with anyio.fail_after(150):
            await create_topic(proxy_cluster.registry, topic, 1)
            async with running_proxy(
                proxy_cluster.registry, acl_enable=True, accounts=PlainAclBook(validator)
            ) as proxy:
                endpoint = f"127.0.0.1:{proxy.port}"
                good = {"RMQ5_ACCESS_KEY": "rmq5-producer", "RMQ5_SECRET_KEY": "rmq5-secret"}
                (sent,) = await run_rmq5(
                    rmq5_python, tmp_path, "producer.py", endpoint, "try", topic, env=good
                )
                assert "sent" in sent, sent
                bad = {**good, "RMQ5_SECRET_KEY": "not-the-secret"}
                (refused,) = await run_rmq5(
                    rmq5_python, tmp_path, "producer.py", endpoint, "try", topic, env=bad
                )
                # The client reports the refused route lookup; the proxy's ACL refused it.
                assert "error" in refused, refused
                assert proxy.service is not None and proxy.service.acl is not None
                assert proxy.service.acl.refused >= 1

    asyncio.run(main())


def test_the_documented_example_runs(
    proxy_cluster: BoltProcess, rmq5_python: Path, tmp_path: Path
) -> None:
    topic = _unique("Rmq5Doc")
    page = (Path(__file__).parents[2] / "docs" / "proxy.md").read_text()
    program = (Path(__file__).parent / "rmq5" / "quickstart.py").read_text()
    example = program.split("line for line -")[1].split("\n", 1)[1].split("# -- end")[0]
    # The page shows the same lines, with the endpoint and topic written out.
    shown = example.replace(
        'endpoint, topic = sys.argv[1], sys.argv[2]  # the doc writes "127.0.0.1:8081", '
        '"TopicTest"\n',
        'endpoint, topic = "127.0.0.1:8081", "TopicTest"\n',
    ).replace('print(json.dumps({"sent": receipt.message_id}))', "print(receipt.message_id)")
    assert shown.strip() in page

    async def body(proxy: ProxyServer) -> None:
        (line,) = await run_rmq5(
            rmq5_python, tmp_path, "quickstart.py", f"127.0.0.1:{proxy.port}", topic
        )
        async with _consumer(proxy_cluster) as consumer:
            await consumer.subscribe(topic)
            (stored,) = await poll_until(consumer, 1, timeout=30)
        assert stored.properties[MessageConst.UNIQ_KEY] == line["sent"]
        assert stored.tags == "TagA" and stored.keys == ["order-1"]

    _with_proxy(proxy_cluster, topic, 1, body)
