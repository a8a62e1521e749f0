"""The official RocketMQ C++ client (plaintext only) against a registry and a broker in
tlsServerMode permissive: the ports tell its plaintext frames from TLS and serve them, while
the project's client uses the same ports over TLS.

Loopback only, ephemeral ports, the certificate made with openssl, a deadline on every wait.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import trio

import boltmq
from client import Message, Producer
from tests.client.test_websocket import make_certificates
from tests.support.waiting import wait_until

from .cpp_client import rocketmq
from .test_cpp_client import Inbox, text, unique

pytestmark = pytest.mark.timeout(180)


async def test_cpp_client_over_plaintext_against_a_permissive_broker(tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.fail("the TLS tests make their certificates with the openssl command; install it")
    ca, cert, key = make_certificates(tmp_path)
    topic, group = unique("CppTlsTopic"), unique("CppTlsGroup")
    async with boltmq.embedded(
        tmp_path / "data",
        tls_server_mode="permissive",
        tls_server_cert_path=str(cert),
        tls_server_key_path=str(key),
    ) as cluster:
        namesrv = cluster.registry_address
        producer = rocketmq.Producer(unique("PG"))
        producer.set_namesrv_addr(namesrv)
        await trio.to_thread.run_sync(producer.start)
        bodies = [f"plaintext {i}".encode() for i in range(10)]
        try:
            for body in bodies:
                message = rocketmq.Message(topic)
                message.set_body(body)
                result = await trio.to_thread.run_sync(producer.send_sync, message)
                assert result.status == rocketmq.SendStatus.OK
        finally:
            await trio.to_thread.run_sync(producer.shutdown)
        # The same ports over TLS: the project's client, registry and broker both.
        async with Producer(unique("PG"), namesrv_addr=namesrv, tls_ca_file=str(ca)) as secure:
            for i in range(5):
                body = f"over tls {i}".encode()
                await secure.send(Message(topic, body))
                bodies.append(body)
            assert secure.instance.remoting.addresses()

        inbox = Inbox()
        consumer = rocketmq.PushConsumer(group)
        consumer.set_namesrv_addr(namesrv)
        consumer.subscribe(topic, inbox, "*")
        await trio.to_thread.run_sync(consumer.start)
        try:
            await wait_until(lambda: len(inbox.snapshot()) >= 15, 60, "15 messages")
        finally:
            await trio.to_thread.run_sync(consumer.shutdown)
        assert sorted(m["body"] for m in inbox.snapshot()) == sorted(bodies)
        assert {text(m["topic"]) for m in inbox.snapshot()} == {topic}
