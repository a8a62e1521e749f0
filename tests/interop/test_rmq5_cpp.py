"""The two official clients of two generations on one store: the RocketMQ 4.x C++ client
(PyPI ``rocketmq`` 0.4.4, remoting) and the RocketMQ 5 Python client (rocketmq-python-client
5.1.2, gRPC through `boltmq proxy`). What the C++ producer sends the 5.x SimpleConsumer
receives; what the 5.x producer sends the C++ push consumer receives, tags and keys intact.

The session's cluster process and a proxy on loopback (ephemeral ports); the 5.x client runs
from its own venv (tests/interop/rmq5_client.py), the C++ calls in threads.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from proxy.consume import ConsumeSettings
from tests.client.helpers import BoltProcess
from tests.proxy.helpers import create_topic, proxy_cluster, running_proxy
from tests.support.waiting import wait_until

from .cpp_client import rocketmq
from .rmq5_client import rmq5_python, run_rmq5

__all__ = ["proxy_cluster", "rmq5_python"]

pytestmark = [pytest.mark.timeout(180)]


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def test_cpp_producer_to_rmq5_simple_consumer(
    proxy_cluster: BoltProcess, rmq5_python: Path, tmp_path: Path
) -> None:
    topic, group = _unique("CppToRmq5"), _unique("CG_rmq5")

    async def main() -> None:
        with anyio.fail_after(150):
            await create_topic(proxy_cluster.registry, topic, 4)
            producer = rocketmq.Producer(_unique("CppPG"))
            producer.set_namesrv_addr(proxy_cluster.registry)
            await anyio.to_thread.run_sync(producer.start)
            ids = set()
            try:
                for i in range(20):
                    msg = rocketmq.Message(topic)
                    msg.set_tags("TagC")
                    msg.set_keys(f"cpp-{i}")
                    msg.set_body(f"from cpp {i}".encode())
                    result = await anyio.to_thread.run_sync(producer.send_sync, msg)
                    assert result.status == rocketmq.SendStatus.OK
                    ids.add(_text(result.msg_id))
            finally:
                await anyio.to_thread.run_sync(producer.shutdown)
            async with running_proxy(proxy_cluster.registry) as proxy:
                assert proxy.service is not None
                proxy.service.consume.settings = ConsumeSettings(
                    min_invisible_ms_for_receive=1000, min_long_polling_ms=1000
                )
                endpoint = f"127.0.0.1:{proxy.port}"
                lines = await run_rmq5(rmq5_python, tmp_path, "consume_simple.py", endpoint,
                                       "ack", topic, group, "20")  # fmt: skip
            got = [line for line in lines if "received" in line]
            assert sorted(line["body"] for line in got) == sorted(
                f"from cpp {i}" for i in range(20)
            )
            assert {line["received"] for line in got} == ids  # the C++ client's message ids
            assert [line["after"] for line in lines if "after" in line] == [0]

    asyncio.run(main())


def test_rmq5_producer_to_cpp_push_consumer(
    proxy_cluster: BoltProcess, rmq5_python: Path, tmp_path: Path
) -> None:
    topic = _unique("Rmq5ToCpp")

    async def main() -> None:
        with anyio.fail_after(150):
            await create_topic(proxy_cluster.registry, topic, 4)
            async with running_proxy(proxy_cluster.registry) as proxy:
                sent = await run_rmq5(rmq5_python, tmp_path, "producer.py",
                                      f"127.0.0.1:{proxy.port}", "normal", topic, "30")  # fmt: skip
            ids = {line["sent"] for line in sent if "sent" in line}
            assert len(ids) == 30
            lock = threading.Lock()
            got: dict[str, tuple[str, str, str]] = {}

            def inbox(message: Any) -> None:
                # Returning is success for the binding (raising asks for a redelivery).
                with lock:
                    got[_text(message.id)] = (
                        _text(message.body), _text(message.tags), _text(message.keys)
                    )

            consumer = rocketmq.PushConsumer(_unique("CppCG"))
            consumer.set_namesrv_addr(proxy_cluster.registry)
            consumer.subscribe(topic, inbox, "*")
            await anyio.to_thread.run_sync(consumer.start)
            try:
                await wait_until(lambda: len(got) >= 30, 90, "30 messages at the C++ consumer")
            finally:
                await anyio.to_thread.run_sync(consumer.shutdown)
            assert set(got) == ids
            assert {body for body, _, _ in got.values()} == {f"normal-{i}" for i in range(30)}
            assert {(body, tag, keys) for body, tag, keys in got.values()} == {
                (f"normal-{i}", f"Tag{i % 3}", f"key-{i}") for i in range(30)
            }

    asyncio.run(main())
